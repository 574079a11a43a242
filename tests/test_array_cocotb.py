"""cocotb + Verilator tier of the systolic array (preset tiny, S = 4): see sim/tb/array.py."""
import pytest

from sim.tb.runner import run_cocotb


@pytest.mark.parametrize("testcase", ["random_tiles_all_modes", "back_to_back_throughput",
                                      "reset_mid_operation"])
def test_systolic_array_cocotb(testcase):
    run_cocotb("systolic_array", "tiny", "sim.tb.array", name=f"systolic_array_{testcase}",
               testcase=testcase)
