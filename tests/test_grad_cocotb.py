"""cocotb + Verilator tier of the gradient datapaths (``grad_unit``, preset tiny)."""
import pytest

from sim.tb.runner import run_cocotb

TESTS = ["elementwise_random", "bias_grad_random", "softmax_random", "reset_mid_softmax"]


@pytest.mark.parametrize("testcase", TESTS)
def test_grad_unit_cocotb(testcase):
    run_cocotb("grad_unit", "tiny", "sim.tb.grad", name=f"grad_{testcase}", testcase=testcase)
