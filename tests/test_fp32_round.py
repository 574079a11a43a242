"""The shared FP32 rounding stage: golden model vs numpy, and hardware vs golden model."""
import random

import numpy as np
import pytest
from amaranth.hdl import Module, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.fp32.round import round_to_fp32
from sim.amaranth_tb import run_sim
from sim.fp32_round import round_to_fp32 as golden


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
