"""Golden model sim.model.bfp against independent exact arithmetic (fractions / float64).

The reference here (`ref_group`) is written from the numerical definition in docs/bfp.md using
Python's Fraction and math.frexp, not from the model's bit manipulations.
"""
import math
from fractions import Fraction

import numpy as np
import pytest

from hdl.config import BFPConfig
from sim.model import bfp
from sim.model.bfp import (E_ZERO, LFSR, ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE,
                           dequantize, quantize, quantize_group)
from sim.model.fp32_round import round_to_fp32

MODES = (ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE)
CFG = BFPConfig.preset("default")
TINY = BFPConfig.preset("tiny")


def f32(*vals):
    return np.array(vals, dtype=np.float32)


def ref_group(vals, m, rounding, noise, r):
    """Independent reference: (E, sign, M, invalid, overflow) from exact rationals."""
    vals = [float(v) for v in np.asarray(vals, np.float32)]
    nan = any(math.isnan(v) for v in vals)
    inf = any(math.isinf(v) for v in vals)
    G = len(vals)
    if nan or inf:
        return E_ZERO, [0] * G, [0] * G, nan, inf
    signs = [int(math.copysign(1.0, v) < 0) for v in vals]
    big = max(abs(v) for v in vals)
    if big == 0:
        return E_ZERO, signs, [0] * G, False, False
    E = math.frexp(big)[1] - 1                   # big = f * 2**e, 0.5 <= f < 1
    assert 2.0 ** E <= big < 2.0 ** (E + 1)
    lsb = Fraction(2) ** (E - (m - 1))
    mags = []
    for j, v in enumerate(vals):
        q = Fraction(abs(v)) / lsb
        fl = math.floor(q)
        if rounding == ROUND_NEAREST:
            d = q - fl
            M = fl + 1 if d > Fraction(1, 2) or (d == Fraction(1, 2) and fl % 2) else fl
        elif rounding == ROUND_STOCHASTIC:
            M = (math.floor(q * 2 ** r) + int(noise[j])) // 2 ** r
        else:
            M = fl
        mags.append(min(M, 2 ** m - 1))
    return E, signs, mags, False, False


def random_groups(rng, n, G, *, specials=False):
    return bfp.random_fp32_groups(rng, n, G, special_prob=0.1 if specials else 0.0)


def check(vals, cfg, m, rounding, noise=None):
    got = quantize_group(vals, cfg, m, rounding, noise)
    exp = ref_group(vals, m, rounding, noise, cfg.noise_bits)
    assert got[0] == exp[0], (vals, got, exp)
    assert list(got[1]) == exp[1]
    assert list(got[2]) == exp[2], (vals, m, rounding, got, exp)
    assert (got[3], got[4]) == (exp[3], exp[4])
    return got


@pytest.mark.parametrize("rounding", MODES)
@pytest.mark.parametrize("m", CFG.widths)
def test_random_groups_match_exact_reference(m, rounding):
    rng = np.random.default_rng(100 + 10 * m + rounding)
    lfsr = LFSR(CFG)
    for vals in random_groups(rng, 60, CFG.group_size, specials=True):
        check(vals, CFG, m, rounding, lfsr.noise())


@pytest.mark.parametrize("cfg", [TINY, CFG], ids=["tiny", "default"])
def test_named_edge_cases_match_exact_reference(cfg):
    for m in cfg.widths:
        lfsr = LFSR(cfg)
        for name, groups in bfp.edge_case_groups(cfg, m).items():
            for vals in groups:
                for mode in MODES:
                    check(vals, cfg, m, mode, lfsr.noise())


def test_edge_cases_hit_what_they_are_named_for():
    for m in TINY.widths:
        cases = bfp.edge_case_groups(TINY, m)
        sat = quantize_group(cases["saturation"][0], TINY, m, ROUND_NEAREST)
        assert sat[2][0] == sat[2][1] == 2 ** m - 1
        sub = quantize_group(cases["saturation_subnormal"][0], TINY, m, ROUND_NEAREST)
        assert sub[0] == -130 and sub[2][0] == 2 ** m - 1
        assert quantize_group(cases["all_zero"][0], TINY, m, ROUND_NEAREST)[0] == E_ZERO
        assert quantize_group(cases["largest_normal"][0], TINY, m, ROUND_NEAREST)[0] == 127
        assert quantize_group(cases["smallest_subnormal"][0], TINY, m, ROUND_NEAREST)[0] == -149
        ties = quantize_group(cases["ties"][0], TINY, m, ROUND_NEAREST)
        assert list(ties[2]) == [2 ** (m - 1), 0, 2, 2]          # 1.0, 0.5, 1.5, 2.5 (x lsb)


