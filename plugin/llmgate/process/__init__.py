"""Server processes: boot, readiness, teardown, the watchdog, process trees, strays, signal handling. Imports: config, engines, device, models, core.

The layers: docs/architecture.md."""
