"""cocotb + Verilator tier of the optimizer engine (preset tiny, one Verilog variant)."""
import pytest

from sim.tb.runner import run_cocotb

TESTS = ["trajectory_sgd", "trajectory_momentum", "trajectory_adam", "trajectory_adamw",
         "clip_boundary", "invalid_commands_flag_error", "reset_mid_step"]


#: Steps of each trajectory in ``make test``; ``make test-long`` runs them at 100 steps
#: (``test_optim_engine_trajectory_long``). The cocotb TB drives the engine at about 7,700
#: cycles/s: 100 steps took about 50 s of simulation a trajectory.
STEPS = 32


@pytest.mark.parametrize("testcase", TESTS)
def test_optim_engine_cocotb(testcase):
    run_cocotb("optim_engine", "tiny", "sim.tb.optim", name=f"optim_{testcase}",
               testcase=testcase, extra_env={"TB_STEPS": str(STEPS)})


@pytest.mark.long
@pytest.mark.parametrize("testcase", [t for t in TESTS if t.startswith("trajectory_")])
def test_optim_engine_trajectory_long(testcase):
    run_cocotb("optim_engine", "tiny", "sim.tb.optim", name=f"optim_{testcase}_long",
               testcase=testcase, extra_env={"TB_STEPS": "100"})
