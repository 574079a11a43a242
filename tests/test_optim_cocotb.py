"""cocotb + Verilator tier of the optimizer engine (preset tiny, one Verilog variant)."""
import pytest

from sim.tb.runner import run_cocotb

TESTS = ["trajectory_sgd", "trajectory_momentum", "trajectory_adam", "trajectory_adamw",
         "clip_boundary", "invalid_commands_flag_error", "reset_mid_step"]


@pytest.mark.parametrize("testcase", TESTS)
def test_optim_engine_cocotb(testcase):
    run_cocotb("optim_engine", "tiny", "sim.tb.optim", name=f"optim_{testcase}",
               testcase=testcase)
