"""The lever and quality workloads the packaged scenarios use (A/B, the max_model_len probe, quality checks) and bisection. Imports: everything below runner.

The layers: docs/architecture.md."""
