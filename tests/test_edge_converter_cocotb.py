"""cocotb + Verilator tier of the array-edge converter (sim/tb/edge_converter.py), preset
``default`` (32-bit integer, 10-bit exponent)."""
from sim.tb.runner import run_cocotb


def test_edge_converter_cocotb():
    run_cocotb("edge_converter", "default", "sim.tb.edge_converter",
               name="edge_converter_cocotb_default")
