"""Types every layer shares, importing nothing of llmgate: matrix entries and metric definitions.

The layers: docs/architecture.md."""
