"""Stored baselines made by hand, for tests that need a baseline a real run would not give
(a higher acceptance rate, a longer max_model_len…) to show that an assertion can fail."""

import datetime
import json
from pathlib import Path

from pytest_benchmark.stats import Stats
from pytest_benchmark.utils import get_machine_id

from llmgate.store import benchmark_files, fingerprint as fingerprints
from llmgate.core import metrics


def fingerprint_for(matrix_path: Path, config_id: str) -> dict:
    """The fingerprint a run of ``config_id`` from that matrix file has on this machine."""
    from llmgate.device import hardware as device
    from llmgate.config import matrix
    from llmgate.models import tinymodel

    m = matrix.load(matrix_path)
    cfg = m.by_id(config_id)
    return fingerprints.fingerprint(cfg.describe(), tinymodel.model_hash(m.entry_model(cfg)), device.describe(),
                                {"engine": cfg.engine, "version": "hand-made", "commit": None}, m.scenarios.workload(cfg.device))


def write(root: Path, name: str, entries: dict[str, list[float]], matrix_path: Path | None = None,
          fingerprint: dict | None = None) -> Path:
    """``entries``: full benchmark name (``<node id>::<metric key>``) → values in natural units.
    Fingerprints come from ``matrix_path`` (the entry id in the node id's brackets), else ``fingerprint``."""
    import re

    benches = []
    for fullname, values in entries.items():
        if matrix_path is not None:
            fp = fingerprint_for(matrix_path, re.search(r"\[([^\]]+)\]", fullname).group(1))
        else:
            fp = fingerprint

        key = fullname.rsplit("::", 1)[1]
        metric = metrics.get(key)
        st = Stats()
        for v in values:
            st.update(metric.cost(v))
        benches.append({
            "group": metric.label, "name": fullname.split("::", 1)[1], "fullname": fullname, "params": None,
            "param": None, "options": {},
            "extra_info": {benchmark_files.EXTRA_KEY: {"schema": benchmark_files.SCHEMA_VERSION, "metric": metric.name, "key": key,
                                                "unit": metric.unit, "better": metric.better, "values": values,
                                                "boots": [values], "fingerprint": fp}},
            "stats": {**st.as_dict(), "iterations": 1},
        })
    data = {"machine_info": {"node": "hand-made"}, "commit_info": {}, "benchmarks": benches,
            "datetime": datetime.datetime.now(datetime.timezone.utc).isoformat(), "version": "5.3.1"}
    path = root / "baselines" / get_machine_id() / f"0001_{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return path
