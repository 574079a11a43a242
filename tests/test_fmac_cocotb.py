"""cocotb + Verilator tier of the FMAC stream block (sim/tb/fmac.py).

Two variants: ``fmac`` at preset ``default`` (lanes 1, 32-bit accumulator) and ``fmac_lanes4``
at preset ``tiny`` (4 chunk multipliers, 24-bit accumulator, where saturation is reachable in a
few thousand cycles). ``bench_cycles`` is skipped unless TESSERA_BENCH_OUT is set.
"""
import pytest

from sim.tb.runner import run_cocotb


@pytest.mark.parametrize("block, preset", [("fmac", "default"), ("fmac_lanes4", "tiny")])
def test_fmac_cocotb(block, preset):
    run_cocotb(block, preset, "sim.tb.fmac", name=f"fmac_cocotb_{block}_{preset}")
