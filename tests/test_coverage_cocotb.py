"""cocotb + Verilator cases added for coverage (``make coverage``, docs/testing.md "Coverage"):
stimulus the blocks' own testbenches leave out, checked against the same golden models."""
import pytest

from sim.tb.runner import run_cocotb


@pytest.mark.parametrize("testcase", ["every_width_pair", "heavy_backpressure"])
def test_systolic_array_sweep_cocotb(testcase):
    run_cocotb("systolic_array", "tiny", "sim.tb.array_sweep",
               name=f"systolic_array_sweep_{testcase}", testcase=testcase)


def test_systolic_array_s8_every_width_pair_cocotb():
    """The S = 8 array at every width pair (its own tests drive 2x2 and 8x6): the fMACs of its
    64 PEs reach the chunk tables of every pair, as at S = 4."""
    run_cocotb("systolic_array", "default", "sim.tb.array_sweep",
               name="systolic_array_s8_sweep_every_width_pair", testcase="every_width_pair")


@pytest.mark.long
def test_matmul_engine_s8_every_width_pair_cocotb():
    """The S = 8 engine at every width pair in every mode (its own tests, in ``make
    test-long``, run random passes that reach a few pairs): ``make test-long`` and ``make
    coverage``; ``make test`` runs the same fMAC at every pair in the S = 8 array's sweep."""
    run_cocotb("matmul_engine", "default", "sim.tb.matmul_engine",
               name="matmul_engine_s8_every_width_pair", testcase="every_width_pair")


@pytest.mark.timeout(3600)     # builds the training core if no other test has (as test_core_cocotb)
def test_training_core_directed_program_cocotb():
    """The directed stream of :mod:`sim.tb.directed` on the S = 4 core: every FAST slot,
    precision entry and (layer, mode) pair, and the vector unit on FP32 special values, each
    response and the whole scratchpad against the golden model, with host-stream idle
    cycles and backpressure."""
    run_cocotb("training_core", "tiny", "sim.tb.core_fuzz", name="training_core_directed",
               testcase="directed_program", extra_env={"TB_IDLE": "0.1", "TB_STALL": "0.1"})


@pytest.mark.long
@pytest.mark.timeout(3600)
def test_training_core_s8_directed_program_cocotb():
    """The same directed stream on the S = 8 core (preset ``default``: its 1,024-line banks
    hold four output regions per pair, so rounds 4 and 5 reuse them after reading the
    earlier results back). ``make test-long`` and ``make coverage``: the S = 8 core's build
    takes minutes."""
    run_cocotb("training_core", "default", "sim.tb.core_fuzz",
               name="training_core_s8_directed", testcase="directed_program",
               extra_env={"TB_IDLE": "0.1", "TB_STALL": "0.1"})


@pytest.mark.long
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("preset", ["tiny-n3-rev", "tiny"])
def test_training_ring_directed_program_core0_cocotb(preset):
    """The directed stream on core 0 of the three-core ring (``tiny-n3-rev``) and of the
    two-core one (``tiny``): the paths of the ``ranks >= 2`` core build that the ring's own
    programs leave out. ``make test-long`` and ``make coverage``."""
    suffix = "" if preset == "tiny-n3-rev" else f"_{preset}"
    run_cocotb("training_ring", preset, "sim.tb.training_ring",
               name=f"training_ring_directed_core0{suffix}", testcase="directed_program_core0")


@pytest.mark.long
@pytest.mark.timeout(3600)
def test_training_ring_two_cores_every_link_format_cocotb():
    """BFP ALLREDUCEs at every link format, the ERR_LINK cases, the rotation (forward:
    the preset has no reverse links) and the softmax over every log-table entry on the
    two-core ring (``tiny``; ``make test`` runs them
    on ``tiny-n3-rev``). ``make test-long`` and ``make coverage``."""
    run_cocotb("training_ring", "tiny", "sim.tb.training_ring",
               name="training_ring_every_link_format_tiny",
               testcase="allreduce_every_link_format,stopped_links_give_err_link,"
                        "reverse_ring_rotation,softmax_every_log_entry")
