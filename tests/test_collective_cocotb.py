"""cocotb + Verilator tier of the ring all-reduce: the generated Verilog of the ring top
``collective_ring`` (preset tiny: N = 2, 16-bit flits; ``tiny-n4``: the same with N = 4)
against the golden model."""
import pytest

from sim.tb.runner import run_cocotb


@pytest.mark.parametrize("preset", ["tiny", "tiny-n4"])
def test_collective_ring_cocotb(preset):
    run_cocotb("collective_ring", preset, "sim.tb.collective",
               name=f"collective_ring_{preset}")