def test_shared_exponent_is_floor_log2_of_max():
    cfg = TINY
    cases = {
        (1.0, 0.5, -0.25, 0.0): 0,
        (3.0, -7.5, 1.0, 2.0): 2,
        (-8.0, 1.0, 1.0, 1.0): 3,
        (np.finfo(np.float32).max, 1.0, 0, 0): 127,
        (2.0 ** -126, 0, 0, 0): -126,               # smallest normal
        (2.0 ** -149, 0, 0, 0): -149,               # smallest subnormal
        (3 * 2.0 ** -149, 2.0 ** -149, 0, 0): -148,
        (np.float32(2.0 ** -126) * np.float32(0.75), 0, 0, 0): -127,
    }
    for vals, E in cases.items():
        got = check(f32(*vals), cfg, 8, ROUND_NEAREST)
        assert got[0] == E == math.frexp(max(abs(float(v)) for v in f32(*vals)))[1] - 1


def test_zero_group_and_negative_zero():
    exp, sign, mag, inv, ovf = check(f32(0.0, -0.0, 0.0, -0.0), TINY, 4, ROUND_NEAREST)
    assert exp == E_ZERO == -150
    assert list(mag) == [0, 0, 0, 0] and list(sign) == [0, 1, 0, 1] and not inv and not ovf
    # a negative value that rounds to zero keeps its sign bit
    exp, sign, mag, *_ = check(f32(1.0, -2.0 ** -20, 0, 0), TINY, 2, ROUND_NEAREST)
    assert mag[1] == 0 and sign[1] == 1


def test_nearest_even_ties_and_saturation():
    # E = 2, m = 6: lsb = 2**(2-5) = 0.125: q = 32, 33, 35, 3: exact, no rounding
    exp, sign, mag, *_ = check(f32(4.0, 4.125, 4.375, 0.375), TINY, 6, ROUND_NEAREST)
    assert exp == 2 and list(mag) == [32, 33, 35, 3]
    # E = 2, m = 8: lsb = 2**-5: q = 140.5 -> 140, 141.5 -> 142, 0.5 -> 0, 1.5 -> 2 (ties even)
    exp, sign, mag, *_ = check(f32(4.390625, 4.421875, -2.0 ** -6, 3 * 2.0 ** -6), TINY, 8,
                               ROUND_NEAREST)
    assert exp == 2 and list(mag) == [140, 142, 0, 2] and list(sign) == [0, 0, 1, 0]
    # just above a tie rounds up, just below rounds down (sticky bits below the guard bit)
    exp, sign, mag, *_ = check(f32(4.390625 + 2.0 ** -20, 4.421875 - 2.0 ** -20, 0, 0), TINY, 8,
                               ROUND_NEAREST)
    assert list(mag[:2]) == [141, 141]
    exp, sign, mag, *_ = check(f32(7.0, 2.25, 2.75, 0.125), TINY, 4, ROUND_NEAREST)
    # m = 4: lsb = 0.5: q = 14, 4.5 -> 4 (even), 5.5 -> 6 (even), 0.25 -> 0
    assert exp == 2 and list(mag) == [14, 4, 6, 0]
    # saturation: 7.9 / 0.5 = 15.8 rounds to 16 = 2**4 -> 15
    exp, sign, mag, *_ = check(f32(7.9, -7.75, 1.0, 0.0), TINY, 4, ROUND_NEAREST)
    assert exp == 2 and list(mag[:2]) == [15, 15] and list(sign[:2]) == [0, 1]
    # 7.75 / 0.5 = 15.5: tie to even 16 -> saturates too; truncation gives 15
    assert check(f32(7.75, 0, 0, 0), TINY, 4, ROUND_TRUNCATE)[2][0] == 15
    # m = 2: 1.75 / 0.5 = 3.5 -> 4 -> 3
    assert check(f32(1.75, 0, 0, 0), TINY, 2, ROUND_NEAREST)[2][0] == 3


