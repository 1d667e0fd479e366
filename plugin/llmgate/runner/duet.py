"""A duet: both sides of an A/B comparison resident on one machine (the pool boots them one after the
other on each boot pair), and each scenario run once per side, each in a thread of its own, with a
``gate`` bound to that side's server.  Their load is interleaved by ``Turns``: one side at a time
has the machine, request by request where a scenario sends one request at a time, window by window
under load, in an order drawn at random within each pair of turns.  A test measured over steady
windows runs in rounds (``[scenarios] duet_rounds``, each round's windows that much shorter), so
that its windows alternate too (A B, B A …) and the rounds' paired ratios say what the machine's
drift between windows leaves.  What moves the machine (its state on this boot pair, a minute's
drift, a neighbour) then falls on both sides alike and cancels in B ÷ A
(``analysis.paired.judge_duet``)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import random
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from llmgate.process.server import ServerHandle
from llmgate.runner.boots import MeasurementBoot

if TYPE_CHECKING:
    from llmgate.runner.run import GateRun

# a side that has held the machine this long without asking for a turn (a long computation, or stuck on
# something else) no longer holds the other up: the other goes, out of turn
GRACE_S = 60.0


class Cancelled(Exception):
    """The duet was stopped (the other side failed, or the run is stopping): no more turns."""


class Turns:
    """Who runs, and whose turn it is to put load on the machine.

    Only one side's thread runs at a time: it holds the baton from the start of one of its turns (a
    request, a window) through whatever it works out after it (statistics, the engine's /metrics,
    the next prompts) until it asks for its next turn, is ``parked`` (waits on something else, such as
    a figure the other side is working out) or ends.  So the other side's work never shares the
    host's cores or the interpreter's lock with a measurement in flight (on a 2-core machine, or a
    client thread waiting up to the interpreter's switch interval for its first token's timestamp).
    The sides' turns go in pairs, one each, in an order drawn (seeded) for each pair; a side ahead of
    the other waits for it, unless the other has ended or is parked (or has held the baton ``grace_s``
    without asking: then this side goes out of turn, counted)."""

    def __init__(self, sides: tuple[str, str], seed: str, grace_s: float = GRACE_S):
        self.sides = sides
        self._cv = threading.Condition()
        self._units = {s: 0 for s in sides}
        self._waiting: set[str] = set()
        self._parked: set[str] = set()
        self._done: set[str] = set()
        self._holder: str | None = None
        self._held_since = time.monotonic()
        self._rng = random.Random(f"llmgate-duet:{seed}")
        self._first: list[str] = []
        self._grace = grace_s
        self.order: list[str] = []              # the sides' turns as they ran
        self.out_of_turn = 0                    # turns taken while the other side held the baton beyond grace
        self.cancelled = False

    def _other(self, side: str) -> str:
        return self.sides[1] if side == self.sides[0] else self.sides[0]

    def _first_of(self, p: int) -> str:
        while len(self._first) <= p:
            self._first.append(self._rng.choice(self.sides))
        return self._first[p]

    def _take(self, side: str) -> None:
        self._holder, self._held_since = side, time.monotonic()

    def _release(self, side: str) -> None:
        if self._holder == side:
            self._holder = None
            self._cv.notify_all()

    def _may_go(self, side: str) -> tuple[bool, bool]:
        """(may this side start a turn now, is it out of its turn)."""
        other = self._other(side)
        if self._holder is not None:
            late = (self._holder == other and other not in self._waiting
                    and time.monotonic() - self._held_since > self._grace)
            return late, late
        if other in self._done or other in self._parked:
            return True, False
        mine, theirs = self._units[side], self._units[other]
        return mine < theirs or (mine == theirs and self._first_of(mine) == side), False

    def _wait(self, ready) -> None:
        while True:
            if self.cancelled:
                raise Cancelled("the duet was stopped")
            if ready():
                return
            self._cv.wait(timeout=0.25)

    def begin(self, side: str) -> None:
        """A side's thread starts: it runs once no other side does."""
        with self._cv:
            self._wait(lambda: self._holder is None)
            self._take(side)

    @contextlib.contextmanager
    def turn(self, side: str) -> Iterator[None]:
        """Hold the machine for one of ``side``'s turns (a request, a window); the side keeps the baton
        after it, until it asks for its next turn."""
        with self._cv:
            self._release(side)
            self._waiting.add(side)
            self._cv.notify_all()
            late = False

            def ready() -> bool:
                nonlocal late
                go, late = self._may_go(side)
                return go
            try:
                self._wait(ready)
            finally:
                self._waiting.discard(side)
            self._take(side)
            self.out_of_turn += late
        try:
            yield
        finally:
            with self._cv:
                self._units[side] += 1
                self.order.append(side)
                self._cv.notify_all()

    @contextlib.contextmanager
    def parked(self, side: str) -> Iterator[None]:
        """``side`` waits on something other than a turn (a figure the other side is working out): it
        lets go of the baton, and the other does not wait for it meanwhile; it runs again once no
        other side does."""
        with self._cv:
            self._release(side)
            self._parked.add(side)
            self._cv.notify_all()
        try:
            yield
        finally:
            with self._cv:
                self._parked.discard(side)
                self._cv.notify_all()
                while self._holder is not None and not self.cancelled:
                    self._cv.wait(timeout=0.25)
                self._take(side)

    def finish(self, side: str) -> None:
        with self._cv:
            self._done.add(side)
            self._release(side)
            self._cv.notify_all()

    def cancel(self) -> None:
        with self._cv:
            self.cancelled = True
            self._cv.notify_all()

    def summary(self) -> str:
        """The turns as they ran, e.g. ``A B B A … (412 turns, 0 out of turn)``."""
        if not self.order:
            return "no turns (nothing was sent)"
        shown = " ".join(self.order[:12]) + (" …" if len(self.order) > 12 else "")
        return f"{shown} ({len(self.order)} turns, {self.out_of_turn} out of turn)"


