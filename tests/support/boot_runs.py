"""A pytester run of a matrix and a test file whose values per entry and boot come from the
environment (``VALUES``: entry id → one list of values per boot), for tests of the boot machinery
that need no engine."""

import json

import pytest


def run(pytester, entries: str, test_src: str, values, *args):
    pytester.makefile(".toml", llmgate=entries)
    pytester.makepyfile(test_rec=test_src)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VALUES", json.dumps(values))
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
