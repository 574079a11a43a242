"""cocotb testbench of the FMAC stream block (:class:`hdl.fmac.FMAC`) under Verilator.

The block name (``fmac``, ``fmac_lanes2``, ``fmac_lanes4``) and preset come from the runner's
``TESSERA_BLOCK``/``TESSERA_PRESET``; the config, payload layout and latency are the block's
published params. Golden model: :mod:`sim.model.fmac`.

``bench_cycles`` runs only when ``TESSERA_BENCH_OUT`` is set (``make bench-blocks``): it
measures cycles per product for every width pair from the DUT and writes JSON there.
"""
from __future__ import annotations

import itertools
import json
import os
import random
import time

import cocotb
from cocotb.triggers import ClockCycles

from sim.model import fmac as g
from sim.tb.cocotb_stream import StreamTB, reset
from sim.tb.payload import to_signed

BLOCK = os.environ.get("TESSERA_BLOCK", "fmac")
PRESET = os.environ.get("TESSERA_PRESET", "default")
BENCH_OUT = os.environ.get("TESSERA_BENCH_OUT")


def block_params(block: str = BLOCK, preset: str = PRESET) -> dict:
    from hdl.fmac import TESSERA_BLOCKS
    for b in TESSERA_BLOCKS:
        if b.name == block:
            return b.params(preset)
    raise ValueError(f"TESSERA_BLOCK must be one of the fmac blocks, not {block!r}")


PARAMS = block_params()
LANES = PARAMS["lanes"]
ACC_BITS = PARAMS["acc_bits"]
WIDTHS = tuple(range(2, PARAMS["max_mantissa"] + 1, 2))
#: accumulating max products until saturation; skip where that is too many cycles
_SAT_N = (1 << (ACC_BITS - 1)) // (255 * 255) + 2
SAT_CYCLES = _SAT_N * g.product_cycles(8, 8, LANES) if 8 in WIDTHS else 0
SAT_FEASIBLE = 8 in WIDTHS and SAT_CYCLES <= 20_000


class TB(StreamTB):
    """Driver, monitor, golden model and scoreboard of one FMAC DUT."""

    def __init__(self, dut, *, seed: int, idle_prob: float = 0.0, stall_prob: float = 0.0):
        super().__init__(dut, seed=seed, idle_prob=idle_prob, stall_prob=stall_prob)
        self.rng = random.Random(seed)
        self.layout = PARAMS["i_layout"]
        self.latency = PARAMS["latency"]
        self.expected: list[tuple[int, bool]] = []

    # ---- packing ---------------------------------------------------------------------------
    def pack(self, elem, last: bool) -> int:
        sa, a, sb, b, wa, wb = elem
        vals = dict(a_sign=sa, a_mag=a, b_sign=sb, b_mag=b, width_a=wa, width_b=wb,
                    last=int(last))
        word = 0
        for k, v in vals.items():
            off, width = self.layout[k]
            assert 0 <= v < (1 << width), (k, v)
            word |= v << off
        return word

    @staticmethod
    def unpack(word: int) -> tuple[int, bool]:
        (v_off, v_width), (o_off, _) = PARAMS["o_layout"]["value"], PARAMS["o_layout"]["overflow"]
        return (to_signed((word >> v_off) & ((1 << v_width) - 1), v_width),
                bool((word >> o_off) & 1))

    # ---- stimulus ----------------------------------------------------------------------------
    def random_elem(self, wa=None, wb=None, *, mag=None):
        r = self.rng
        wa = r.choice(WIDTHS) if wa is None else wa
        wb = r.choice(WIDTHS) if wb is None else wb
        if mag == "max":
            a, b = (1 << wa) - 1, (1 << wb) - 1
        else:
            a, b = r.randrange(1 << wa), r.randrange(1 << wb)
        return (r.randrange(2), a, r.randrange(2), b, wa, wb)

    async def send_dot(self, elems):
        """Send one dot product and record its expected result."""
        cols = list(zip(*elems))
        val, ovf, _ = g.dot(*cols, lanes=LANES, acc_bits=ACC_BITS)
        self.expected.append((val, ovf))
        for k, e in enumerate(elems):
            await self.driver.send(self.pack(e, k == len(elems) - 1))

    async def check(self, timeout_cycles: int = 2_000_000):
        words = await self.monitor.wait_for(len(self.expected), timeout_cycles)
        got = [self.unpack(w) for w in words]
        for k, (x, y) in enumerate(zip(got, self.expected)):
            assert x == y, f"dot product {k}: DUT {x} != model {y}"
        n = len(self.expected)
        self.expected = []
        return n

    async def measure_beats(self, wa, wb, n):
        """Send ``n`` (wa x wb) elements back to back (caller: no idle, no stall) as one dot
        product; return the DUT's accept-to-accept gaps and the result's arrival delay."""
        elems = [self.random_elem(wa, wb) for _ in range(n)]
        first = len(self.accepts)
        await self.send_dot(elems)
        await self.check()
        acc = self.accepts[first:first + n]
        gaps = [t1 - t0 for t0, t1 in zip(acc, acc[1:])]
        return gaps, self.outputs[-1] - acc[-1]


