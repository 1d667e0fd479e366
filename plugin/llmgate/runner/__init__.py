"""One run of llmgate (one pytest invocation): the run object (``run.GateRun``), its server pool, settings, the gate fixture's object, distribution over pytest-xdist, the confirmation policy. Imports: every layer below.

The layers: docs/architecture.md."""
