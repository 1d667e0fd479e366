"""What outlives a run: baselines (the pytest-benchmark boundary, keys, fingerprints), the run history, and the record of a finished run that the history and the reports read (`finished`). Imports: analysis, device, config, core.

The layers: docs/architecture.md."""