def test_one_huge_value_with_tiny_ones():
    vals = f32(3.0e38, 1.0, -1.0e-30, 2.0 ** -149)
    for m in TINY.widths:
        exp, sign, mag, *_ = check(vals, TINY, m, ROUND_NEAREST)
        assert exp == 127 and mag[0] == min(round(float(vals[0]) / 2.0 ** (127 - (m - 1))), 2 ** m - 1)
        assert list(mag[1:]) == [0, 0, 0]


def test_subnormal_groups_exact():
    rng = np.random.default_rng(7)
    for _ in range(200):
        bits = rng.integers(0, 1 << 23, TINY.group_size).astype(np.uint32)    # all subnormal
        bits |= (rng.integers(0, 2, TINY.group_size).astype(np.uint32) << 31)
        for m in TINY.widths:
            for mode in (ROUND_NEAREST, ROUND_TRUNCATE):
                check(bits.view(np.float32), TINY, m, mode)


def test_nan_and_inf_groups():
    nan, inf = np.float32("nan"), np.float32("inf")
    for vals, flags in [((1.0, nan, 2.0, 3.0), (True, False)),
                        ((1.0, -inf, 2.0, 3.0), (False, True)),
                        ((inf, nan, -2.0, 0.0), (True, True))]:
        exp, sign, mag, inv, ovf = check(f32(*vals), TINY, 8, ROUND_NEAREST)
        assert (inv, ovf) == flags and exp == E_ZERO
        assert not sign.any() and not mag.any()


def test_quantize_layout_padding_and_lfsr_order():
    cfg = TINY
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 10, 2)) * 10).astype(np.float32)   # group along axis 1
    lfsr = LFSR(cfg)
    g = quantize(x, cfg, width=6, axis=1, rounding=ROUND_STOCHASTIC, lfsr=lfsr)
    assert g.mag.shape == g.sign.shape == (3, 12, 2)
    assert g.exp.shape == g.invalid.shape == g.overflow.shape == (3, 3, 2)
    ref = LFSR(cfg)
    padded = np.concatenate([x, np.zeros((3, 2, 2), np.float32)], axis=1)
    for a in range(3):                  # C order of the other axes, grouping axis innermost
        for c in range(2):
            for k in range(3):
                vals = padded[a, 4 * k:4 * k + 4, c]
                e, s, mg, inv, ovf = quantize_group(vals, cfg, 6, ROUND_STOCHASTIC, ref.noise())
                assert e == g.exp[a, k, c]
                assert list(mg) == list(g.mag[a, 4 * k:4 * k + 4, c])
                assert list(s) == list(g.sign[a, 4 * k:4 * k + 4, c])
    assert (lfsr.state == ref.state).all()
    # Without an LFSR, stochastic quantization starts from the reset state.
    again = quantize(x, cfg, width=6, axis=1, rounding=ROUND_STOCHASTIC)
    assert (again.mag == g.mag).all()
    # Non-stochastic modes advance a given LFSR once per group too.
    l2 = LFSR(cfg)
    quantize(x, cfg, width=6, axis=1, rounding=ROUND_NEAREST, lfsr=l2)
    assert (l2.state == ref.state).all()


def test_dequantize_exact_and_half_lsb_bound():
    rng = np.random.default_rng(11)
    x = random_groups(rng, 200, CFG.group_size)
    for m in CFG.widths:
        g = quantize(x, CFG, width=m, rounding=ROUND_NEAREST)
        y = dequantize(g, CFG, width=m)
        E = np.repeat(g.exp, CFG.group_size, axis=-1).astype(np.int64)
        exact = np.where(g.sign == 1, -1.0, 1.0) * g.mag * np.exp2((E - (m - 1)).astype(float))
        assert (y.astype(np.float64) == exact).all()       # every converter output is exact
        assert ((y.view(np.uint32) >> 31) == g.sign).all()
        lsb = np.exp2((E - (m - 1)).astype(float))
        err = np.abs(y.astype(np.float64) - x.astype(np.float64))
        sat = g.mag == (1 << m) - 1
        assert (err[~sat] <= lsb[~sat] / 2).all()
        assert (err[sat] < lsb[sat]).all()
        bad = err > lsb / 2
        assert (g.mag[bad] == (1 << m) - 1).all()


