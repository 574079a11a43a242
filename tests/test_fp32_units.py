"""Fast tier of the pipelined FP32 units (Amaranth simulator) against the numpy golden models.

Every unit at presets ``tiny`` (one register) and ``default`` (full pipeline): a few hundred
random operands plus all pairs of a special-value set, checked bit for bit (NaN results only as
NaN), and the exact published latency of every operation at full rate. Random idle/backpressure,
reset in mid-stream, the IEEE zero order of max/min, named edge cases, config validation, and
the payload layouts shared with the golden models.
"""
import dataclasses
import itertools
import random
from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module, Value
from amaranth.lib import data
from amaranth.sim import Simulator

from hdl.fp32.add import FP32Add, FP32AddIn
from hdl.fp32.compare import FP32Compare, FP32CompareIn, FP32CompareOut
from hdl.fp32.config import CUT_PRIORITY, STEP_BOUNDARIES, UNIT_NAMES, FP32Config
from hdl.fp32.convert import FP32ToInt, FP32ToIntIn, FP32ToIntOut, IntToFP32
from hdl.fp32.mul import FP32Mul, FP32MulIn
from sim.model import fp32 as gold
from sim.tb.amaranth_tb import add_deadline

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")

HW = {"fp32_add": FP32Add, "fp32_mul": FP32Mul, "fp32_compare": FP32Compare,
      "int_to_fp32": IntToFP32, "fp32_to_int": FP32ToInt}


# ----------------------------------------------------------------------------------------------
# Harness
# ----------------------------------------------------------------------------------------------

def _raw(st):
    payload = st.payload.as_value() if isinstance(st.payload, data.View) else st.payload
    return SimpleNamespace(valid=st.valid, ready=st.ready, payload=payload)


def simulate(dut, payloads, *, seed=0, idle_prob=0.0, stall_prob=0.0, reset_after=None):
    """Drive ``payloads`` cycle by cycle; return ``(outputs, in_cycles, out_cycles)``.

    With ``reset_after=k`` the domain reset is pulsed for 2 cycles once ``k`` payloads were
    accepted; the outputs still pending are lost and the rest of the run is recorded afresh
    (``outputs`` then holds only results of payloads accepted after the reset).
    """
    top = Module()
    top.domains.sync = cd = ClockDomain("sync")
    top.submodules.dut = dut
    i, o = _raw(dut.i), _raw(dut.o)
    rng = random.Random(seed)
    result = SimpleNamespace(out=[], in_cycles=[], out_cycles=[])

    async def bench(ctx):
        pending = deque(payloads)
        accepted = 0
        expected = len(payloads)
        cycle = 0
        did_reset = False
        while len(result.out) < expected:
            if reset_after is not None and not did_reset and accepted == reset_after:
                did_reset = True
                ctx.set(i.valid, 0)
                ctx.set(cd.rst, 1)
                await ctx.tick()
                await ctx.tick()
                ctx.set(cd.rst, 0)
                expected = len(pending)       # results of earlier payloads are gone
                result.out.clear(), result.in_cycles.clear(), result.out_cycles.clear()
                cycle += 2
                continue
            send = bool(pending) and not (idle_prob and rng.random() < idle_prob)
            ready = not (stall_prob and rng.random() < stall_prob)
            ctx.set(i.valid, send)
            if send:
                ctx.set(i.payload, pending[0])
            ctx.set(o.ready, ready)
            if send and ctx.get(i.ready):
                pending.popleft()
                accepted += 1
                result.in_cycles.append(cycle)
            if ready and ctx.get(o.valid):
                result.out.append(ctx.get(o.payload))
                result.out_cycles.append(cycle)
            await ctx.tick()
            cycle += 1
            assert cycle < 50 * len(payloads) + 200, "pipeline stuck"

    sim = Simulator(top)
    sim.add_clock(1e-6, domain="sync")
    sim.add_testbench(bench)
    add_deadline(sim)
    sim.run()
    return result


def check(model, ins, outs, what=""):
    exp = model.expected_payloads(ins)
    got = model.canon_out(outs)
    assert len(got) == len(exp)
    bad = [k for k, (g, e) in enumerate(zip(got, exp)) if g != e]
    if bad:
        lines = [f"{model.describe(ins[k])}: got {got[k]:#x}, expected {exp[k]:#x}"
                 for k in bad[:8]]
        raise AssertionError(f"{model.NAME} {what}: {len(bad)} of {len(ins)} wrong\n"
                             + "\n".join(lines))


