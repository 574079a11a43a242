"""The shared FP32 rounding (hdl.fp32.round): golden model vs numpy, and the hardware (the
combinational round_to_fp32 at several widths, the staged arrangements) vs the golden model."""
import random

import numpy as np
import pytest
from amaranth.hdl import Module, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.fp32.round import round_to_fp32, shift_left
from sim.model.fp32_round import round_to_fp32 as golden
from sim.tb.amaranth_tb import run_sim


def numpy_reference(sign, exp, sig):
    """Single rounding of an exactly representable float64 (valid while sig < 2**53)."""
    with np.errstate(over="ignore"):
        value = np.float32(np.float64(sig) * np.float64(2.0) ** exp)
    bits = int(np.array(value).view(np.uint32))
    return bits | ((sign & 1) << 31)


def random_case(rng):
    sig = rng.getrandbits(rng.choice([1, 3, 8, 24, 25, 30, 40, 48]))
    exp = rng.randint(-200, 140)
    return rng.getrandbits(1), exp, sig


@pytest.mark.parametrize("seed", range(4))
def test_golden_matches_numpy(seed):
    rng = random.Random(seed)
    for _ in range(5000):
        sign, exp, sig = random_case(rng)
        if sig == 0 or not (-1000 < exp < 900):
            continue
        assert golden(sign, exp, sig) == numpy_reference(sign, exp, sig), (sign, exp, sig)


def test_golden_named_cases():
    assert golden(0, 0, 1) == 0x3F800000                       # 1.0
    assert golden(1, 0, 0) == 0x80000000                       # -0.0 keeps its sign
    assert golden(0, -149, 1) == 0x00000001                    # smallest subnormal
    assert golden(0, -150, 1) == 0                             # tie to even: rounds to 0
    assert golden(0, -150, 3) == 0x00000002                    # 1.5 ulp -> 2 ulp
    assert golden(0, -150, 1, sticky=1) == 0x00000001          # above the tie: rounds up
    assert golden(0, 104, (1 << 24) - 1) == 0x7F7FFFFF         # largest normal
    assert golden(0, 103, (1 << 25) - 1) == 0x7F800000         # rounds past it: +Inf
    assert golden(0, -126, 1) == 0x00800000                    # smallest normal
    assert golden(0, -150, (1 << 24) - 1) == 0x00800000        # subnormal rounds into normal
    assert golden(0, 0, (1 << 24) + 1) == 0x4B800000           # 16777217 ties to even


class RoundHarness(wiring.Component):
    sign: In(1)
    exp: In(signed(12))
    sig: In(48)
    sticky: In(1)
    result: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.result.eq(round_to_fp32(m, sign=self.sign, exp=self.exp, sig=self.sig,
                                                 sticky=self.sticky, name="t"))
        return m


