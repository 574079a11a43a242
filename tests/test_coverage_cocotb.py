"""cocotb + Verilator cases added for coverage (``make coverage``, docs/testing.md "Coverage"):
stimulus the blocks' own testbenches leave out, checked against the same golden models."""
import pytest

from sim.tb.runner import run_cocotb


@pytest.mark.parametrize("testcase", ["every_width_pair", "heavy_backpressure"])
def test_systolic_array_sweep_cocotb(testcase):
    run_cocotb("systolic_array", "tiny", "sim.tb.array_sweep",
               name=f"systolic_array_sweep_{testcase}", testcase=testcase)


def test_systolic_array_s8_every_width_pair_cocotb():
    """The S = 8 array at every width pair (its own tests drive 2x2 and 8x6): the fMACs of its
    64 PEs reach the chunk tables of every pair, as at S = 4."""
    run_cocotb("systolic_array", "default", "sim.tb.array_sweep",
               name="systolic_array_s8_sweep_every_width_pair", testcase="every_width_pair")