def random_inputs(block, model, rng, n):
    if block in ("fp32_add", "fp32_mul", "fp32_compare"):
        a, b = gold.random_pairs(rng, n, {"fp32_add": "add", "fp32_mul": "mul",
                                          "fp32_compare": "cmp"}[block])
        if block == "fp32_add":
            return model.pack_in(a=a, b=b, sub=rng.integers(0, 2, n))
        return model.pack_in(a=a, b=b)
    if block == "int_to_fp32":
        return model.pack_in(i=gold.random_int32(rng, n))
    return model.pack_in(a=gold.random_ftoi(rng, n), rne=rng.integers(0, 2, n))


def special_inputs(block, model):
    if block in ("fp32_add", "fp32_mul", "fp32_compare"):
        pairs = np.array(list(itertools.product(gold.SPECIALS_SMALL, repeat=2)), dtype=np.int64)
        a, b = pairs[:, 0], pairs[:, 1]
        if block == "fp32_add":
            n = len(a)
            return model.pack_in(a=np.tile(a, 2), b=np.tile(b, 2),
                                 sub=np.repeat([0, 1], n))
        return model.pack_in(a=a, b=b)
    if block == "int_to_fp32":
        return model.pack_in(i=np.array(gold.INT_SPECIALS, dtype=np.int64))
    n = len(gold.FTOI_SPECIALS)
    return model.pack_in(a=np.tile(gold.FTOI_SPECIALS, 2), rne=np.repeat([0, 1], n))


# ----------------------------------------------------------------------------------------------
# Results at full rate, exact latency
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["tiny", "default"])
@pytest.mark.parametrize("block", UNIT_NAMES)
def test_unit_full_rate_random_and_specials(block, preset):
    cfg = FP32Config.preset(preset)
    model = gold.model_for(block, cfg)
    rng = np.random.default_rng(1000 + UNIT_NAMES.index(block))
    ins = special_inputs(block, model) + random_inputs(block, model, rng, 300)
    dut = HW[block](config=cfg)
    assert dut.latency == cfg.latency(block) == model.latency
    r = simulate(dut, ins)
    check(model, ins, r.out, f"preset {preset}")
    # one operation per cycle, each result exactly `latency` cycles after its input
    assert r.in_cycles == list(range(len(ins)))
    assert [o - i for i, o in zip(r.in_cycles, r.out_cycles)] == [dut.latency] * len(ins)


def test_mul_with_every_boundary_registered():
    """The FPGA builds' multiplier (``hdl.core.config.fpga_fp32_config``: ``mul_stages = 6``,
    the ``lzc`` boundary registered too, which the ``default`` preset leaves a wire): the same
    words at full rate and under backpressure, each result ``latency`` = 6 cycles after its
    operands."""
    from hdl.core.config import fpga_fp32_config
    cfg = fpga_fp32_config()
    assert cfg.latency("fp32_mul") == 6 and all(cfg.cuts("fp32_mul").values())
    assert not FP32Config.preset("default").cuts("fp32_mul")["lzc"]
    model = gold.model_for("fp32_mul", cfg)
    rng = np.random.default_rng(1006)
    ins = special_inputs("fp32_mul", model) + random_inputs("fp32_mul", model, rng, 300)
    dut = FP32Mul(config=cfg)
    assert dut.latency == model.latency == 6
    r = simulate(dut, ins)
    check(model, ins, r.out, "mul_stages 6")
    assert [o - i for i, o in zip(r.in_cycles, r.out_cycles)] == [6] * len(ins)
    r = simulate(FP32Mul(config=cfg), ins, seed=8, idle_prob=0.3, stall_prob=0.4)
    check(model, ins, r.out, "mul_stages 6 under backpressure")


@pytest.mark.parametrize("block", UNIT_NAMES)
def test_unit_backpressure_and_idle(block):
    cfg = FP32Config.preset("default")
    model = gold.model_for(block, cfg)
    rng = np.random.default_rng(2000 + UNIT_NAMES.index(block))
    ins = random_inputs(block, model, rng, 250)
    r = simulate(HW[block](config=cfg), ins, seed=7, idle_prob=0.3, stall_prob=0.4)
    check(model, ins, r.out, "under backpressure")
    assert all(o - i >= cfg.latency(block) for i, o in zip(r.in_cycles, r.out_cycles))


