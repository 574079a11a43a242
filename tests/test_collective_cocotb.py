"""cocotb + Verilator tier of the ring all-reduce: the generated Verilog of the ring top
``collective_ring`` (preset tiny: N = 2, 16-bit flits; ``tiny-n4``: the same with N = 4)
against the golden model; plain and BFP all-reduces (BFP also at the ends of FP32's range),
a stopped link (timeouts of 64 and of 2**16 - 1 cycles) and point-to-point
SENDRECVs on both rings (the presets have reverse links) in one run per preset, the top-k
all-reduce (``comp = CollComp.TOPK``) in another."""
import pytest

from sim.tb.runner import run_cocotb

#: the plain / BFP / SENDRECV cocotb tests of sim/tb/collective.py, run together (one
#: simulator start per preset); the top-k one runs on its own (``-k topk``)
TESTS = (
    "allreduce_random_backpressure,allreduce_bfp_extreme_magnitudes,stopped_link_times_out,"
    "sendrecv_both_rings")


@pytest.mark.parametrize("preset", ["tiny", "tiny-n4"])
def test_collective_ring_cocotb(preset):
    run_cocotb("collective_ring", preset, "sim.tb.collective",
               name=f"collective_ring_{preset}", testcase=TESTS)


@pytest.mark.parametrize("preset", ["tiny", "tiny-n4"])
def test_collective_ring_topk_cocotb(preset):
    run_cocotb("collective_ring", preset, "sim.tb.collective",
               name=f"collective_ring_topk_{preset}", testcase="allreduce_topk_rounds")
