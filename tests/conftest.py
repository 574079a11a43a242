"""pytest configuration: cocotb tier marked ``cocotb``; fixed seeds everywhere."""
import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "cocotb" in item.nodeid:
            item.add_marker(pytest.mark.cocotb)
