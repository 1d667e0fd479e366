"""An entry's measurement boots: how many (K, from ``--llmgate-boots``, the entry's ``boots``, A/B
mode), how A/B mode compares its two sides (a duet: both resident on each of K boot pairs, the
measurement interleaved between them; or alternating boots, A B A B …), and which boot (or boot
pair) a test measures.  Decided once per entry (``EntryBoots.decide``, where tests are parametrized
and where the pool boots), and passed down as the value of the ``llmgate_boot`` parameter."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from llmgate.config.matrix import ServerConfig
from llmgate.runner.settings import Settings

Sides = tuple[tuple[str, str], ...]      # A/B mode's (name, launcher) pairs, baseline first; () otherwise


def side_of(sides: Sides, k: int) -> tuple[str, str, int] | None:
    """A/B mode: measurement boot k's side (name, launcher) and its number on that side: the side's first boot, second, … (boots
    alternate A B A B …); None otherwise."""
    if not sides:
        return None
    name, launcher = sides[(k - 1) % len(sides)]
    return name, launcher, (k - 1) // len(sides) + 1


def side_config(cfg: ServerConfig, launcher: str) -> ServerConfig:
    """Entry ``cfg`` with a side's launcher ("": the entry's own, as --llmgate-pinned's side "current")."""
    return dataclasses.replace(cfg, launcher=launcher) if launcher else cfg


def boot_config(cfg: ServerConfig, sides: Sides, k: int) -> tuple[ServerConfig, str | None]:
    """The configuration measurement boot k boots (its side's launcher in A/B mode) and the side."""
    side = side_of(sides, k)
    if side is None:
        return cfg, None
    return side_config(cfg, side[1]), side[0]


@dataclasses.dataclass(frozen=True)
class EntryBoots:
    """The measurement boots of one entry in this session: ``per_side`` (K) boots; in A/B mode K a
    side, alternating between ``sides``, or, in a ``duet``, K boot pairs (both sides booted one after
    the other and resident together, each test measuring both, interleaved).  ``fallback``: why a
    duet that was asked for became alternating boots ("" when it did not)."""
    per_side: int
    sides: Sides = ()
    duet: bool = False
    fallback: str = ""

    @classmethod
    def decide(cls, settings: Settings, cfg: ServerConfig, two_fit: Callable[[ServerConfig], str | None] | None = None
               ) -> EntryBoots:
        """K for ``cfg``: ``--llmgate-boots``, else the entry's ``boots``, else 3 on a GPU and 1 on the
        CPU (but 3 in A/B mode, alternating: an A/B comparison of one boot a side sees nothing; 2 boot
        pairs in a duet on the CPU).  In A/B mode with ``--llmgate-ab-mode duet`` (the default), a duet
        unless ``two_fit(cfg)`` says why both sides' budgets do not fit the machine together."""
        why = ""
        duet = bool(settings.ab) and settings.ab_mode == "duet"
        if duet and two_fit is not None:
            why = two_fit(cfg) or ""
            duet = not why
        if settings.boots is not None:
            k = settings.boots
        elif cfg.boots is not None:
            k = cfg.boots
        elif duet:
            k = 3 if cfg.device == "gpu" else 2
        else:
            k = 3 if cfg.device == "gpu" or settings.ab else 1
        return cls(k, settings.ab, duet, why)

    @property
    def total(self) -> int:
        """All the entry's measurement boots: K, or K a side in A/B mode (K boot pairs in a duet)."""
        return self.per_side if self.duet else self.per_side * (len(self.sides) or 1)

    def side(self, k: int) -> tuple[str, str, int] | None:
        """Alternating A/B mode: boot k's side (name, launcher, its number on that side: the side's first boot, second, …); None in a duet
        (both sides are up on every boot pair) and outside A/B mode."""
        return None if self.duet else side_of(self.sides, k)

    def config(self, cfg: ServerConfig, k: int) -> tuple[ServerConfig, str | None]:
        return (cfg, None) if self.duet else boot_config(cfg, self.sides, k)

    def test_id(self, cfg: ServerConfig, k: int) -> str:
        """The id of boot k's test: ENTRY-bootK, in A/B mode ENTRY-bootK.SIDE (store.keys.stored_key
        reads it), in a duet ENTRY-pairK, or ENTRY alone where the entry has one boot."""
        side = self.side(k)
        if side is not None:
            return f"{cfg.id}-boot{k}.{side[0]}"
        if self.duet:
            return f"{cfg.id}-pair{k}"
        return cfg.id if self.total == 1 else f"{cfg.id}-boot{k}"

    def boots(self) -> list[MeasurementBoot]:
        return [MeasurementBoot(k, self) for k in range(1, self.total + 1)]


class MeasurementBoot(int):
    """The value of the ``llmgate_boot`` parameter: k, the measurement boot a test measures (an
    int, 1-based), with the entry's ``plan`` it belongs to (``of``: K in all; ``side``: A/B mode's
    side, its launcher and its number on that side: the side's first boot, second, …)."""
    plan: EntryBoots

    def __new__(cls, k: int, plan: EntryBoots) -> MeasurementBoot:
        boot = super().__new__(cls, k)
        boot.plan = plan
        return boot

    def __getnewargs__(self) -> tuple[int, EntryBoots]:  # type: ignore[override]
        # copy and pickle make it again from k and its plan
        return int(self), self.plan

    @property
    def of(self) -> int:
        return self.plan.total

    @property
    def side(self) -> tuple[str, str, int] | None:
        return self.plan.side(int(self))
