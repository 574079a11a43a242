"""cocotb + Verilator cases added for coverage (``make coverage``, docs/testing.md "Coverage"):
stimulus the blocks' own testbenches leave out, checked against the same golden models."""
import pytest

from sim.tb.runner import run_cocotb


@pytest.mark.parametrize("testcase", ["every_width_pair", "heavy_backpressure"])
def test_systolic_array_sweep_cocotb(testcase):
    run_cocotb("systolic_array", "tiny", "sim.tb.array_sweep",
               name=f"systolic_array_sweep_{testcase}", testcase=testcase)