@pytest.mark.parametrize("block", UNIT_NAMES)
def test_unit_reset_mid_stream(block):
    cfg = FP32Config.preset("default")
    model = gold.model_for(block, cfg)
    rng = np.random.default_rng(3000 + UNIT_NAMES.index(block))
    ins = random_inputs(block, model, rng, 120)
    r = simulate(HW[block](config=cfg), ins, seed=3, stall_prob=0.2, reset_after=40)
    # everything in flight at the reset is dropped; the 80 later operations are all correct
    check(model, ins[40:], r.out, "after reset")


# ----------------------------------------------------------------------------------------------
# The split rounding against the shared rounding golden model
# ----------------------------------------------------------------------------------------------

def test_split_rounding_matches_shared_round_golden():
    """round_prepare + round_finish == sim.model.fp32_round.round_to_fp32 (the golden model of the
    shared hdl.fp32.round.round_to_fp32) for normalised significands of 27 and 48 bits with a
    jammed sticky LSB, over every exponent region (deep underflow, subnormal, normal, overflow)."""
    from amaranth.hdl import signed
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    from hdl.fp32.round import round_finish, round_prepare
    from sim.model.fp32_round import round_to_fp32 as golden

    class Harness(wiring.Component):
        def __init__(self, width):
            self.width = width
            super().__init__({"sign": In(1), "exp": In(signed(12)), "norm": In(width),
                              "result": Out(32)})

        def elaborate(self, platform):
            m = Module()
            r = round_prepare(m, exp=self.exp, norm=self.norm, name="t")
            m.d.comb += self.result.eq(round_finish(m, sign=self.sign, frame=r.frame,
                                                     base=r.base, ovf=r.ovf, name="t"))
            return m

    rng = random.Random(11)
    for width in (27, 48):
        dut = Harness(width)
        cases = []
        for _ in range(600):
            norm = (1 << (width - 1)) | rng.getrandbits(width - 1)
            if rng.random() < 0.3:         # ties and near-ties at the normal rounding position
                low = width - 24
                norm = (norm >> low << low) | rng.choice([1 << (low - 1), (1 << (low - 1)) + 1,
                                                          (1 << (low - 1)) - 1, 0])
            lead = rng.choice([rng.randint(-175, -120), rng.randint(-130, 130),
                               rng.randint(120, 135)])
            cases.append((rng.getrandbits(1), lead - (width - 1), norm))
        cases += [(0, -149 - (width - 1) + k, 1 << (width - 1)) for k in (-2, -1, 0, 1)]
        cases += [(1, 127 - (width - 1), (1 << width) - 1)]           # rounds to -Inf
        got = []

        async def bench(ctx):
            for sign, exp, norm in cases:
                ctx.set(dut.sign, sign)
                ctx.set(dut.exp, exp)
                ctx.set(dut.norm, norm)
                got.append(ctx.get(dut.result))

        sim = Simulator(dut)
        sim.add_testbench(bench)
        add_deadline(sim)
        sim.run()
        for (sign, exp, norm), g in zip(cases, got):
            # the jammed LSB stands for "non-zero bits below": golden sees it as sticky
            e = golden(sign, exp + 1, norm >> 1, sticky=norm & 1)
            assert g == e, (width, sign, exp, hex(norm), hex(g), hex(e))


def test_unpack_staged_is_unpack_a_cycle_later():
    """``unpack_fp32_staged`` (the divider's and square root's ``lzc_stage``) gives every field
    of ``unpack_fp32(normalize=True)`` of the operand one register stage earlier: the special
    operands and random ones (subnormals among them). The units read only some fields (their
    exponents come as ``exp_raw`` and ``lz``), so the rest is checked here."""
    from amaranth.hdl import Signal
    from hdl.fp32.unpack import unpack_fp32, unpack_fp32_staged
    m = Module()
    m.domains.sync = ClockDomain()
    bits = Signal(32)

    def reg(value, name):
        r = Signal(Value.cast(value).shape(), name=name)
        m.d.sync += r.eq(value)
        return r
    staged = unpack_fp32_staged(m, bits, name="st", reg=reg)
    ref = unpack_fp32(m, reg(bits, "bits_q"), name="ref", normalize=True)
    fields = ("sign", "efield", "frac", "zero", "sub", "inf", "nan", "finite", "mag", "sig",
              "exp", "exp_raw", "lz")
    ops = list(gold.SPECIALS) + [int(v) for v in gold.random_fp32(np.random.default_rng(77), 400)]
    got = []

    async def bench(ctx):
        for x in ops:
            ctx.set(bits, x)
            await ctx.tick()
            got.append({f: (ctx.get(getattr(staged, f)), ctx.get(getattr(ref, f)))
                        for f in fields})

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    add_deadline(sim)
    sim.run()
    for x, row in zip(ops, got):
        for f, (a, b) in row.items():
            assert a == b, (hex(x), f, a, b)


