"""Models llmgate makes itself: the embedded tiny model and the exact-length tokenizer. Imports: core.

The layers: docs/architecture.md."""
