"""cocotb + Verilator tier of the multi-core top ``training_ring``: data-parallel steps and
pipeline-parallel steps under random backpressure on every link (forward and reverse) and
host port, bit-exact with the golden model (sim/tb/training_ring.py).

``make test`` runs both on three S = 4 cores with reverse links (preset ``tiny-n3-rev``, one
build): the data-parallel steps with FP32 (one step), BFP-4 rounding stochastically (one)
and top-k links (two: the second, one top-k all-reduce per layer, adds the first's
residual), and two pipeline steps of the MLP 8-8-8-4 in three stages
(GPipe, then 1F1B), whose gradients go back over the reverse links; on the same build, the
ERR_LINK cases (a lone receive, a stopped link), a rotation on the reverse ring (the
reverse link closing the ring carries a block) and a poisoning ALLREDUCE right after a
vector write of a NaN into the gradient window. ``make test-long`` runs
the same on two cores without reverse links (preset ``tiny``: the two-stage pipeline sends
its gradients on the forward ring, whose next core is also the previous one) and the
data-parallel steps on four cores, and the FPGA build's two-core ring (preset ``tiny-fpga``)."""
import pytest

from sim.tb.runner import run_cocotb

pytestmark = pytest.mark.timeout(3600)

DATAPARALLEL = {"TB_STEPS": "1", "TB_BFP_STEPS": "1", "TB_TOPK_STEPS": "2",
                "TB_TOPK_LAYER_STEPS": "1", "TB_LINK_STALL": "0.3"}
PIPELINE = {"TB_STEPS": "2", "TB_LINK_STALL": "0.3"}


def test_training_ring_dataparallel_backpressure():
    run_cocotb("training_ring", "tiny-n3-rev", "sim.tb.training_ring",
               name="training_ring_dataparallel", testcase="dataparallel_steps",
               extra_env=DATAPARALLEL)


def test_training_ring_pipeline_backpressure():
    run_cocotb("training_ring", "tiny-n3-rev", "sim.tb.training_ring",
               name="training_ring_pipeline", testcase="pipeline_steps", extra_env=PIPELINE)


def test_training_ring_stopped_links_give_err_link():
    """A receive from a core that never sends, and an ALLREDUCE over a link that stopped
    delivering: ERR_LINK with the engine's TIMEOUT in the state register, and nothing after
    the failed instruction runs (the same build)."""
    run_cocotb("training_ring", "tiny-n3-rev", "sim.tb.training_ring",
               name="training_ring_err_link", testcase="stopped_links_give_err_link")


def test_training_ring_reverse_rotation():
    """Every core sends backward and receives from the core after it on the reverse ring:
    the reverse link that closes the ring (rank 0 to rank N - 1) carries a block (the same
    build)."""
    run_cocotb("training_ring", "tiny-n3-rev", "sim.tb.training_ring",
               name="training_ring_reverse_rotation", testcase="reverse_ring_rotation")


def test_training_ring_allreduce_every_link_format():
    """BFP ALLREDUCEs at every link width, rounding and range of values through the ring's
    sequencers (the training programs use BFP-4 with stochastic rounding only; the same
    build)."""
    run_cocotb("training_ring", "tiny-n3-rev", "sim.tb.training_ring",
               name="training_ring_every_link_format", testcase="allreduce_every_link_format")


def test_training_ring_softmax_every_log_entry():
    """SOFTMAX_XENT on every core with row sums that select each entry of the loss's log
    table, then on random eight-class rows (the same build)."""
    run_cocotb("training_ring", "tiny-n3-rev", "sim.tb.training_ring",
               name="training_ring_softmax", testcase="softmax_every_log_entry")


def test_training_ring_poison_right_after_a_vector_write():
    """A poisoning ALLREDUCE issued right after a vector write of a NaN into the gradient
    window: the snoop's flag reaches it (its second sample of ``flags``), bit-exact with the
    golden model on every core (the same build)."""
    run_cocotb("training_ring", "tiny-n3-rev", "sim.tb.training_ring",
               name="training_ring_poison", testcase="poison_right_after_a_vector_write")


@pytest.mark.long
def test_training_ring_fpga_build_dataparallel():
    """The ring as ``make synth`` builds it for the FPGA (preset ``tiny-fpga``: two S = 4
    cores of the FPGA build, whose collective engines read the scratchpad as registered
    clients, their read word registered once more: four cycles after a read): data-parallel steps with FP32, BFP-4 and top-k
    links under random link backpressure, bit-exact with the golden model. ``make
    test-long`` (a build of its own, about 2.5 minutes on a fresh clone): ``make test`` runs
    the same steps on the three-core ring above, the FPGA core in the Amaranth simulator
    (tests/test_core_fpga.py) and the collective engine at the FPGA build's port latency 4
    (tests/test_collective.py ``test_registered_memory_port[4-True]``)."""
    run_cocotb("training_ring", "tiny-fpga", "sim.tb.training_ring",
               name="training_ring_fpga_dataparallel", testcase="dataparallel_steps",
               extra_env=DATAPARALLEL)


@pytest.mark.long
@pytest.mark.parametrize("testcase,env", [("dataparallel_steps", DATAPARALLEL),
                                          ("pipeline_steps", PIPELINE)])
def test_training_ring_two_cores(testcase, env):
    """Two S = 4 cores without reverse links (preset tiny): the data-parallel steps, and the
    two-stage pipeline whose gradients go back on the forward ring."""
    run_cocotb("training_ring", "tiny", "sim.tb.training_ring",
               name=f"training_ring_{testcase}_n2", testcase=testcase, extra_env=env)


@pytest.mark.long
def test_training_ring_dataparallel_four_cores():
    """Four S = 4 cores (preset tiny-n4): two FP32, one BFP-4 and two top-k data-parallel steps
    under random backpressure on every link and host port, bit-exact with the golden model on
    every core (``make test-long``: the four-core build takes minutes)."""
    run_cocotb("training_ring", "tiny-n4", "sim.tb.training_ring",
               name="training_ring_dataparallel_n4", testcase="dataparallel_steps",
               extra_env={"TB_STEPS": "2", "TB_BFP_STEPS": "1", "TB_TOPK_STEPS": "2",
                          "TB_LINK_STALL": "0.3"})
