"""The lever and quality workloads the packaged scenarios use (the max_model_len probe, quality checks, what entries share) and bisection (each step a pytest run of A/B mode). Imports: everything below runner.

The layers: docs/architecture.md."""
