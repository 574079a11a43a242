"""cocotb + Verilator tier of the systolic array: preset tiny (S = 4) for every test, preset
default (S = 8) for a shorter random run and the exact latency / beat-spacing check. See
sim/tb/array.py."""
import pytest

from sim.tb.runner import run_cocotb


@pytest.mark.parametrize("testcase", ["random_tiles_all_modes", "back_to_back_throughput",
                                      "reset_mid_operation"])
def test_systolic_array_cocotb(testcase):
    run_cocotb("systolic_array", "tiny", "sim.tb.array", name=f"systolic_array_{testcase}",
               testcase=testcase)


@pytest.mark.parametrize("testcase, env", [
    ("random_tiles_all_modes", {"TB_WIDTHS": "2x2,8x6", "TB_TILES": "4"}),
    ("back_to_back_throughput", {}),
])
def test_systolic_array_s8_cocotb(testcase, env):
    """The standalone S = 8 array (inside the engine it runs in test_matmul_engine_cocotb)."""
    run_cocotb("systolic_array", "default", "sim.tb.array",
               name=f"systolic_array_s8_{testcase}", testcase=testcase, extra_env=env)
