# llmgate itself is loaded through its pytest11 entry point (pip install -e .);
# the self-tests drive pytest inside pytest with the pytester plugin.
pytest_plugins = ["pytester"]
