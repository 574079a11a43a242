"""pytest configuration: cocotb tier marked ``cocotb``, tests of the Verilated core's C++ loop
``verilator``; fixed seeds everywhere."""
import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "cocotb" in item.nodeid:
            item.add_marker(pytest.mark.cocotb)
        if "verilated" in item.nodeid:
            item.add_marker(pytest.mark.verilator)
