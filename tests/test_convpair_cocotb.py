"""cocotb + Verilator tier of SharedConverter (sim/tb/convpair.py) at preset "tiny" (S = 4):
both paths' groups and statistics bit-exact with each path's own model under random traffic,
a held path that blocks nothing, and statistics loaded with random values."""
import pytest

from sim.tb.runner import run_cocotb


@pytest.mark.parametrize("testcase", ["both_paths", "held_output", "loaded_statistics"])
def test_shared_converter_cocotb(testcase):
    run_cocotb("shared_converter", "tiny", "sim.tb.convpair",
               name=f"shared_converter_cocotb_{testcase}", testcase=testcase)