@pytest.mark.parametrize("width", [1, 2, 5, 24, 28, 32])
def test_count_leading_zeros(width):
    from amaranth.hdl import Signal

    from hdl.fp32.round import count_leading_zeros

    m = Module()
    value = Signal(width)
    lz = count_leading_zeros(m, value, name="t")
    rng = random.Random(width)
    vals = [0] + [1 << k for k in range(width)] + [rng.getrandbits(width) for _ in range(40)]
    got = []

    async def bench(ctx):
        for v in vals:
            ctx.set(value, v)
            got.append(ctx.get(lz))

    sim = Simulator(m)
    sim.add_testbench(bench)
    add_deadline(sim)
    sim.run()
    assert got == [width - v.bit_length() for v in vals]


def test_split_rounding_with_late_normalization_matches_golden():
    """normalize_left + round_plan_pre/round_plan_lz + round_prepare/finish (the adder's
    arrangement) on un-normalised 28-bit significands == sim.model.fp32_round.round_to_fp32."""
    from amaranth.hdl import signed
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    from hdl.fp32.round import (normalize_left, round_finish, round_plan_lz, round_plan_pre,
                                round_prepare)
    from sim.model.fp32_round import round_to_fp32 as golden

    class Harness(wiring.Component):
        sign: In(1)
        exp: In(signed(12))
        sig: In(28)
        result: Out(32)

        def elaborate(self, platform):
            m = Module()
            pre = round_plan_pre(m, exp=self.exp, width=28, name="t")
            norm, _, _, lz = normalize_left(m, self.sig, 0, name="t")
            plan = round_plan_lz(m, pre=pre, lz=lz, width=28, name="t")
            r = round_prepare(m, norm=norm, plan=plan, name="t")
            m.d.comb += self.result.eq(round_finish(m, sign=self.sign, frame=r.frame,
                                                     base=r.base, ovf=r.ovf, name="t"))
            return m

    rng = random.Random(12)
    cases = []
    for _ in range(800):
        sig = rng.getrandbits(rng.randint(1, 28))
        if sig == 0:
            continue
        lead = rng.choice([rng.randint(-175, -120), rng.randint(-130, 130),
                           rng.randint(120, 135)])
        cases.append((rng.getrandbits(1), lead - (sig.bit_length() - 1), sig))
    dut = Harness()
    got = []

    async def bench(ctx):
        for sign, exp, sig in cases:
            ctx.set(dut.sign, sign)
            ctx.set(dut.exp, exp)
            ctx.set(dut.sig, sig)
            got.append(ctx.get(dut.result))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    add_deadline(sim)
    sim.run()
    for (sign, exp, sig), g in zip(cases, got):
        e = golden(sign, exp, sig)
        assert g == e, (sign, exp, hex(sig), hex(g), hex(e))


# ----------------------------------------------------------------------------------------------
# Semantics
# ----------------------------------------------------------------------------------------------

def _f(x):
    return int(gold.f32_to_bits(x))


