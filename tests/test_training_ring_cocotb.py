"""cocotb + Verilator tier of the multi-core top ``training_ring``: data-parallel steps and
pipeline-parallel steps on two S = 4 cores (preset tiny) under random backpressure on every
link and host port, bit-exact with the golden model (sim/tb/training_ring.py); the
data-parallel steps run FP32 (one step; two in the four-core test of ``make test-long``), BFP-4
(one) and top-k links (two: the second adds the first's residual)."""
import pytest

from sim.tb.runner import run_cocotb

pytestmark = pytest.mark.timeout(3600)


def test_training_ring_dataparallel_backpressure():
    run_cocotb("training_ring", "tiny", "sim.tb.training_ring",
               name="training_ring_dataparallel", testcase="dataparallel_steps",
               extra_env={"TB_STEPS": "1", "TB_BFP_STEPS": "1", "TB_TOPK_STEPS": "2",
                          "TB_LINK_STALL": "0.3"})


def test_training_ring_pipeline_backpressure():
    run_cocotb("training_ring", "tiny", "sim.tb.training_ring",
               name="training_ring_pipeline", testcase="pipeline_steps",
               extra_env={"TB_STEPS": "2", "TB_LINK_STALL": "0.3"})


@pytest.mark.long
def test_training_ring_dataparallel_four_cores():
    """Four S = 4 cores (preset tiny-n4): two FP32, one BFP-4 and two top-k data-parallel steps
    under random backpressure on every link and host port, bit-exact with the golden model on
    every core (``make test-long``: the four-core build takes minutes)."""
    run_cocotb("training_ring", "tiny-n4", "sim.tb.training_ring",
               name="training_ring_dataparallel_n4", testcase="dataparallel_steps",
               extra_env={"TB_STEPS": "2", "TB_BFP_STEPS": "1", "TB_TOPK_STEPS": "2",
                          "TB_LINK_STALL": "0.3"})
