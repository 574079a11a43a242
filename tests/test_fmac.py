"""Fast tier: FMACCore and the FMAC stream block in Amaranth's simulator vs sim/model/fmac.py.

Timing is derived from the published numbers (``FMACCore.cycles``/``product_cycles``,
``FMACCore.acc_latency``, ``FMAC.latency``) and measured in simulation.
"""
import itertools
import random
from collections import deque

import pytest

from hdl.config import FMACConfig
from hdl.fmac import FMAC, FMACCore, fmac_operand_layout, fmac_result_layout
from sim.model import fmac as g
from sim.tb.amaranth_tb import run_sim, stream_get, stream_put

W = (2, 4, 6, 8)


def _core_ops(rng, n_mags=2, widths=W):
    """Every width pair x every sign pair x (max, zero, random) magnitudes."""
    ops = []
    for m_a, m_b in itertools.product(widths, widths):
        for sa, sb in itertools.product((0, 1), repeat=2):
            mags = [((1 << m_a) - 1, (1 << m_b) - 1), (0, rng.randrange(1 << m_b))]
            mags += [(rng.randrange(1 << m_a), rng.randrange(1 << m_b)) for _ in range(n_mags)]
            for a, b in mags:
                ops.append(dict(a_sign=sa, a_mag=a, b_sign=sb, b_mag=b, width_a=m_a,
                                width_b=m_b, accumulate=int(rng.random() < 0.7)))
    rng.shuffle(ops)
    return ops


def run_core(cfg, ops, *, gap_prob=0.0, seed=0, clears=()):
    """Drive FMACCore with ``ops`` (starting each as soon as ``ready``, or after random gaps),
    check every product, its done cycle and the accumulator every cycle against the model.
    Returns the list of (start cycle, done cycle) per op."""
    dut = FMACCore(config=cfg)
    rng = random.Random(seed)
    log = []

    async def tb(ctx):
        todo = deque(ops)
        pending = deque()
        acc, ovf = 0, False
        cycle = 0
        while todo or pending:
            # state visible this cycle: products done up to cycle-1 are in the accumulator
            assert ctx.get(dut.acc) == acc and ctx.get(dut.overflow) == ovf, cycle
            assert ctx.get(dut.ready) or ctx.get(dut.busy)      # idle implies ready
            clear = cycle in clears
            ctx.set(dut.clear, int(clear))
            if ctx.get(dut.done):
                op, t0 = pending.popleft()
                beat = FMACCore.cycles(op["width_a"], op["width_b"], cfg.lanes)
                assert cycle == t0 + beat + dut.latency, (op, t0, cycle)
                p = g.signed_product(op["a_sign"], op["a_mag"], op["b_sign"], op["b_mag"],
                                     op["width_a"], op["width_b"], cfg.lanes)
                assert ctx.get(dut.product) == p, op
                assert p == (-1) ** (op["a_sign"] ^ op["b_sign"]) * op["a_mag"] * op["b_mag"]
                log.append((t0, cycle))
                if not clear:
                    acc, ovf = g.saturating_add(acc, ovf, p, op["accumulate"], cfg.acc_bits)
            if clear:
                acc, ovf = 0, False
            start = bool(todo) and ctx.get(dut.ready) and not (gap_prob and
                                                                rng.random() < gap_prob)
            if start:
                op = todo.popleft()
                for k, v in op.items():
                    ctx.set(getattr(dut, k), v)
                pending.append((op, cycle))
            else:
                # garbage on the operand inputs while not starting must not matter
                ctx.set(dut.a_mag, rng.randrange(1 << cfg.max_mantissa))
                ctx.set(dut.width_a, rng.randrange(16))
            ctx.set(dut.start, int(start))
            await ctx.tick()
            cycle += 1
            assert cycle < 100_000
        await ctx.tick()
        assert ctx.get(dut.acc) == acc and ctx.get(dut.overflow) == ovf

    run_sim(dut, tb)
    return log


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_core_all_widths_signs_back_to_back(lanes):
    cfg = FMACConfig(lanes=lanes)
    ops = _core_ops(random.Random(lanes))
    log = run_core(cfg, ops)
    assert len(log) == len(ops)
    # back to back: each product starts one beat after the previous one (one per beat)
    beats = [FMACCore.cycles(o["width_a"], o["width_b"], lanes) for o in ops]
    for (t0, _), (n0, _), beat in zip(log, log[1:], beats):
        assert n0 - t0 == beat
    assert log[-1][1] - log[0][0] == sum(beats) + FMACCore.LATENCY