def test_hardware_matches_golden():
    dut = RoundHarness()
    rng = random.Random(7)
    cases = [(0, 0, 1, 0), (1, 0, 0, 0), (0, -150, 1, 0), (0, -150, 3, 0), (0, -150, 1, 1),
             (0, 104, (1 << 24) - 1, 0), (0, 103, (1 << 25) - 1, 0), (0, -150, (1 << 24) - 1, 0),
             (1, -2000 // 2, 1, 0), (0, 2000 // 2, 1, 0), (0, -172, (1 << 48) - 1, 1)]
    for _ in range(1500):
        sign, exp, sig = random_case(rng)
        cases.append((sign, exp, sig, rng.getrandbits(1)))

    async def bench(ctx):
        for sign, exp, sig, sticky in cases:
            ctx.set(dut.sign, sign)
            ctx.set(dut.exp, exp)
            ctx.set(dut.sig, sig)
            ctx.set(dut.sticky, sticky)
            got = ctx.get(dut.result)
            assert got == golden(sign, exp, sig, sticky), (sign, exp, sig, sticky, hex(got))

    run_sim(dut, bench)


# ----------------------------------------------------------------------------------------------
# Narrow and wide significands, and the staged arrangements of hdl.fp32.round
# ----------------------------------------------------------------------------------------------

def _run_comb(dut, cases, ports):
    """Apply each case to the ``ports`` of ``dut``; return the ``result`` values."""
    got = []

    async def bench(ctx):
        for case in cases:
            for port, v in zip(ports, case):
                ctx.set(getattr(dut, port), v)
            got.append(ctx.get(dut.result))

    run_sim(dut, bench)
    return got


@pytest.mark.parametrize("width", [1, 8, 25, 26, 33])
def test_round_to_fp32_any_width(width):
    """round_to_fp32 pads narrow significands (< 26 bits) and normalises any width; sig = 0
    gives a signed zero even with the sticky bit set (as the golden model)."""

    class Harness(wiring.Component):
        def __init__(self):
            super().__init__({"sign": In(1), "exp": In(signed(10)), "sig": In(width),
                              "sticky": In(1), "result": Out(32)})

        def elaborate(self, platform):
            m = Module()
            m.d.comb += self.result.eq(round_to_fp32(m, sign=self.sign, exp=self.exp,
                                                     sig=self.sig, sticky=self.sticky, name="t"))
            return m

    rng = random.Random(100 + width)
    cases = [(1, 5, 0, 1), (0, -200, 0, 1), (0, -149, 1, 0), (0, -150, 1, 1), (1, 127, 1, 0),
             (0, 127 - (width - 1), (1 << width) - 1, 1), (0, -256, (1 << width) - 1, 1),
             (0, 255, 1, 0)]
    for _ in range(300):
        sig = rng.getrandbits(rng.randint(1, width))
        lead = rng.choice([rng.randint(-175, -120), rng.randint(-130, 130), rng.randint(120, 135)])
        exp = max(-256, min(255, lead - max(sig.bit_length() - 1, 0)))
        cases.append((rng.getrandbits(1), exp, sig, rng.getrandbits(1)))
    got = _run_comb(Harness(), cases, ("sign", "exp", "sig", "sticky"))
    for (sign, exp, sig, sticky), g in zip(cases, got):
        assert g == golden(sign, exp, sig, sticky), (width, sign, exp, hex(sig), sticky, hex(g))


@pytest.mark.parametrize("width", [26, 28])
def test_top2_plan_with_sticky_matches_golden(width):
    """The divider / square-root arrangement: a significand whose leading one is in one of its
    two top bits, round_plan_top2 from the exponent, round_plan_select by the top bit, one-bit
    normalise, round_prepare with a separate sticky input, round_finish."""
    from amaranth.hdl import Mux, Signal

    from hdl.fp32.round import round_finish, round_plan_select, round_plan_top2, round_prepare

    class Harness(wiring.Component):
        def __init__(self):
            super().__init__({"sign": In(1), "exp": In(signed(11)), "sig": In(width),
                              "sticky": In(1), "result": Out(32)})

        def elaborate(self, platform):
            m = Module()
            plans = round_plan_top2(m, exp=self.exp, width=width, name="t")
            top = self.sig[-1]
            norm = Signal(width)
            m.d.comb += norm.eq(Mux(top, self.sig, self.sig << 1))
            r = round_prepare(m, norm=norm, plan=round_plan_select(top, plans.top, plans.low),
                              sticky=self.sticky, name="t")
            m.d.comb += self.result.eq(round_finish(m, sign=self.sign, frame=r.frame,
                                                     base=r.base, ovf=r.ovf, name="t"))
            return m

    rng = random.Random(200 + width)
    cases = []
    for _ in range(500):
        sig = (1 << (width - 1 - rng.getrandbits(1))) | rng.getrandbits(width - 2)
        if rng.random() < 0.3:               # ties and near-ties at the normal position
            low = sig.bit_length() - 24
            sig = (sig >> low << low) | rng.choice([1 << (low - 1), 0, (1 << (low - 1)) - 1])
        lead = rng.choice([rng.randint(-175, -120), rng.randint(-130, 130), rng.randint(120, 135)])
        cases.append((rng.getrandbits(1), lead - (sig.bit_length() - 1), sig, rng.getrandbits(1)))
    cases += [(0, -149 - (width - 2) + k, 1 << (width - 2), s) for k in (-2, -1, 0, 1)
              for s in (0, 1)]
    got = _run_comb(Harness(), cases, ("sign", "exp", "sig", "sticky"))
    for (sign, exp, sig, sticky), g in zip(cases, got):
        assert g == golden(sign, exp, sig, sticky), (width, sign, exp, hex(sig), sticky, hex(g))


def test_unpack_reexports_the_rounding():
    """hdl.fp32.unpack still offers the rounding helpers it used to define: the same objects."""
    import hdl.fp32.round as rnd
    import hdl.fp32.unpack as unpack

    for name in ("count_leading_zeros", "normalize_left", "jam_sticky", "round_plan",
                 "round_plan_pre", "round_plan_lz", "round_prepare", "round_finish"):
        assert getattr(unpack, name) is getattr(rnd, name), name


def test_round_prepare_rejects_bad_arguments():
    from amaranth.hdl import Signal

    from hdl.fp32.round import round_prepare
    m = Module()
    m._MustUse__silence = True               # never elaborated, by design
    with pytest.raises(ValueError, match="at least 26 bits"):
        round_prepare(m, norm=Signal(25), exp=Signal(signed(8)), name="t")
    with pytest.raises(ValueError, match="exactly one of exp and plan"):
        round_prepare(m, norm=Signal(30), name="t")


class ShiftHarness(wiring.Component):
    def __init__(self, n, k, width):
        self.width = width
        super().__init__({"value": In(n), "amount": In(k), "result": Out(width)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.result.eq(shift_left(self.value, self.amount, self.width))
        return m


@pytest.mark.parametrize("n, k, width", [(5, 3, 5), (5, 3, 8), (6, 3, 4), (24, 5, 24),
                                         (3, 4, 3)])
def test_shift_left_is_shl(n, k, width):
    """``shift_left`` (MSB-first stages, the FP32 units' normalising shift) gives the bits of
    ``(value << amount)`` cut or zero-extended to ``width``: every value and amount when small,
    random ones at 24 bits; amounts at and past the width give 0."""
    dut = ShiftHarness(n, k, width)
    if n * k <= 32:
        cases = [(v, a) for v in range(1 << n) for a in range(1 << k)]
    else:
        rng = random.Random(n)
        cases = [(rng.getrandbits(n) >> rng.randrange(n), rng.randrange(1 << k))
                 for _ in range(3000)] + [((1 << n) - 1, a) for a in range(1 << k)]
    got = _run_comb(dut, cases, ("value", "amount"))
    want = [((v << a) & ((1 << width) - 1)) for v, a in cases]
    assert got == want


class UnpackHarness(wiring.Component):
    def __init__(self):
        super().__init__({"value": In(32), "result": Out(24 + 10 + 5)})

    def elaborate(self, platform):
        from amaranth.hdl import Cat
        from hdl.fp32.unpack import unpack_fp32
        m = Module()
        u = unpack_fp32(m, self.value, name="u", normalize=True)
        m.d.comb += self.result.eq(Cat(u.sig, u.exp, u.lz))
        return m


def test_unpack_normalize_matches_reference():
    """``unpack_fp32(normalize=True)`` (the normalising unpack of the divider, square root,
    multiplier and log): every subnormal leading-one position with random bits below it, the
    smallest and largest subnormals, zeros, normals, Inf and NaN (and random patterns) give the
    significand with bit 23 set, ``exp = max(efield, 1) - 150 - lz`` and the shift ``lz`` of a
    reference that normalises ``frac | hidden << 23`` bit by bit."""
    rng = random.Random(11)
    cases = [0x00000000, 0x80000000, 0x00000001, 0x007FFFFF, 0x00400000, 0x00800000,
             0x3F800000, 0x7F7FFFFF, 0x7F800000, 0x7FC00000, 0xFF800001]
    for top in range(23):                        # a subnormal's leading one at bit `top`
        for _ in range(6):
            cases.append((rng.getrandbits(1) << 31) | (1 << top) | rng.getrandbits(top + 1)
                         & ((1 << top) - 1))
    cases += [rng.getrandbits(32) for _ in range(1500)]

    def ref(v):
        frac, ef = v & 0x7FFFFF, (v >> 23) & 0xFF
        sig, lz = frac | ((ef != 0) << 23), 0
        while sig and not sig >> 23:
            sig, lz = sig << 1, lz + 1
        if sig == 0:
            lz = 24
        exp = (max(ef, 1) - 150 - lz) & 0x3FF
        return sig | (exp << 24) | (lz << 34)

    got = _run_comb(UnpackHarness(), [(c,) for c in cases], ("value",))
    assert got == [ref(c) for c in cases]


class SigLzHarness(wiring.Component):
    def __init__(self):
        super().__init__({"value": In(32), "result": Out(5)})

    def elaborate(self, platform):
        from hdl.fp32.unpack import sig_leading_zeros, unpack_fp32
        m = Module()
        u = unpack_fp32(m, self.value, name="u")
        m.d.comb += self.result.eq(sig_leading_zeros(m, u, name="u_sig"))
        return m


def test_sig_leading_zeros_counts_the_significand():
    """``sig_leading_zeros`` (the count of the multiplier, the log and the staged unpack, with
    the hidden bit's exponent test beside the tree) is the leading zeros of the 24-bit
    significand with its hidden bit: 0 for normals, Inf and NaN, 24 for zeros, and every
    subnormal leading-one position."""
    rng = random.Random(12)
    cases = [0x00000000, 0x80000000, 0x00000001, 0x007FFFFF, 0x00800000, 0x00800001,
             0x3F800000, 0x7F800000, 0x7FC00000, 0xFF800001]
    cases += [(rng.getrandbits(1) << 31) | (1 << top) | rng.getrandbits(top + 1) & ((1 << top) - 1)
              for top in range(23) for _ in range(4)]
    cases += [rng.getrandbits(32) for _ in range(500)]

    def ref(v):
        sig = (v & 0x7FFFFF) | ((((v >> 23) & 0xFF) != 0) << 23)
        return 24 - sig.bit_length()

    got = _run_comb(SigLzHarness(), [(c,) for c in cases], ("value",))
    assert got == [ref(c) for c in cases]
