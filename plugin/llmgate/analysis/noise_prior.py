"""The between-boot noise a one-boot-a-side comparison assumes, since no boot measured it.

With one boot on each side (the CPU default) and a baseline that stored no between-boot noise,
a move the size of one boot's swing cannot be told from a change: on the 2-core CI machine one
vLLM boot's decode speed or TTFT moves 15–40% against the next.  Such a verdict therefore
takes the between-boot variation from ``data/noise_prior.json``: a conservative coefficient of
variation per device kind (and per metric where one was seen to swing more), measured on these
machines, with the degrees of freedom of a small sample so that the t-test's tails stay wide.
It is applied to what timing decides (metrics in seconds or tok/s, and the ratios named in the
file; what the file's ``seen`` says it rests on), never to quality figures, whose repeats are not noisy in that way.  Every verdict that used
it says so, and the session's note keeps recommending more boots (``--llmgate-boots``)."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib.resources import files
from typing import Any

from llmgate.core.metrics import Metric
from llmgate.analysis.stats import Noise


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    return json.loads(files("llmgate").joinpath("data/noise_prior.json").read_text(encoding="utf-8"))


def applies(metric: Metric) -> bool:
    t = table()
    return metric.unit in t["units"] or metric.name in t["metrics"]


def assumed(device: str | None, metric: Metric) -> tuple[Noise, str] | None:
    """(the assumed between-boot noise, where it comes from) for one metric of an entry on
    ``device`` ("cpu" or "gpu"); None when no prior applies (quality figures, an unknown device)."""
    if device is None or not applies(metric):
        return None
    dev = table()["devices"].get(device)
    if dev is None:
        return None
    cv = float(dev["metrics"].get(metric.name, dev["cv"]))
    noise = Noise(between=math.log1p(cv) ** 2, df=int(dev["df"]), within=None, within_df=0, repeats=1.0)
    return noise, f"llmgate's prior for a {device} entry, between-boot CV {cv:.0%}"


def machine_offset(device: str | None, metric: Metric) -> tuple[float, str] | None:
    """(the log-scale variance, in words) of the offset between two machines of ``device``'s kind for
    ``metric``: what a comparison with a stored baseline from another machine cannot tell from a
    change, however many boots; None where no offset is known (quality figures, an unknown device)."""
    if device is None:
        return None
    kind = table().get("machine_offset", {}).get(device)
    if not kind or metric.unit not in kind:
        return None
    cv = float(kind[metric.unit])
    return math.log1p(cv) ** 2, f"machine offset (baseline from another machine: CV {cv:.0%} assumed, llmgate's prior)"


def session_offset(device: str | None, metric: Metric) -> tuple[float, str] | None:
    """(the log-scale variance, in words) of the shift between two sessions of one machine of
    ``device``'s kind for ``metric`` (per metric: those seen to shift as a session): what a comparison
    with a stored baseline of an earlier session cannot tell from a change, however many boots; None
    where none was seen or measured (decode, TPOT, E2E, quality figures, same-session ratios, the CPU)."""
    if device is None:
        return None
    kind = table().get("session_offset", {}).get(device)
    if not kind:
        return None
    cv = kind.get("metrics", {}).get(metric.name)
    if cv is None:
        return None
    cv = float(cv)
    return (math.log1p(cv) ** 2,
            f"session offset (baseline from an earlier session of this machine: CV {cv:.0%} assumed, llmgate's prior)")


def stored_offset(device: str | None, metric: Metric, same_machine: bool) -> tuple[float, str] | None:
    """The offset a comparison with a stored baseline carries: the session offset for one of this
    machine, the larger of the machine and the session offsets for one of another machine (or of an
    unrecorded one), since another machine is also another session."""
    session = session_offset(device, metric)
    if same_machine:
        return session
    machine = machine_offset(device, metric)
    if machine is None or (session is not None and session[0] > machine[0]):
        return session
    return machine


def duet_assumed(device: str | None, metric: Metric, grain: str = "request") -> tuple[float, int, str] | None:
    """(log-scale variance, df, in words) of the prior for a duet's pair part on ``device``: what a boot
    pair adds to log(B ÷ A) beyond its requests' sampling, pooled with the pairs' own
    (``analysis.paired.judge_duet``); ``grain``: "request" (the sides' requests interleaved one by one)
    or "window" (whole windows under load in turn: what moves the machine between two windows is not
    cancelled, so its prior is the wider); None where no prior applies (quality figures, an unknown device)."""
    if device is None or not applies(metric):
        return None
    dev = table().get("duet", {}).get(device)
    if not dev:
        return None
    part = dev.get(grain) or dev["request"]
    cv = float(part.get("metrics", {}).get(metric.name, part.get("units", {}).get(metric.unit, part["cv"])))
    return (math.log1p(cv) ** 2, int(part["df"]),
            f"llmgate's prior for a {device} duet, "
            f"{'in rounds of windows' if grain == 'rounds' else f'{grain} by {grain}'} (pair part {cv:.1%}, df {part['df']})")