@pytest.mark.parametrize("max_mantissa, lanes", [(2, 1), (4, 2), (4, 4), (6, 1), (6, 8)])
def test_core_smaller_max_mantissa(max_mantissa, lanes):
    cfg = FMACConfig(max_mantissa=max_mantissa, lanes=lanes, acc_bits=2 * max_mantissa + 2)
    widths = cfg.widths
    ops = _core_ops(random.Random(max_mantissa), n_mags=3, widths=widths)
    mx = dict(a_mag=(1 << max_mantissa) - 1, b_mag=(1 << max_mantissa) - 1,
              width_a=max_mantissa, width_b=max_mantissa, accumulate=1)
    ops += [dict(mx, a_sign=0, b_sign=0, accumulate=0)] + [dict(mx, a_sign=0, b_sign=0)] * 4 \
        + [dict(mx, a_sign=1, b_sign=0)] * 10
    log = run_core(cfg, ops)
    assert len(log) == len(ops)
    # the smallest legal accumulator really saturated somewhere in this run
    acc, ovf, sat = 0, False, 0
    for op in ops:
        p = g.signed_product(op["a_sign"], op["a_mag"], op["b_sign"], op["b_mag"],
                             op["width_a"], op["width_b"])
        acc, ovf = g.saturating_add(acc, ovf, p, op["accumulate"], cfg.acc_bits)
        sat += acc in g.acc_limits(cfg.acc_bits) and ovf
    assert sat > 0


def test_core_with_gaps_and_start_while_busy_ignored():
    cfg = FMACConfig(lanes=2)
    ops = _core_ops(random.Random(9), n_mags=0)[:80]
    dut = FMACCore(config=cfg)

    # start held high with other operands while not ready: ignored
    async def tb(ctx):
        for op in ops[:10]:
            for k, v in op.items():
                ctx.set(getattr(dut, k), v)
            ctx.set(dut.start, 1)
            await ctx.tick()
            t, held = 1, 0
            ctx.set(dut.a_mag, (op["a_mag"] + 1) % (1 << op["width_a"]))
            ctx.set(dut.width_a, 2)
            while not ctx.get(dut.done):
                ctx.set(dut.start, int(not ctx.get(dut.ready)))
                held += not ctx.get(dut.ready)
                await ctx.tick()
                t += 1
            ctx.set(dut.start, 0)
            beat = FMACCore.cycles(op["width_a"], op["width_b"], cfg.lanes)
            assert t == beat + dut.latency and held == beat - 1
            p = (-1) ** (op["a_sign"] ^ op["b_sign"]) * op["a_mag"] * op["b_mag"]
            assert ctx.get(dut.product) == p
            await ctx.tick()
    run_sim(dut, tb)
    run_core(cfg, ops, gap_prob=0.4, seed=2)


def test_core_saturation_and_clear():
    cfg = FMACConfig(acc_bits=18)                   # smallest legal accumulator: 2*8+2
    mx = dict(a_mag=255, b_mag=255, width_a=8, width_b=8)
    pos = [dict(a_sign=0, b_sign=0, accumulate=1, **mx) for _ in range(4)]
    neg = [dict(a_sign=1, b_sign=0, accumulate=1, **mx) for _ in range(10)]
    ops = [dict(pos[0], accumulate=0)] + pos[1:] + neg + [dict(pos[0], accumulate=0)] + pos[1:]
    log = run_core(cfg, ops)       # model asserts acc/overflow every cycle, incl. saturation
    lo, hi = g.acc_limits(18)
    assert 4 * 255 * 255 > hi and -10 * 255 * 255 < lo   # the run really saturated both ways
    # clear in the middle (also in a done cycle: clear wins)
    run_core(cfg, ops, clears={5, log[3][1], 200})


def test_core_width_codes_outside_the_legal_set():
    """Documented: chunks = clamp(width // 2, 1, max_mantissa // 2); higher bits ignored."""
    cfg = FMACConfig(max_mantissa=8, lanes=1)
    dut = FMACCore(config=cfg)
    cases = [(0, 2), (1, 2), (3, 2), (5, 4), (7, 6), (9, 8), (15, 8)]

    async def tb(ctx):
        for code, eff in cases:
            ctx.set(dut.a_mag, 0xFF)
            ctx.set(dut.b_mag, 0xFF)
            ctx.set(dut.width_a, code)
            ctx.set(dut.width_b, 8)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            t = 1
            while not ctx.get(dut.done):
                await ctx.tick()
                t += 1
            assert t == g.product_cycles(eff, 8, 1) + dut.latency
            assert ctx.get(dut.product) == ((1 << eff) - 1) * 0xFF
    run_sim(dut, tb)


def _random_dots(rng, n_dots, max_len, widths_per_dot=False):
    dots = []
    for _ in range(n_dots):
        n = rng.randrange(1, max_len + 1)
        wa, wb = rng.choice(W), rng.choice(W)
        elems = []
        for _ in range(n):
            if not widths_per_dot:
                wa, wb = rng.choice(W), rng.choice(W)
            elems.append((rng.randrange(2), rng.randrange(1 << wa), rng.randrange(2),
                          rng.randrange(1 << wb), wa, wb))
        dots.append(elems)
    return dots