def test_dequantize_arbitrary_inputs_round_to_nearest_even():
    rng = np.random.default_rng(12)
    n = 5000
    exp = rng.integers(-300, 200, n)
    mag = rng.integers(0, 256, n)
    sign = rng.integers(0, 2, n)
    for m in (2, 8):
        got = bfp.dequantize_group_bits(exp, sign, mag, m)
        want = [round_to_fp32(int(s), int(e) - (m - 1), int(M)) for s, e, M in zip(sign, exp, mag)]
        assert (got == np.array(want, np.uint32)).all()
        # and independently: float64 is exact here, its cast to float32 rounds to nearest even
        f64 = np.where(sign == 1, -1.0, 1.0) * mag * np.exp2((exp - (m - 1)).astype(float))
        with np.errstate(over="ignore"):
            assert (got.view(np.float32) == f64.astype(np.float32)).all()


def test_invalid_arguments_rejected():
    x = f32(1, 2, 3, 4)
    with pytest.raises(ValueError, match="width.*5"):
        quantize(x, TINY, width=5)
    with pytest.raises(ValueError, match="width.*10"):
        quantize_group(x, TINY, 10, ROUND_NEAREST)
    with pytest.raises(ValueError, match="rounding.*3"):
        quantize(x, TINY, width=4, rounding=3)
    with pytest.raises(TypeError, match="float32"):
        quantize(np.array([1.0, 2.0]), TINY, width=4)
    with pytest.raises(ValueError, match="noise"):
        quantize_group(x, TINY, 4, ROUND_STOCHASTIC)
    with pytest.raises(TypeError, match="BFPConfig"):
        LFSR(object())


def test_decode_codes_like_hardware():
    assert [bfp.decode_width(c, CFG) for c in range(16)] == \
        [2, 2, 2, 2, 4, 4, 6, 6, 8, 8, 8, 8, 8, 8, 8, 8]
    assert [bfp.decode_width(c, BFPConfig(max_mantissa=4)) for c in range(8)] == \
        [2, 2, 2, 2, 4, 4, 4, 4]
    assert [bfp.decode_rounding(c) for c in range(4)] == [0, 1, 2, 2]


# --- LFSR ---------------------------------------------------------------------------------

def _polymulmod(a, b, p, deg):
    r = 0
    while b:
        if b & 1:
            r ^= a
        b >>= 1
        a <<= 1
        if a >> deg & 1:
            a ^= p
    return r


def _polypow_x(e, p, deg):
    result, base = 1, 2
    while e:
        if e & 1:
            result = _polymulmod(result, base, p, deg)
        base = _polymulmod(base, base, p, deg)
        e >>= 1
    return result


