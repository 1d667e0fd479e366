"""Statistics and verdicts: percentiles, the noise model, direction-aware comparisons, change points. Imports: load (samples), core.

The layers: docs/architecture.md."""