NAMED_ADD = {
    "x + (-x) = +0": (_f(1.5), _f(-1.5), 0),
    "x - x = +0": (_f(-3.0), _f(-3.0), 1),
    "(-0) + (-0) = -0": (0x80000000, 0x80000000, 0),
    "(+0) + (-0) = +0": (0x00000000, 0x80000000, 0),
    "(-0) - (+0) = -0": (0x80000000, 0x00000000, 1),
    "1 + 2^-24 tie to even (down)": (_f(1.0), 0x33800000, 0),
    "(1 + 2^-23) + 2^-24 tie to even (up)": (0x3F800001, 0x33800000, 0),
    "max + max overflows to +Inf": (0x7F7FFFFF, 0x7F7FFFFF, 0),
    "-max - ulp/2 ties to -max": (0xFF7FFFFF, 0x73000000, 1),
    "min normal - min subnormal = largest subnormal": (0x00800000, 0x00000001, 1),
    "subnormal + subnormal = normal": (0x00400000, 0x00400000, 0),
    "catastrophic cancellation to one ulp": (0x3F800001, _f(1.0), 1),
    "cancellation leaving a subnormal": (0x00800001, 0x00800000, 1),
    "Inf - Inf = NaN": (0x7F800000, 0x7F800000, 1),
    "Inf + (-Inf) = NaN": (0x7F800000, 0xFF800000, 0),
    "-Inf + max = -Inf": (0xFF800000, 0x7F7FFFFF, 0),
    "sNaN + 1 = NaN": (0x7F800001, _f(1.0), 0),
    "alignment distance 26, sticky decides": (_f(1.0), 0xB2800001, 0),
    "alignment distance 200": (0x7E000000, 0x00000003, 1),
}

NAMED_MUL = {
    "min subnormal * 0.5 ties to +0": (0x00000001, _f(0.5), None),
    "min subnormal * -0.75 rounds to -min subnormal": (0x00000001, _f(-0.75), None),
    "min normal * (1 - 2^-24) rounds up to min normal": (0x00800000, 0x3F7FFFFF, None),
    "subnormal * 2^24 is exact normal": (0x00000003, 0x4B800000, None),
    "max * 2 overflows to Inf": (0x7F7FFFFF, _f(-2.0), None),
    "0 * Inf = NaN": (0x00000000, 0xFF800000, None),
    "-0 * 5 = -0": (0x80000000, _f(5.0), None),
    "subnormal * subnormal underflows to zero": (0x007FFFFF, 0x807FFFFF, None),
    "2^-63 * 2^-63 -> subnormal 2^-126": (0x20000000, 0x20000000, None),
}