@dataclasses.dataclass
class DuetSide:
    """One side of a duet as its thread sees it: its name, its server, the turns it shares, and the
    duet it belongs to (``DuetRun``: both sides' recorders)."""
    name: str
    handle: ServerHandle | None           # None: a test that boots no server (llmgate's own, engine-free)
    turns: Turns
    run: DuetRun

    # the grain of this side's last turn: "request" (one request sent one at a time, interleaved with the
    # other side's) or "window" (a whole window under load): what a figure recorded after it rests on
    grain: str = "request"
    # a test measured over steady windows runs in rounds (``[scenarios] duet_rounds``): the test's function
    # again, each round's windows shorter, in turns with the other side's; ``round`` is the one running
    rounds: int = 1
    round: int = 1
    windows: bool = False                 # this side ran a steady window in this test (so: rounds)

    def turn(self, grain: str = "window") -> contextlib.AbstractContextManager[None]:
        self.grain = grain
        return self.turns.turn(self.name)

    def round_window(self, sizes: dict[str, Any], split: bool) -> dict[str, Any]:
        """(a steady window about to run: the test runs in rounds) This round's window: ``sizes`` (a
        ``load.steady.Steady``'s fields) each 1/rounds as long where the rounds ``split`` the window, else
        a whole one; after the side's first round its server is warm (one warm-up segment fills the load)."""
        self.windows = True
        sizes = dict(sizes)
        if split and self.rounds > 1:
            sizes.update(min_s=sizes["min_s"] / self.rounds, max_s=sizes["max_s"] / self.rounds,
                         min_requests=max(1, -(-int(sizes["min_requests"]) // self.rounds)))
        if self.round > 1:
            sizes.update(settled=True)
        return sizes

    @property
    def more_rounds(self) -> bool:
        """Another round of this test follows on this boot pair (its figures are judged after the last)."""
        return self.windows and self.round < self.rounds

    def parked(self) -> contextlib.AbstractContextManager[None]:
        return self.turns.parked(self.name)



@dataclasses.dataclass
class DuetRun:
    """One test's duet: the sides (baseline first), the recorders of both (``Recorder``; side B's is
    the test's: its verdicts pass or fail it)."""
    sides: tuple[str, str]
    recorders: dict[str, Any] = dataclasses.field(default_factory=dict)


def duet_boot(item: pytest.Item) -> MeasurementBoot | None:
    """The boot pair a test measures when its entry's plan is a duet; None otherwise."""
    callspec = getattr(item, "callspec", None)
    boot = callspec.params.get("llmgate_boot") if callspec else None
    return boot if isinstance(boot, MeasurementBoot) and boot.plan.duet else None


def call(item: pytest.Function, gate_run: GateRun) -> bool:
    """(``pytest_pyfunc_call``) Run a duet's test: its function once per side, at the same time, each in
    a thread with a ``gate`` (and ``llmgate_server``, ``llmgate_prompts``) of its side, the load
    interleaved by one ``Turns``.  False when the test is not a duet's (pytest calls it as usual).
    The first failure of either side is the test's; the other side is stopped at its next turn."""
    from llmgate.runner.compare import duet as duet_compare
    from llmgate.runner.gate import RECORDER_KEY, Gate

    boot = duet_boot(item)
    if boot is None:
        return False
    cfg = item.callspec.params["llmgate_config"]
    names = (boot.plan.sides[0][0], boot.plan.sides[1][0])
    handles = {names[0]: gate_run.pool.handle(cfg.id), names[1]: gate_run.pool.partner(cfg.id)}
    missing = [n for n, h in handles.items() if h is None]
    if missing and "llmgate_server" in item.fixturenames:
        pytest.fail(f"{cfg.id}: duet: side {', '.join(missing)}'s server is not running", pytrace=False)
    turns = Turns(names, item.nodeid)
    run = DuetRun(names)
    rounds = max(1, int(gate_run.matrix.scenarios.duet_rounds))
    sides: dict[str, DuetSide] = {}
    args: dict[str, dict[str, Any]] = {}
    base = {a: item.funcargs[a] for a in item._fixtureinfo.argnames}
    for name in names:
        h = handles[name]
        side = sides[name] = DuetSide(name, h, turns, run, rounds=rounds)
        gate = Gate(item, gate_run, getattr(item, "_request", None), side=side)
        run.recorders[name] = gate._recorder
        own = dict(base)
        if "gate" in own:
            own["gate"] = gate
        if "llmgate_server" in own:
            own["llmgate_server"] = h
        if "llmgate_prompts" in own:
            own["llmgate_prompts"] = gate_run.pool.prompts(h)
        args[name] = own
    item.stash[RECORDER_KEY] = run.recorders[names[1]]       # side B's verdicts pass or fail the test
    errors: list[tuple[str, BaseException]] = []

    def body(name: str) -> None:
        try:
            turns.begin(name)
            item.obj(**args[name])
            side = sides[name]
            while side.more_rounds:              # a test of steady windows: its next round, in turns with the other's
                side.round += 1
                item.obj(**args[name])
        except Cancelled:
            pass
        except BaseException as e:                  # the test's failure (assert, pytest.fail, skip): raised below
            errors.append((name, e))
            turns.cancel()
        finally:
            turns.finish(name)

    threads = [threading.Thread(target=body, args=(n,), name=f"llmgate-duet-{cfg.id}-{n}", daemon=True) for n in names]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except BaseException:                            # an interrupt in the main thread: stop both sides
        turns.cancel()
        raise
    if not errors:
        duet_compare.finish(run.recorders[names[1]])          # what only one side recorded on the last pair
    gate_run.say(f"llmgate: {item.nodeid}: duet turns {turns.summary()}")
    if errors:
        name, e = errors[0]
        if len(errors) > 1:
            gate_run.note_once(f"{cfg.id}: duet: side {errors[1][0]} failed too: {type(errors[1][1]).__name__}: "
                               f"{str(errors[1][1]).splitlines()[0] if str(errors[1][1]) else ''}")
        raise e
    return True


def side_turn(side: DuetSide | None) -> Any:
    """A duet side's request-by-request turn, or None: what the load functions take as ``turn``."""
    return functools.partial(side.turn, "request") if side is not None else None
