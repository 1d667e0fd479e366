"""tests/timing: each test asserts on what it times, so it runs alone (``tox -e selftest`` runs this
folder without xdist, after the others); those that boot a real engine say so (``real_engine``)."""

import pytest


def pytest_itemcollected(item):
    item.add_marker(pytest.mark.timing)
