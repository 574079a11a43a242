"""Accuracy and defined behaviour of the exp approximation's golden model (sim/model/fp32_exp.py).

The hardware is bit-exact with this model (tests/test_fp32_divsqrt*.py), so these are the
hardware's properties: worst error against float64 ``exp`` below 1 ulp (measured ~0.52 ulp at
the default preset), overflow/underflow exactly where the correctly rounded ``exp`` has them,
specials, monotonicity, ``exp(x <= 0) <= 1``, and every intermediate fits its hardware register.
"""
import numpy as np
import pytest

from hdl.fp32.divsqrt_config import FP32DivSqrtConfig
from hdl.fp32.exp import exp_register_widths
from sim.model.fp32 import bits_to_f32, f32_to_bits, random_fp32
from sim.model.fp32_exp import (QNAN, FP32Exp, exp_product_bounds, exp_ulp_error,
                                measure_exp_accuracy, random_operands, round_to_fp32_vec)
from sim.model.fp32_round import round_to_fp32

#: The stated bound (docs/fp32_div_sqrt_exp.md); the measured worst case is well below.
MAX_ULP = 1.0


def test_accuracy_default_preset():
    """Every 4099th float32 in (-128, 128) plus all of [-1, -0.5), [-104, -96), [88, 89)."""
    acc = measure_exp_accuracy(FP32DivSqrtConfig.preset("default"))
    assert acc["count"] > 10_000_000
    assert acc["max_ulp"] < MAX_ULP, acc
    assert acc["mean_ulp"] < 0.26, acc             # ~0.25 for a correctly rounded exp
    assert acc["not_correctly_rounded"] < 0.01 * acc["count"], acc


def test_accuracy_tiny_preset():
    acc = measure_exp_accuracy(FP32DivSqrtConfig.preset("tiny"), stride=8191, bands=())
    assert acc["max_ulp"] < MAX_ULP, acc


def _reference(x_bits):
    """float64 exp rounded to float32 (the correctly rounded result, up to double rounding)."""
    with np.errstate(over="ignore"):
        return np.exp(bits_to_f32(x_bits).astype(np.float64)).astype(np.float32).view(np.uint32)


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_overflow_and_underflow_thresholds(preset):
    """All float32 near the overflow point (88.72..) and near the underflow-to-zero point
    (-103.97..): the model is Inf / zero for exactly the same inputs as the reference."""
    model = FP32Exp(FP32DivSqrtConfig.preset(preset))
    for lo, hi in [(0x42B17000, 0x42B17400), (0xC2CFF000, 0xC2CFF400)]:
        a = np.arange(lo, hi, dtype=np.int64)
        r = model(a)["r"]
        ref = _reference(a).astype(np.int64)
        assert np.array_equal(r == 0x7F800000, ref == 0x7F800000)
        assert np.array_equal(r == 0, ref == 0)
        assert np.any(r == 0x7F800000) or np.any(r == 0)      # the band holds the threshold
        assert np.any((r != 0) & (r != 0x7F800000))


def test_special_values():
    model = FP32Exp(FP32DivSqrtConfig.preset("default"))
    rng = np.random.default_rng(77)
    one = int(f32_to_bits(1.0))
    cases = {
        "NaN": (np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF]), QNAN),
        "+Inf": (np.array([0x7F800000]), 0x7F800000),
        "-Inf": (np.array([0xFF800000]), 0),
        "x >= 128": (0x43000000 + rng.integers(0, 0x7F800000 - 0x43000000, 500), 0x7F800000),
        "x <= -128": (0xC3000000 + rng.integers(0, 0x7F800000 - 0x43000000, 500), 0),
        "+-0 and subnormals": (np.array([0, 0x80000000, 1, 0x80000001, 0x007FFFFF,
                                         0x807FFFFF]), one),
        "|x| < 2**-30": (rng.integers(0, 0x30800000, 500) | (rng.integers(0, 2, 500) << 31),
                         one),
    }
    for name, (a, want) in cases.items():
        got = model(np.asarray(a, np.int64))["r"]
        assert np.all(got == want), (name, [hex(int(v)) for v in got[got != want][:5]])
    # reference agrees with the defined specials (not only the model)
    for name in ("+Inf", "-Inf", "x >= 128", "x <= -128", "+-0 and subnormals"):
        a, want = cases[name]
        assert np.all(_reference(np.asarray(a, np.int64)) == want), name


