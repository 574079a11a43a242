"""cocotb stimulus of the generated ``systolic_array`` for what ``sim/tb/array.py`` leaves out
(found by ``make coverage``): every pair of run-time widths in every mode, and long stalls of
the output so the PEs' queues fill. Checked against the same golden model and scoreboard."""
from __future__ import annotations

import cocotb
import numpy as np

from sim.tb.array import MODES, TB, _check, make_tiles


@cocotb.test()
async def every_width_pair(dut):
    """Each (width_a, width_b) of the config's widths in each mode: the fMACs' chunk-count
    tables have a case per pair."""
    tb = TB(dut, seed=31, idle=0.1, stall=0.2)
    await tb.start()
    S = tb.cfg.size
    rng = np.random.default_rng(31)
    for mode in MODES:
        for wa in tb.cfg.widths:
            for wb in tb.cfg.widths:
                tiles = make_tiles(rng, S, mode, wa, wb, 2, [1, S])
                got, want = await tb.run(mode, wa, wb, tiles)
                _check(got, want, f"mode {mode} widths {wa}x{wb}")


@cocotb.test()
async def heavy_backpressure(dut):
    """The output taken rarely (stall 0.9) with no input idle: every queue of the PEs fills."""
    tb = TB(dut, seed=41, idle=0.0, stall=0.9)
    await tb.start()
    S = tb.cfg.size
    rng = np.random.default_rng(41)
    for mode in MODES:
        tiles = make_tiles(rng, S, mode, 2, 2, 4, [4 * S])
        got, want = await tb.run(mode, 2, 2, tiles)
        _check(got, want, f"mode {mode} under backpressure")