@pytest.mark.parametrize("block, cases", [("fp32_add", NAMED_ADD), ("fp32_mul", NAMED_MUL)])
def test_named_edge_cases(block, cases):
    cfg = FP32Config.preset("default")
    model = gold.model_for(block, cfg)
    names = list(cases)
    if block == "fp32_add":
        ins = model.pack_in(**{k: [cases[n][j] for n in names]
                               for j, k in enumerate(("a", "b", "sub"))})
    else:
        ins = model.pack_in(a=[cases[n][0] for n in names], b=[cases[n][1] for n in names])
    r = simulate(HW[block](config=cfg), ins)
    exp = model.expected_payloads(ins)
    got = model.canon_out(r.out)
    wrong = [n for n, g, e in zip(names, got, exp) if g != e]
    assert not wrong, wrong
    # sanity of the named facts themselves (zero signs, ties, NaN) against the golden model
    if block == "fp32_add":
        res = dict(zip(names, exp))
        assert res["x + (-x) = +0"] == 0 and res["(-0) + (-0) = -0"] == 0x80000000
        assert res["1 + 2^-24 tie to even (down)"] == _f(1.0)
        assert res["Inf - Inf = NaN"] == gold.QNAN


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_add_results_at_the_subnormal_boundary(preset):
    """Sums and differences whose result lies near the smallest normal exponent, where the
    adder stops its normalising shift (``hdl/fp32/add.py``) instead of shifting right: both
    exponent fields 0..40, cancellations of near-equal operands, and every clamp position
    ``base_pre`` 1..28 of the shift limit is reached with the result exactly subnormal,
    exactly ``2**-126`` and just normal."""
    cfg = FP32Config.preset(preset)
    model = gold.model_for("fp32_add", cfg)
    rng = np.random.default_rng(77)
    n = 1500
    ea = rng.integers(0, 41, n)
    eb = np.clip(ea + rng.integers(-3, 4, n), 0, 40)
    a = (rng.integers(0, 2, n) << 31) | (ea << 23) | rng.integers(0, 1 << 23, n)
    b = (rng.integers(0, 2, n) << 31) | (eb << 23) | rng.integers(0, 1 << 23, n)
    # near-cancellations: b = -a plus or minus a few units in the last place
    k = rng.integers(-4, 5, n // 3)
    a2 = a[:n // 3]
    b2 = (a2 ^ (1 << 31)) + k
    b2 = np.where((b2 & 0x7FFFFFFF) > 0x7F7FFFFF, a2 ^ (1 << 31), b2)
    edges = [0x00800000, 0x00000001, 0x007FFFFF, 0x00800001, 0x01000000, 0x00FFFFFF]
    ea_ = np.array(edges * len(edges), dtype=np.int64)
    eb_ = np.repeat(np.array(edges, dtype=np.int64), len(edges))
    A = np.concatenate([a, a2, ea_]).astype(np.int64)
    B = np.concatenate([b, b2, eb_]).astype(np.int64)
    sub = np.concatenate([rng.integers(0, 2, n), np.zeros(n // 3, dtype=np.int64),
                          np.ones(len(ea_), dtype=np.int64)])
    ins = model.pack_in(a=A, b=B, sub=sub)
    exp = np.array(model.expected_payloads(ins), dtype=np.int64)
    # the cases reach the boundary from both sides
    efield = (exp >> 23) & 0xFF
    assert np.sum((efield == 0) & ((exp & 0x7FFFFF) != 0)) > 200        # subnormal results
    assert np.sum(efield == 1) > 30 and np.sum((exp & 0x7FFFFFFF) == 0x00800000) > 0
    r = simulate(FP32Add(config=cfg), ins)
    check(model, ins, r.out, f"subnormal boundary, preset {preset}")


def _same_sign_cases(rng, n):
    """Operand triples ``(a, b, sub)`` whose non-NaN operands share their effective sign
    (``b``'s sign flipped when ``sub``): the general random pairs with ``b``'s sign forced,
    pairs of exponent fields 0..40 (subnormal sums that carry into the normal range, the
    ``base_pre = 1`` limit), equal operands (the sum's carry), sums near the largest finite
    value (overflow to Inf) and every pair of the special-value set that qualifies."""
    a, b = gold.random_pairs(rng, n, "add")
    ea = np.where(rng.random(n) < 0.5, rng.integers(0, 2, n), rng.integers(0, 41, n))
    eb = np.clip(ea + rng.integers(-3, 4, n), 0, 40)
    a2 = (ea << 23) | rng.integers(0, 1 << 23, n)
    b2 = (eb << 23) | rng.integers(0, 1 << 23, n)
    a3 = rng.integers(0, 0x7F800000, n // 4)
    a4 = (rng.integers(250, 255, n // 4) << 23) | rng.integers(0, 1 << 23, n // 4)
    b4 = (rng.integers(250, 255, n // 4) << 23) | rng.integers(0, 1 << 23, n // 4)
    pairs = np.array(list(itertools.product(gold.SPECIALS_SMALL, repeat=2)), dtype=np.int64)
    A = np.concatenate([a, a2, a3, a4, pairs[:, 0]]).astype(np.int64)
    B = np.concatenate([b, b2, a3, b4, pairs[:, 1]]).astype(np.int64) & 0x7FFFFFFF
    sub = rng.integers(0, 2, len(A))
    sign = np.where(np.arange(len(A)) < len(A) - len(pairs), rng.integers(0, 2, len(A)),
                    A >> 31 & 1)
    A = (A & 0x7FFFFFFF) | (sign << 31)
    B = B | ((sign ^ sub) << 31)
    nan = lambda x: (x & 0x7FFFFFFF) > 0x7F800000     # noqa: E731
    # the special set's pairs keep their own b sign, so drop those of opposite signs
    keep = nan(A) | nan(B) | ((A >> 31) == ((B >> 31) ^ sub))
    return A[keep], B[keep], sub[keep]


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_add_same_sign_is_the_ieee_sum(preset):
    """``FP32Add(same_sign=True)`` (the row sums' and sums of squares' adder: a one-bit
    leading-zero count and a 2:1 normalising select, exponent-only ordering) gives the same
    words as numpy on effective additions, under random idle cycles and backpressure, with the
    general adder's latency."""
    cfg = FP32Config.preset(preset)
    model = gold.model_for("fp32_add", cfg)
    rng = np.random.default_rng(78)
    A, B, sub = _same_sign_cases(rng, 1200)
    ins = model.pack_in(a=A, b=B, sub=sub)
    exp = np.array(model.expected_payloads(ins), dtype=np.int64)
    efield = (exp >> 23) & 0xFF
    # the cases reach every region the one-bit normalisation must get right
    assert np.sum((efield == 0) & ((exp & 0x7FFFFF) != 0)) > 100      # subnormal sums
    assert np.sum(efield == 1) > 30                                    # carried into normal
    assert np.sum((exp & 0x7FFFFFFF) == 0x7F800000) > 50               # overflow to Inf
    assert np.sum(exp >> 31) > len(exp) // 3                           # negative sums
    dut = FP32Add(config=cfg, same_sign=True)
    assert dut.latency == cfg.latency("fp32_add")          # the general adder's latency
    r = simulate(dut, ins, seed=3, idle_prob=0.2, stall_prob=0.3)
    check(model, ins, r.out, f"same_sign, preset {preset}")
    assert all(o - i >= dut.latency for i, o in zip(r.in_cycles, r.out_cycles))


def test_add_same_sign_must_be_a_bool():
    with pytest.raises(TypeError, match="same_sign"):
        FP32Add(same_sign=1)


@pytest.mark.parametrize("order", ["numpy", "ieee"])
def test_compare_zero_order(order):
    cfg = FP32Config(cmp_zero_order=order)
    model = gold.model_for("fp32_compare", cfg)
    vals = [0x00000000, 0x80000000, _f(1.0), _f(-1.0), gold.QNAN]
    pairs = list(itertools.product(vals, repeat=2))
    ins = model.pack_in(a=[p[0] for p in pairs], b=[p[1] for p in pairs])
    r = simulate(FP32Compare(config=cfg), ins)
    check(model, ins, r.out, f"zero order {order}")
    out = model.unpack_out(model.canon_out(r.out))
    k = pairs.index((0x00000000, 0x80000000))          # max(+0, -0)
    assert out["equal"][k] == 1 and out["less"][k] == 0
    assert out["max"][k] == (0x80000000 if order == "numpy" else 0)
    assert out["min"][k] == 0x80000000


def test_golden_compare_numpy_order_is_numpy():
    a = gold.f32_to_bits([0.0, -0.0, np.nan, 1.0])
    b = gold.f32_to_bits([-0.0, 0.0, 1.0, np.nan])
    out = gold.FP32Compare(FP32Config())(a, b)
    with np.errstate(all="ignore"):
        ref = np.maximum(gold.bits_to_f32(a), gold.bits_to_f32(b)).view(np.uint32)
    assert out["max"].tolist() == gold.canon(ref).tolist()


def test_golden_ftoi_saturation_rules():
    m = gold.FP32ToInt()
    a = gold.f32_to_bits([2.5, 2.5, -2.5, -2147483648.0, 2147483648.0, np.inf, -np.inf])
    a = np.concatenate([a, [gold.QNAN]])
    out = m(a, np.array([0, 1, 1, 0, 0, 0, 0, 0]))
    vals = [v - (1 << 32) if v >> 31 else v for v in out["value"].tolist()]
    assert vals[:3] == [int(np.trunc(2.5)), int(np.rint(2.5)), int(np.rint(-2.5))]
    assert vals[3] == -(1 << 31) and out["invalid"][3] == 0
    assert vals[4:] == [(1 << 31) - 1, (1 << 31) - 1, -(1 << 31), 0]
    assert out["invalid"][4:].tolist() == [1, 1, 1, 1]


def test_random_generators_cover_classes():
    rng = np.random.default_rng(5)
    a, b = gold.random_pairs(rng, 20000, "add")
    ea, eb = (a >> 23) & 0xFF, (b >> 23) & 0xFF
    diff = np.abs(ea.astype(int) - eb.astype(int))
    assert all(np.any(diff == d) for d in range(0, 31))
    assert np.any(diff > 40)
    for x in (a, b):
        assert np.mean(gold.is_nan(x)) > 0.002
        assert np.mean((x & 0x7FFFFFFF) == 0x7F800000) > 0.001
        assert np.mean((x & 0x7FFFFFFF) == 0) > 0.005
        assert np.mean((((x >> 23) & 0xFF) == 0) & ((x & 0x7FFFFF) != 0)) > 0.03
        assert np.mean(((x >> 23) & 0xFF) >= 253) > 0.02
    r = gold.FP32Add()(a, b, np.zeros(len(a), dtype=np.int64))["r"]
    assert np.mean((r & 0x7FFFFFFF) == 0x7F800000) > 0.002          # overflow happens
    assert np.mean((((r >> 23) & 0xFF) == 0) & ((r & 0x7FFFFF) != 0)) > 0.02
    a, b = gold.random_pairs(rng, 20000, "mul")
    r = gold.FP32Mul()(a, b)["r"]
    er = (r >> 23) & 0xFF
    assert np.mean((er == 0) & ((r & 0x7FFFFF) != 0)) > 0.02        # subnormal products
    assert np.mean((r & 0x7FFFFFFF) == 0) > 0.02                    # underflow to zero
    assert np.mean((r & 0x7FFFFFFF) == 0x7F800000) > 0.02           # overflow


# ----------------------------------------------------------------------------------------------
# Configuration, layouts, registry
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value, exc", [
    ("add_stages", 0, ValueError), ("add_stages", 8, ValueError), ("mul_stages", 7, ValueError),
    ("cmp_stages", 3, ValueError), ("itof_stages", 5, ValueError), ("ftoi_stages", 0, ValueError),
    ("ftoi_stages", 4, ValueError),
    ("add_stages", 2.0, TypeError), ("mul_stages", True, TypeError),
    ("cmp_zero_order", "ties", ValueError), ("cmp_zero_order", 1, TypeError),
])
def test_invalid_config_rejected(field, value, exc):
    with pytest.raises(exc, match=rf"FP32Config\.{field}.*{value!r}"):
        FP32Config(**{field: value})


def test_config_presets_cuts_and_latency():
    tiny, default = FP32Config.preset("tiny"), FP32Config.preset("default")
    with pytest.raises(dataclasses.FrozenInstanceError):
        default.add_stages = 2
    for unit in UNIT_NAMES:
        assert tiny.latency(unit) == 1 and not any(tiny.cuts(unit).values())
        cuts = default.cuts(unit)
        assert list(cuts) == list(STEP_BOUNDARIES[unit])
        assert default.latency(unit) == 1 + sum(cuts.values())
        assert set(CUT_PRIORITY[unit]) == set(STEP_BOUNDARIES[unit])
    cfg = FP32Config(add_stages=3)
    assert cfg.cuts("fp32_add") == {"unpack": False, "align": False, "add": False,
                                    "lzc": True, "normalize": False, "round": True}
    with pytest.raises(ValueError, match="unit must be one of"):
        cfg.latency("fp32_div")
    with pytest.raises(TypeError, match="FP32Config"):
        FP32Add(config=object())


def test_layouts_match_golden_fields():
    layouts = {"fp32_add": (FP32AddIn, None), "fp32_mul": (FP32MulIn, None),
               "fp32_compare": (FP32CompareIn, FP32CompareOut),
               "fp32_to_int": (FP32ToIntIn, FP32ToIntOut)}
    for block, (lin, lout) in layouts.items():
        model = gold.model_for(block)
        for layout, fields in ((lin, model.IN_FIELDS), (lout, model.OUT_FIELDS)):
            if layout is None:
                assert fields == (("r", 32),)
                continue
            offset = 0
            for name, width in fields:
                f = data.Layout.cast(layout)[name]
                assert (f.offset, f.width) == (offset, width), (block, name)
                offset += width
            assert data.Layout.cast(layout).size == offset


def _own_blocks():
    """The blocks of the FP32 unit modules (not through the registry, which imports every
    module of the project)."""
    from hdl.fp32 import add, compare, convert, mul
    return {b.name: b for mod in (add, mul, compare, convert) for b in mod.TESSERA_BLOCKS}


@pytest.mark.parametrize("block", UNIT_NAMES)
def test_registered_blocks_publish_latency(block):
    b = _own_blocks()[block]
    for preset in ("tiny", "default"):
        params = b.params(preset)
        top = b.build(preset)
        top._MustUse__silence = True        # built for its attributes only, never elaborated
        assert params["latency"] == top.latency == FP32Config.preset(preset).latency(block)
        assert isinstance(top, HW[block])
        # payload widths (Verilog i__payload / o__payload) match the golden models' fields
        model = gold.model_for(block)
        in_w, out_w = (len(Value.cast(st.payload)) for st in (top.i, top.o))
        assert in_w == sum(w for _, w in model.IN_FIELDS) == params["in_width"]
        assert out_w == sum(w for _, w in model.OUT_FIELDS) == params["out_width"]
