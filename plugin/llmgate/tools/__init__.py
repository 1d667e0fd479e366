"""Builders outside a run: llama-server from its sdist (install), cached virtualenvs (venvs). Imports nothing of llmgate above core.

The layers: docs/architecture.md."""
