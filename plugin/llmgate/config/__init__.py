"""The matrix: TOML loading, validation against the registered engines, ids, the default matrix. Imports: core, models, engines.

The layers: docs/architecture.md."""
