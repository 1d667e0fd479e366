"""The packaged scenarios: ``pytest --pyargs llmgate.scenarios`` runs them on the matrix
(``llmgate.toml`` at the rootdir, else ``[tool.llmgate]`` in pyproject.toml, else the embedded
default).  Each is a test module written with the public API (``llmgate.scenario()``, the
``gate`` fixture, ``llmgate.metrics``); a baseline key is the scenario's name, the entry and
the metric (``decode_c1[cpu-vllm-tiny]::decode_tok_s``), wherever the files are installed."""
