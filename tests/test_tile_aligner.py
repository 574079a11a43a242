"""The matmul engine's weight-tile aligner (:class:`hdl.array.wtile.TileAligner`) alone in the
Amaranth simulator: every aligned row against :func:`sim.model.array.align_rne` with the
tile's largest row exponent, bit for bit.

The engine's tests see the aligner through whole matmul passes, whose weight tiles rarely have
rows far below the tile's exponent (they pass with the shift clamped at ``max_mantissa``
instead of ``max_mantissa + 1``); here every tile has row exponents spread from 0 to
``max_mantissa + 4`` below the largest (the shift clamp at ``max_mantissa + 1`` and the
shifts just under it, with magnitudes that round up there), the largest in every row
position (the first and the last row take different paths into the shift register), random
gaps on the input and random backpressure on the output."""
import numpy as np
import pytest
from amaranth.sim import Simulator

from hdl.array.config import ArrayConfig
from hdl.array.wtile import TileAligner
from sim.model.array import align_rne
from sim.tb.amaranth_tb import SIM_PERIOD, add_deadline


def _tiles(rng, S: int, mm: int, n: int):
    """``n`` tiles: (exps (S,), mags (S, S), signs (S, S)); the largest exponent's row cycles
    through every position, the others sit 0 .. mm + 4 below it."""
    tiles = []
    for t in range(n):
        top = int(rng.integers(-40, 40))
        below = rng.integers(0, mm + 5, S)
        below[t % S] = 0
        exps = top - below
        mags = rng.integers(0, 1 << mm, (S, S))
        mags[:, 0] = (1 << mm) - 1                 # rounds up at a shift of mm
        mags[:, 1] = 1 << (mm - 1)                 # a tie at a shift of mm
        signs = rng.integers(0, 2, (S, S))
        tiles.append((exps, mags, signs))
    return tiles


@pytest.mark.parametrize("S, mm", [(4, 8), (8, 8), (4, 2), (4, 4), (8, 6), (2, 8)])
def test_aligned_rows_equal_the_model(S, mm):
    cfg = ArrayConfig(size=S, max_mantissa=mm, mem_depth=32, dim_bits=5)
    dut = TileAligner(config=cfg, side_bits=1)
    rng = np.random.default_rng(S + 16 * mm)
    tiles = _tiles(rng, S, mm, 3 * S)
    got = []

    async def driver(ctx):
        i = dut.i
        for exps, mags, signs in tiles:
            for r in range(S):
                while rng.random() < 0.3:
                    ctx.set(i.valid, 0)
                    await ctx.tick()
                ctx.set(i.payload.group.exp, int(exps[r]))
                for n in range(S):
                    ctx.set(i.payload.group.elems[n].mag, int(mags[r, n]))
                    ctx.set(i.payload.group.elems[n].sign, int(signs[r, n]))
                ctx.set(i.valid, 1)
                await ctx.tick().until(i.ready)
        ctx.set(i.valid, 0)

    async def monitor(ctx):
        o = dut.o
        p = o.payload
        sigs = [o.valid, o.ready, p.exp, p.wl.row, p.last,
                *(p.wl.w[n].mag for n in range(S)), *(p.wl.w[n].sign for n in range(S))]
        stall = np.random.default_rng(100 + S)
        while len(got) < len(tiles) * S:
            ctx.set(o.ready, int(stall.random() < 0.7))
            _, _, valid, ready, exp, row, last_row, *rest = await ctx.tick().sample(*sigs)
            if valid and ready:
                got.append((exp, row, last_row, list(rest[:S]), list(rest[S:])))

    sim = Simulator(dut)
    sim.add_clock(SIM_PERIOD)
    sim.add_testbench(driver)
    sim.add_testbench(monitor)
    add_deadline(sim, 20 * len(tiles) * S, "TileAligner")
    sim.run()
    for t, (exps, mags, signs) in enumerate(tiles):
        e_t = int(exps.max())
        want = align_rne(mags, (e_t - exps)[:, None], mm)
        for r in range(S):
            exp, row, last_row, mag, sign = got[t * S + r]
            assert (exp, row, last_row) == (e_t, r, int(r == S - 1)), (t, r, exp, row)
            assert mag == list(want[r]), (t, r, int(e_t - exps[r]), mag, list(want[r]))
            assert sign == list(signs[r]), (t, r)