def test_lfsr_polynomial_is_primitive():
    # characteristic polynomial of a_{t+32} = xor_{j in taps} a_{t+j}
    deg = bfp.LFSR_WIDTH
    p = (1 << deg) | sum(1 << t for t in bfp.LFSR_TAPS)
    order = (1 << deg) - 1
    assert _polypow_x(order, p, deg) == 1
    for q in (3, 5, 17, 257, 65537):            # 2**32 - 1 = 3 * 5 * 17 * 257 * 65537
        assert _polypow_x(order // q, p, deg) != 1


def test_lfsr_noise_is_the_bit_sequence():
    cfg = BFPConfig(group_size=3, noise_bits=13, lfsr_seed=0xDEADBEEF)
    seeds = [bfp.lfsr_lane_seed(cfg.lfsr_seed, j) for j in range(3)]
    assert len(set(seeds)) == 3 and all(0 < s < 2 ** 32 for s in seeds)
    # reference: single steps of the Fibonacci register, output = bit 0
    states = list(seeds)
    seqs = [[], [], []]
    for _ in range(13 * 20):
        for j in range(3):
            s = states[j]
            seqs[j].append(s & 1)
            fb = 0
            for t in bfp.LFSR_TAPS:
                fb ^= (s >> t) & 1
            states[j] = (s >> 1) | (fb << 31)
    lfsr = LFSR(cfg)
    for k in range(20):
        n = lfsr.noise()
        for j in range(3):
            want = sum(bit << i for i, bit in enumerate(seqs[j][13 * k:13 * k + 13]))
            assert n[j] == want
    assert list(lfsr.state) == states
    lfsr.reset()
    assert list(lfsr.state) == seeds


@pytest.mark.parametrize("G, r, seed", [(3, 13, 0xDEADBEEF), (8, 8, 1), (4, 1, 9), (16, 16, 7)])
def test_lfsr_noise_block_equals_single_groups(G, r, seed):
    """noise_block(n) (the whole sequence at once) = n calls of noise(), same final state."""
    cfg = BFPConfig(group_size=G, noise_bits=r, lfsr_seed=seed)
    one, block = LFSR(cfg), LFSR(cfg)
    for n in (0, 1, 5, 37, 700, 2):
        want = [one.noise() for _ in range(n)]
        got = block.noise_block(n)
        assert got.shape == (n, G)
        assert np.array_equal(got, np.array(want).reshape(n, G))
        assert np.array_equal(block.state, one.state)
    with pytest.raises(ValueError, match="n must be"):
        block.noise_block(-1)


# --- Stochastic rounding statistics --------------------------------------------------------

def test_stochastic_rounding_unbiased_truncation_biased():
    """Mean rounding error of stochastic rounding is zero; truncation's is about -1/2 LSB.

    Each error M - q lies in (-1, 1) and is a two-point variable with variance <= 1/4, so the
    standard error of the mean of N errors is <= 0.5/sqrt(N) (lanes use independent LFSR
    streams). Bound: 4 standard errors, plus 2**-noise_bits for the deterministic bias of
    discarding the bits of q below 2**-r (q is truncated to r fraction bits before the noise is
    added, which lowers the mean by less than 2**-r LSB). N = 15 * 2000 = 30000:
    bound = 4 * 0.5 / 173 + 1/256 = 0.0155. Truncation's mean error is ~ -0.5, far outside.
    """
    cfg = CFG
    m = 4
    rng = np.random.default_rng(5)
    n_groups = 2000
    lsb_exp = 3 - (m - 1)                       # groups have E = 3 (max element 8.0)
    x = rng.uniform(0, 8, (n_groups, cfg.group_size)).astype(np.float32)
    x[:, 0] = 8.0
    q = x.astype(np.float64) / 2.0 ** lsb_exp
    bound = 4 * 0.5 / math.sqrt(x[:, 1:].size) + 2.0 ** -cfg.noise_bits
    means = {}
    for mode in (ROUND_STOCHASTIC, ROUND_TRUNCATE, ROUND_NEAREST):
        g = quantize(x, cfg, width=m, rounding=mode, lfsr=LFSR(cfg))
        assert (g.exp == 3).all()
        means[mode] = float(np.mean(g.mag[:, 1:] - q[:, 1:]))     # element 0 is exact
    assert abs(means[ROUND_STOCHASTIC]) <= bound, means
    assert means[ROUND_TRUNCATE] < -bound and abs(means[ROUND_TRUNCATE] + 0.5) < 0.02, means
    # one fixed value: P(round up) equals its fraction (0.3), 4 standard errors + 2**-r
    v = np.full((n_groups, cfg.group_size), np.float32((5 + 0.3) * 2.0 ** lsb_exp), np.float32)
    v[:, 0] = 8.0
    g = quantize(v, cfg, width=m, rounding=ROUND_STOCHASTIC)
    frac = float(v[0, 1]) / 2.0 ** lsb_exp - 5
    ups = g.mag[:, 1:] - 5
    assert set(np.unique(ups)) <= {0, 1}
    p = ups.mean()
    n = ups.size
    assert abs(p - frac) <= 4 * math.sqrt(frac * (1 - frac) / n) + 2.0 ** -cfg.noise_bits, p
