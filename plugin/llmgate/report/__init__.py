"""Reports: terminal tables, report.json, summary.md, plots, the seed's reference figures. Imports: store, analysis, config, core.

The layers: docs/architecture.md."""