def test_subnormal_results_and_sign():
    """Results between 2**-149 and 2**-126 are produced (no flush), with < 1 ulp error;
    ``exp(x) <= 1`` for every ``x <= 0`` and ``>= 1`` for ``x >= 0``."""
    model = FP32Exp(FP32DivSqrtConfig.preset("default"))
    a = np.arange(0xC2AE0000, 0xC2D00000, 97, dtype=np.int64)          # -87 .. -104
    r = model(a)["r"]
    sub = (r > 0) & (r < 0x00800000)
    assert sub.sum() > 1000
    assert exp_ulp_error(a[sub], r[sub]).max() < MAX_ULP
    rng = np.random.default_rng(78)
    x = random_operands("fp32_exp", rng, 200_000, base=random_fp32)["a"]
    r = bits_to_f32(model(x)["r"])
    xf = bits_to_f32(x)
    assert np.all(r[xf <= 0] <= 1.0)
    assert np.all(r[xf >= 0] >= 1.0)


@pytest.mark.parametrize("lo, hi", [(0xBF000000, 0xBF800000), (0x3F000000, 0x3F800000),
                                    (0xC1000000, 0xC1100000)])
def test_monotonic(lo, hi):
    """Every float32 in the band: the result never decreases as x increases (softmax ordering)."""
    model = FP32Exp(FP32DivSqrtConfig.preset("default"))
    a = np.arange(lo, hi, dtype=np.int64)
    order = np.argsort(bits_to_f32(a))
    r = bits_to_f32(model(a[order])["r"]).astype(np.float64)
    assert np.all(np.diff(r) >= 0)


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_intermediates_fit_hardware_registers(preset):
    """The hardware registers truncate to fixed widths; the model's unbounded int64 values must
    always fit, or the two would diverge. Dense sample plus the extreme arguments."""
    cfg = FP32DivSqrtConfig.preset(preset)
    model = FP32Exp(cfg)
    pos = np.arange(0, 0x43000000, 1009, dtype=np.int64)
    edge = np.array([0x42FFFFFF, 0xC2FFFFFF, 0x42FFFFFE, 0xC2FFFFFE, 0x42B17218, 0xC2CFF1B5])
    a = np.concatenate([pos, pos | 0x80000000, edge])
    steps = model.steps(a)
    finite = ~steps["special"]
    for name, (bits, signed) in exp_register_widths(cfg.exp_table_bits).items():
        v = steps[name][finite]
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        assert v.min() >= lo and v.max() <= hi, (name, int(v.min()), int(v.max()), bits)
    c = model.constants
    bound = (0.5 + 2 ** -7) * np.log(2) / c.N * 2 ** 30 + 2
    assert np.abs(steps["red"][finite]).max() <= bound


@pytest.mark.parametrize("t", [4, 6, 8])
def test_product_leading_one_in_bit_59_or_60(t):
    """hdl.fp32.exp rounds P = T * p without a leading-zero count: 2**59 <= P < 2**61 for
    every reachable reduced argument (exhaustive over a superset), with a sample cross-check
    against the model's own products."""
    b = exp_product_bounds(t)
    assert b["P_min"] >= 1 << 59 and b["P_max"] < 1 << 61, b
    # the enumerated range of R covers what the model computes, also at the extremes
    model = FP32Exp(FP32DivSqrtConfig(exp_table_bits=t))
    pos = np.arange(0, 0x43000000, 4093, dtype=np.int64)
    a = np.concatenate([pos, pos | 0x80000000, [0x42FFFFFF, 0xC2FFFFFF, 0x7F800000, 0xFFC00000]])
    steps = model.steps(a)
    assert b["r_min"] <= steps["red"].min() and steps["red"].max() <= b["r_max"]
    assert b["P_min"] <= steps["prod"].min() and steps["prod"].max() <= b["P_max"]


def test_vectorised_rounding_matches_shared_golden():
    """round_to_fp32_vec (used by the exp model) equals sim.model.fp32_round.round_to_fp32."""
    rng = np.random.default_rng(79)
    n = 20_000
    length = rng.integers(0, 52, n)
    sig = rng.integers(0, 1 << 62, n, dtype=np.int64) >> (62 - length)
    exp = rng.integers(-230, 140, n)
    sticky = rng.integers(0, 2, n)
    sign = rng.integers(0, 2, n)
    # force ties and near-ties at the rounding position for some
    got = round_to_fp32_vec(sign, exp, sig, sticky)
    want = [round_to_fp32(int(s), int(e), int(m), int(k))
            for s, e, m, k in zip(sign, exp, sig, sticky)]
    assert [int(g) for g in got] == want