@cocotb.test()
async def random_dots_all_width_pairs(dut):
    """>= 10,000 random operand pairs: every (m_a, m_b) pair, random dot lengths, per-dot and
    per-element widths, random idle cycles and backpressure; bit-exact vs the model."""
    tb = TB(dut, seed=101, idle_prob=0.15, stall_prob=0.4)
    await tb.start()
    pairs = list(itertools.product(WIDTHS, WIDTHS))
    count = {p: 0 for p in pairs}
    total, dots = 0, 0
    while total < 10_000 or min(count.values()) < 300:
        n = tb.rng.choice([1, 2, 3, tb.rng.randrange(1, 65)])
        if tb.rng.random() < 0.6:                       # one width pair per dot product
            wa, wb = pairs[dots % len(pairs)]
            elems = [tb.random_elem(wa, wb) for _ in range(n)]
        else:                                           # widths per element
            elems = [tb.random_elem() for _ in range(n)]
        for e in elems:
            count[(e[4], e[5])] += 1
        await tb.send_dot(elems)
        total += n
        dots += 1
        if len(tb.expected) >= 64:
            await tb.check()
    await tb.check()
    assert total >= 10_000 and min(count.values()) >= 300
    dut._log.info(f"{total} operand pairs in {dots} dot products, {tb.cycle} cycles; "
                  f"per width pair min {min(count.values())}")


@cocotb.test()
async def cycles_per_product_and_latency(dut):
    """Measured from the DUT, no idle/stall: accepts are product_cycles() apart and the result
    arrives product_cycles(last) + latency after the last accept."""
    tb = TB(dut, seed=202)
    await tb.start()
    for wa, wb in itertools.product(WIDTHS, WIDTHS):
        gaps, delay = await tb.measure_beats(wa, wb, 6)
        beat = g.product_cycles(wa, wb, LANES)
        assert gaps == [beat] * 5, (wa, wb, gaps, beat)
        assert delay == beat + tb.latency, (wa, wb, delay)
    # mixed widths inside one dot product: each gap is the earlier element's beat
    elems = [tb.random_elem() for _ in range(40)]
    first = len(tb.accepts)
    await tb.send_dot(elems)
    await tb.check()
    acc = tb.accepts[first:]
    assert [t1 - t0 for t0, t1 in zip(acc, acc[1:])] == \
        [g.product_cycles(e[4], e[5], LANES) for e in elems[:-1]]


@cocotb.test()
async def edge_cases(dut):
    """Named cases: max magnitudes and all sign combinations at every width pair, zeros,
    single-element dot products, alternating signs cancelling exactly."""
    tb = TB(dut, seed=303, idle_prob=0.1, stall_prob=0.3)
    await tb.start()
    plain = []

    async def dot(elems):
        plain.append(sum((-1) ** (sa ^ sb) * a * b for sa, a, sb, b, _, _ in elems))
        await tb.send_dot(elems)

    for wa, wb in itertools.product(WIDTHS, WIDTHS):
        ma, mb = (1 << wa) - 1, (1 << wb) - 1
        for sa, sb in itertools.product((0, 1), repeat=2):
            await dot([(sa, ma, sb, mb, wa, wb)])                       # max, one element
        await dot([(0, ma, 0, mb, wa, wb), (1, ma, 0, mb, wa, wb)])     # cancels to 0
        await dot([(1, 0, 1, mb, wa, wb), (0, ma, 1, 0, wa, wb)])       # zeros with signs
        await dot([(1, ma, 1, mb, wa, wb)] * 8)                         # max, accumulated
    # model == plain integers here (no saturation), and the DUT == model
    assert [v for v, _ in tb.expected] == plain
    assert not any(o for _, o in tb.expected)
    await tb.check()


