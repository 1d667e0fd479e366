"""Load generation: the streaming client, typed samples, prompts and workloads. Imports: process, engines, models, config, core.

The layers: docs/architecture.md."""
