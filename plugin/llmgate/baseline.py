"""Baselines through pytest-benchmark's storage (``baselines/`` by default).

Every recorded metric becomes one pytest-benchmark entry named
``<test node id>::<metric key>``.  Its timing data are the metric's values in
"bigger is worse" form (seconds as they are; tok/s as seconds per token), so
``--benchmark-compare-fail=median:10%`` works in the right direction, and its
``extra_info["llmgate"]`` holds the natural values, unit, direction and
provenance that llmgate's own verdict reads back.
"""

from __future__ import annotations

from typing import Any

import pytest

from .metrics import Metric

EXTRA_KEY = "llmgate"
SCHEMA_VERSION = 1


def benchmark_session(config: pytest.Config):
    return getattr(config, "_benchmarksession", None)


def store(item: pytest.Item, metric: Metric, key: str, values: list[float], extra: dict[str, Any]) -> bool:
    """Add one metric of ``item`` to pytest-benchmark's results; False when benchmarks are disabled."""
    from pytest_benchmark.fixture import BenchmarkFixture

    bs = benchmark_session(item.config)
    if bs is None or bs.disabled:
        return False
    fx = BenchmarkFixture(item, add_stats=bs.benchmarks.append, logger=bs.logger, warner=item.warn,
                          disabled=bs.disabled, **bs.options)
    fx.name = f"{item.name}::{key}"
    fx.fullname = f"{item.nodeid}::{key}"
    fx.group = f"{metric.label} [{metric.unit}; stored as {'1/x' if metric.better == 'higher' else 'x'}]"
    fx.extra_info = {EXTRA_KEY: {"schema": SCHEMA_VERSION, "metric": metric.name, "key": key, "unit": metric.unit,
                                 "better": metric.better, "values": list(values), **extra}}
    meta = fx._make_stats(1)
    for v in values:
        meta.stats.update(metric.cost(v))
    return True


def compare_active(config: pytest.Config) -> bool:
    bs = benchmark_session(config)
    return bool(bs is not None and bs.compare and bs.compared_mapping is not None)


def baseline(config: pytest.Config, nodeid: str, key: str) -> tuple[str, dict[str, Any]] | None:
    """The stored entry for ``nodeid::key`` in the file(s) named by --benchmark-compare (the newest wins)."""
    bs = benchmark_session(config)
    if bs is None or not bs.compared_mapping:
        return None
    found = None
    for path, mapping in bs.compared_mapping.items():
        bench = mapping.get(f"{nodeid}::{key}")
        if bench is not None:
            found = (str(path), bench)
    return found


def baseline_values(bench: dict[str, Any]) -> list[float] | None:
    info = (bench.get("extra_info") or {}).get(EXTRA_KEY)
    if not isinstance(info, dict) or not isinstance(info.get("values"), list):
        return None
    return [float(v) for v in info["values"]]
