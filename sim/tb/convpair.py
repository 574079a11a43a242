"""cocotb testbench of :class:`hdl.array.convpair.SharedConverter` (one BFP converter and FAST
statistic for the matmul engine's two operand paths) under Verilator, preset from
``TESSERA_PRESET`` (an :class:`~hdl.array.config.ArrayConfig` preset; ``tiny``: S = 4). Golden
model: a :class:`sim.model.stats.QuantStatModel` per path with ``config.bfp(k)`` (that path's own
LFSR seed): every group, flag, side and column of each path, and each path's statistic after
every tensor, bit-exact. Payloads are packed and unpacked with the block's own layouts."""
from __future__ import annotations

import os
import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from hdl.array.config import ArrayConfig
from hdl.array.convpair import TESSERA_BLOCKS
from hdl.array.quant import conv_req_layout, group_out_layout
from hdl.bfp.faststat import stat_layout
from sim.model import bfp
from sim.model.stats import QuantStatModel, StatState
from sim.tb.cocotb_stream import StreamDriver, StreamMonitor, reset, start_clock

PRESET = os.environ.get("TESSERA_PRESET", "tiny")
CFG = ArrayConfig.preset(PRESET)
PARAMS = TESSERA_BLOCKS[0].params(PRESET)
SIDE_BITS = tuple(PARAMS["side_bits"])


def field(layout, name):
    f = layout[name]
    return f.offset, f.width


class TB:
    """Two drivers (``i0``, ``i1``: random idle cycles), two monitors (``o0``, ``o1``: random
    backpressure), a golden model per path and the scoreboard."""

    def __init__(self, dut, *, seed: int, idle=0.2, stall=0.2):
        self.dut = dut
        self.rng = np.random.default_rng(seed)
        self.drivers = [StreamDriver(dut, f"i{k}", idle_prob=idle,
                                     rng=random.Random(seed + 1 + k)) for k in range(2)]
        self.monitors = [StreamMonitor(dut, f"o{k}", stall_prob=stall,
                                       rng=random.Random(seed + 3 + k)) for k in range(2)]
        self.models = [QuantStatModel(CFG.bfp(k)) for k in range(2)]
        self.req_layouts = [conv_req_layout(CFG, sb) for sb in SIDE_BITS]
        self.out_layouts = [group_out_layout(CFG, k, sb) for k, sb in enumerate(SIDE_BITS)]

    async def start(self):
        self.dut.stat_load.value = 0
        self.dut.stat_in__0.value = 0
        self.dut.stat_in__1.value = 0
        start_clock(self.dut)
        await reset(self.dut)
        for mon in self.monitors:
            mon.start()

    async def clear(self):
        """``stat_load`` with zeros, both paths idle."""
        self.dut.stat_load.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.stat_load.value = 0
        for model in self.models:
            model.clear()

    async def load(self, states):
        """``stat_load`` with each path's ``stat_in`` (a :class:`StatState`), both paths idle;
        ``stat_in`` goes back to zeros after it."""
        lay = stat_layout(CFG.bfp(0))
        for k, st in enumerate(states):
            getattr(self.dut, f"stat_in__{k}").value = lay.const(
                {"num": st.num, "den": st.den, "exp": st.exp, "seen": int(st.seen)}).as_bits()
            self.models[k].load(st)
        self.dut.stat_load.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.stat_load.value = 0
        self.dut.stat_in__0.value = 0
        self.dut.stat_in__1.value = 0

    def random_state(self, vals):
        """A statistic to load before the groups ``vals``: ``num``/``den`` anywhere in their
        ``STAT_BITS``, its exponent within 20 of the groups' largest (further below, the first
        such group would shift the loaded sums out whole, and the load would not show in the
        result); or, one time in three, sums within 2**10 of the top at the groups' largest
        exponent, so the first groups overflow them (the renormalisation, which cleared sums
        reach only after millions of groups)."""
        bits = PARAMS["stat_fields"]["num"][1]
        a = np.abs(np.asarray(vals, np.float32))
        e_max = int(np.floor(np.log2(a[np.isfinite(a) & (a != 0)])).max())
        if self.rng.random() < 1 / 3:
            near = [(1 << bits) - int(self.rng.integers(1, 1 << 10)) for _ in range(2)]
            return StatState(exp=e_max, num=near[0], den=near[1], seen=True)
        top = int(self.rng.integers(bits - 12 if self.rng.random() < 0.5 else 1, bits + 1))
        return StatState(exp=e_max + int(self.rng.integers(-20, 21)),
                         num=int(self.rng.integers(0, 1 << top)),
                         den=int(self.rng.integers(0, 1 << top)),
                         seen=bool(self.rng.random() < 0.8))

    def request(self, k, values, width, rounding, col, side):
        """Path ``k``'s request (its words rotated by ``col``, as a block column arrives) and
        the output the model expects for it."""
        S = CFG.size
        words = np.asarray(values, np.float32).view(np.uint32)
        rotated = np.array([words[(w - col) % S] for w in range(S)], np.uint32)
        bcfg = CFG.bfp(k)
        lay = self.req_layouts[k]
        conv_off, _ = field(lay, "conv")
        req = (bfp.pack_fp32_group(rotated, bcfg, width, rounding) << conv_off
               | side << field(lay, "side")[0] | col << field(lay, "col")[0])
        out = self.models[k].accept(bfp.pack_fp32_group(words, bcfg, width, rounding))
        f = bfp.unpack_bfp_group(out, bcfg)
        olay = self.out_layouts[k]
        g_off, g_width = field(olay, "group")
        want = ((out & ((1 << g_width) - 1)) << g_off
                | f["invalid"] << field(olay, "invalid")[0]
                | f["overflow"] << field(olay, "overflow")[0]
                | side << field(olay, "side")[0] | col << field(olay, "col")[0])
        return req, want

    def values(self, n, special_prob=0.02):
        return bfp.random_fp32_groups(self.rng, n, CFG.size, special_prob=special_prob)

    def tensor(self, k, n, widths, special_prob=0.02, vals=None):
        if vals is None:
            vals = self.values(n, special_prob)
        return [self.request(k, v, int(self.rng.choice(widths)),
                             int(self.rng.choice(bfp.ROUNDING_MODES)),
                             int(self.rng.integers(CFG.size)),
                             int(self.rng.integers(1 << SIDE_BITS[k])))
                for v in vals]

    async def run(self, tensors, label):
        """Send both paths' tensors at once; compare every output, then both statistics."""
        sends = [cocotb.start_soon(self.drivers[k].send_all([r for r, _ in tensors[k]]))
                 for k in range(2)]
        for k in range(2):
            got = await self.monitors[k].wait_for(len(tensors[k]), timeout_cycles=50_000)
            want = [w for _, w in tensors[k]]
            bad = [j for j, (g, w) in enumerate(zip(got, want)) if g != w]
            assert not bad, f"{label}: path {k}'s groups {bad[:5]} differ from the model"
        for s in sends:
            await s
        await ClockCycles(self.dut.clk, PARAMS["stat_latency"] + 2)
        for k in range(2):
            raw = getattr(self.dut, f"stat__{k}").value.to_unsigned()
            got = StatState.of(stat_layout(CFG.bfp(0)).from_bits(raw))
            assert got == self.models[k].state, \
                f"{label}: path {k}'s statistic {got} != model {self.models[k].state}"


