"""cocotb + Verilator tier of the ring all-reduce: the generated Verilog of the ring top
``collective_ring`` (preset tiny: N = 2, 16-bit flits) against the golden model."""
from sim.tb.runner import run_cocotb


def test_collective_ring_cocotb():
    run_cocotb("collective_ring", "tiny", "sim.tb.collective", name="collective_ring")
