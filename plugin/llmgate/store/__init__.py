"""What outlives a run: baselines (the pytest-benchmark boundary, keys, fingerprints) and the run history. Imports: analysis, device, config, core.

The layers: docs/architecture.md."""