def _pack(cfg, elem, last):
    lay = fmac_operand_layout(cfg)
    sa, a, sb, b, wa, wb = elem
    vals = dict(a_sign=sa, a_mag=a, b_sign=sb, b_mag=b, width_a=wa, width_b=wb, last=last)
    return sum(v << lay[k].offset for k, v in vals.items())


def _expect(cfg, elems):
    cols = list(zip(*elems))
    val, ovf, _ = g.dot(*cols, lanes=cfg.lanes, acc_bits=cfg.acc_bits)
    return val, ovf


def _unpack_result(cfg, word):
    lay = fmac_result_layout(cfg)
    v = word & ((1 << cfg.acc_bits) - 1)
    if v >> (cfg.acc_bits - 1):
        v -= 1 << cfg.acc_bits
    return v, bool((word >> lay["overflow"].offset) & 1)


@pytest.mark.parametrize("lanes, preset", [(1, "tiny"), (4, "default")])
def test_stream_random_dots_with_backpressure(lanes, preset):
    import dataclasses
    cfg = dataclasses.replace(FMACConfig.preset(preset), lanes=lanes)
    rng = random.Random(11 + lanes)
    dots = _random_dots(rng, 30, 6)
    # one saturating dot product (tiny accumulator) and max/zero operands
    n_sat = (1 << (cfg.acc_bits - 1)) // (255 * 255) + 2
    dots.append([(0, 255, 0, 255, 8, 8)] * n_sat if preset == "tiny" else [(1, 255, 1, 255, 8, 8)])
    dots.append([(1, 0, 0, 0, 2, 8)])
    dut = FMAC(config=cfg)
    got = []

    async def producer(ctx):
        for elems in dots:
            for k, e in enumerate(elems):
                word = _pack(cfg, e, k == len(elems) - 1)
                await stream_put(ctx, dut.i, word, rng=rng, idle_prob=0.3)

    async def consumer(ctx):
        for _ in dots:
            word = await stream_get(ctx, dut.o, rng=rng, stall_prob=0.5)
            got.append(_unpack_result(cfg, word))

    run_sim(dut, producer, consumer)
    assert got == [_expect(cfg, d) for d in dots]
    if preset == "tiny":
        assert got[-2][1] is True          # the saturating dot product flagged overflow


def test_stream_timing_back_to_back():
    """Output always ready, operands always valid: accepts are one beat apart and each result
    appears `latency` cycles after its last beat."""
    cfg = FMACConfig(lanes=2)
    rng = random.Random(4)
    dots = _random_dots(rng, 12, 4) + [[e] for e in _random_dots(rng, 6, 1)[0]] \
        + _random_dots(rng, 6, 1)
    dut = FMAC(config=cfg)
    accepts, outs = [], []
    words = [(_pack(cfg, e, k == len(d) - 1), e) for d in dots for k, e in enumerate(d)]

    async def tb(ctx):
        cycle = 0
        todo = deque(words)
        ctx.set(dut.o.ready, 1)
        while len(outs) < len(dots):
            if todo:
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, todo[0][0])
            else:
                ctx.set(dut.i.valid, 0)
            if todo and ctx.get(dut.i.ready):
                accepts.append((cycle, todo.popleft()[1]))
            if ctx.get(dut.o.valid):
                outs.append(cycle)
            await ctx.tick()
            cycle += 1
            assert cycle < 10_000

    run_sim(dut, tb)
    for (t0, e), (t1, _) in zip(accepts, accepts[1:]):
        assert t1 - t0 == dut.cycles(e[4], e[5]) == g.product_cycles(e[4], e[5], cfg.lanes)
    idx = 0
    for d, t_out in zip(dots, outs):
        idx += len(d)
        t_last, e = accepts[idx - 1]
        assert t_out == t_last + g.product_cycles(e[4], e[5], cfg.lanes) + dut.latency
        t_first = accepts[idx - len(d)][0]
        cols = list(zip(*d))
        assert t_out - t_first == g.fmac_stream_cycles(list(zip(cols[4], cols[5])), cfg.lanes,
                                                       dut.latency)


def test_invalid_config():
    with pytest.raises(TypeError, match="config"):
        FMACCore(config={"lanes": 1})
    with pytest.raises(TypeError, match="config"):
        FMAC(config=3)
    with pytest.raises(ValueError, match=r"FMACConfig\.lanes.*3"):
        FMACConfig(lanes=3)
    with pytest.raises(ValueError, match=r"FMACConfig\.lanes.*8"):
        FMACConfig(max_mantissa=4, lanes=8)
    with pytest.raises(ValueError, match=r"FMACConfig\.acc_bits.*17"):
        FMACConfig(acc_bits=17)