@cocotb.test(skip=not SAT_FEASIBLE)
async def accumulator_saturation(dut):
    """Max products until the accumulator saturates (both signs): clamped value + sticky
    overflow flag; the next dot product starts clean."""
    tb = TB(dut, seed=404, stall_prob=0.2)
    await tb.start()
    lo, hi = g.acc_limits(ACC_BITS)
    up = [(0, 255, 0, 255, 8, 8)] * _SAT_N
    down = [(1, 255, 0, 255, 8, 8)] * _SAT_N
    await tb.send_dot(up)
    await tb.send_dot(down)
    await tb.send_dot(up + [(1, 255, 0, 255, 8, 8)])    # back in range, flag stays
    await tb.send_dot([(0, 3, 0, 3, 2, 2)])             # new dot product: flag cleared
    exp = list(tb.expected)
    assert exp[0] == (hi, True) and exp[1] == (lo, True)
    assert exp[2] == (hi - 255 * 255, True) and exp[3] == (9, False)
    await tb.check()


@cocotb.test()
async def reset_mid_dot_product(dut):
    """Reset while a dot product is half accumulated (and with a result queued), then a
    correct run: no stale result, no stale accumulator."""
    tb = TB(dut, seed=505, idle_prob=0.1)
    await tb.start()
    tb.monitor.stop()                                  # results queue up in the DUT
    await tb.send_dot([tb.random_elem() for _ in range(5)])
    tb.expected.clear()
    elems = [tb.random_elem(8, 8) for _ in range(30)]
    task = cocotb.start_soon(tb.send_dot(elems))
    await ClockCycles(dut.clk, 40)
    task.cancel()
    tb.expected.clear()
    dut.i__valid.value = 0
    await reset(dut)
    tb.monitor.start()
    await ClockCycles(dut.clk, 20)
    assert len(tb.monitor.queue) == 0, "a result survived reset"
    for _ in range(20):
        await tb.send_dot([tb.random_elem() for _ in range(tb.rng.randrange(1, 12))])
    await tb.check()
    await ClockCycles(dut.clk, 10)
    assert len(tb.monitor.queue) == 0


@cocotb.test(skip=BENCH_OUT is None)
async def bench_cycles(dut):
    """Benchmark hook (``make bench-blocks``): cycles per product for every width pair,
    measured from the DUT, plus simulated cycles per second; JSON to TESSERA_BENCH_OUT."""
    tb = TB(dut, seed=606)
    await tb.start()
    n = 33
    measured, model = {}, {}
    t0, c0 = time.perf_counter(), tb.cycle
    for wa, wb in itertools.product(WIDTHS, WIDTHS):
        first = len(tb.accepts)
        await tb.send_dot([tb.random_elem(wa, wb) for _ in range(n)])
        await tb.check()
        acc = tb.accepts[first:first + n]
        key = f"{wa}x{wb}"
        measured[key] = (acc[-1] - acc[0]) / (n - 1)
        model[key] = g.product_cycles(wa, wb, LANES)
        assert measured[key] == model[key], (key, measured[key], model[key])
    wall = time.perf_counter() - t0
    cycles = tb.cycle - c0
    result = {
        "block": BLOCK, "preset": PRESET, "lanes": LANES, "products_per_pair": n,
        "cycles_per_product": measured, "model_cycles_per_product": model,
        "products_per_cycle_8x8": 1 / measured.get("8x8", float("nan")) if 8 in WIDTHS else None,
        "sim_cycles": cycles, "wall_s": wall, "sim_cycles_per_s": cycles / wall,
        "latency": tb.latency,
    }
    with open(BENCH_OUT, "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)
    dut._log.info(f"bench: {result}")