@cocotb.test()
async def both_paths(dut):
    """Per width pair (path 0 at 2, 4, 6; path 1 at 4, 6, 8), every rounding mode, random block
    columns and sides: both paths at once under random idle cycles and backpressure, each
    tensor after a ``stat_load``; then mixed widths on both."""
    tb = TB(dut, seed=31)
    await tb.start()
    for w0, w1 in ((2, 4), (4, 6), (6, 8), (2, 2)):
        await tb.clear()
        await tb.run([tb.tensor(0, 80, [w0]), tb.tensor(1, 60, [w1])], (w0, w1))
    await tb.clear()
    await tb.run([tb.tensor(0, 100, CFG.widths), tb.tensor(1, 100, CFG.widths)], "mixed")


@cocotb.test()
async def held_output(dut):
    """Path 0's consumer takes nothing until path 1's tensor is through (no deadlock: path 0
    stops at its credits), then everything arrives bit-exact."""
    tb = TB(dut, seed=32, idle=0.0, stall=0.1)
    await tb.start()
    await tb.clear()
    t0 = tb.tensor(0, 3 * PARAMS["fifo_depth"], [2], special_prob=0)
    t1 = tb.tensor(1, 60, [2, 4])
    tb.monitors[0].stop()
    sends = [cocotb.start_soon(tb.drivers[k].send_all([r for r, _ in t])) for k, t in
             enumerate((t0, t1))]
    got1 = await tb.monitors[1].wait_for(len(t1), timeout_cycles=20_000)
    assert got1 == [w for _, w in t1], "path 1 behind a held path 0"
    assert tb.drivers[0].sent == PARAMS["fifo_depth"] + 1, tb.drivers[0].sent
    tb.monitors[0].start()
    got0 = await tb.monitors[0].wait_for(len(t0), timeout_cycles=20_000)
    assert got0 == [w for _, w in t0]
    for s in sends:
        await s


@cocotb.test()
async def loaded_statistics(dut):
    """Each tensor after a ``stat_load`` of a random statistic per path (``seen`` or not,
    ``num``/``den`` up to the top bit, some just below it, so groups renormalise the sums;
    every other tensor's exponents near -60, so the statistic's exponent goes negative):
    both statistics bit-exact with the models that loaded the same values."""
    tb = TB(dut, seed=33)
    await tb.start()
    for r in range(16):
        if r % 2:       # every exponent of the tensor near -60: the statistic's goes negative
            vals = [(tb.rng.standard_normal((40, CFG.size)) * 2.0 ** -60).astype(np.float32)
                    for _ in range(2)]
        else:
            vals = [tb.values(40), tb.values(40)]
        await tb.load([tb.random_state(v) for v in vals])
        await tb.run([tb.tensor(k, len(v), CFG.widths, vals=v) for k, v in enumerate(vals)],
                     "loaded")
