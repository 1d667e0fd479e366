"""tests/engine: each test boots a real engine on the CPU and checks what llmgate does with it."""

import pytest


def pytest_itemcollected(item):
    item.add_marker(pytest.mark.real_engine)
