"""Golden model of the array-edge converter (:class:`hdl.edge_converter.EdgeConverter`).

``edge_to_fp32(value, exp)`` is the IEEE 754 binary32 bit pattern of ``value * 2**exp``,
round-to-nearest-even, exact subnormals, ±Inf on overflow, ``+0.0`` for ``value == 0`` (a
non-zero value too small for the smallest subnormal rounds to a zero with its sign). Pure
Python integers through :func:`sim.model.fp32_round.round_to_fp32`; no floating point, no Amaranth.
"""
from __future__ import annotations

import numpy as np

from sim.model.fp32_round import round_to_fp32

__all__ = ["edge_to_fp32", "magnitude_fields", "edge_to_fp32_array", "check_edge_input", "numpy_reference",
           "reference_applies", "named_edge_cases", "random_vectors", "is_tie"]


def magnitude_fields(value: int) -> dict:
    """``value`` in the converter's magnitude form (``hdl.edge_converter.edge_value_shape`` with
    ``magnitude``): ``{"mag": |value|, "sign": 1 if negative}``, for a layout's ``const``."""
    return {"mag": abs(value), "sign": int(value < 0)}


def check_edge_input(value: int, exp: int, config) -> None:
    """Raise ValueError unless ``value``/``exp`` fit ``config`` (an ``EdgeConfig``)."""
    vb, eb = config.int_bits, config.exp_bits
    if not -(1 << (vb - 1)) <= value < (1 << (vb - 1)):
        raise ValueError(f"value must fit signed {vb} bits, not {value!r}")
    if not -(1 << (eb - 1)) <= exp < (1 << (eb - 1)):
        raise ValueError(f"exp must fit signed {eb} bits, not {exp!r}")


def edge_to_fp32(value: int, exp: int, config=None) -> int:
    """FP32 bits (as a Python int, ``0 <= bits < 2**32``) of ``value * 2**exp``."""
    value, exp = int(value), int(exp)
    if config is not None:
        check_edge_input(value, exp, config)
    return round_to_fp32(1 if value < 0 else 0, exp, abs(value), 0)


def edge_to_fp32_array(values, exps, config=None) -> np.ndarray:
    """Elementwise :func:`edge_to_fp32`; returns ``numpy.uint32`` (``.view(np.float32)``)."""
    values, exps = np.broadcast_arrays(np.asarray(values, dtype=object),
                                       np.asarray(exps, dtype=object))
    out = np.empty(values.shape, dtype=np.uint32)
    for idx in np.ndindex(values.shape):
        out[idx] = edge_to_fp32(values[idx], exps[idx], config)
    return out


def numpy_reference(values, exps) -> np.ndarray:
    """Independent reference: ``float32(float64(value) * 2**exp)`` via numpy (RNE cast).

    Exact with a single rounding only where :func:`reference_applies` holds (``|value| < 2**53``
    and the float64 intermediate is normal).
    """
    v = np.asarray(values, dtype=np.float64)
    e = np.asarray(exps, dtype=np.int64)
    with np.errstate(over="ignore", under="ignore"):
        return np.ldexp(v, e).astype(np.float32).view(np.uint32)


def reference_applies(value: int, exp: int) -> bool:
    if value == 0:
        return True
    if abs(value) >= 1 << 53:
        return False
    lead = exp + abs(value).bit_length() - 1
    return -1022 <= exp and lead <= 1023


def named_edge_cases(config) -> list[tuple[str, int, int]]:
    """``(name, value, exp)`` cases every test tier runs (fit ``config``'s widths)."""
    vb, eb = config.int_bits, config.exp_bits
    vmax, vmin = (1 << (vb - 1)) - 1, -(1 << (vb - 1))
    emax, emin = (1 << (eb - 1)) - 1, -(1 << (eb - 1))
    cases = [
        ("zero", 0, 0), ("zero_exp_min", 0, emin), ("zero_exp_max", 0, emax),
        ("one", 1, 0), ("minus_one", -1, 0), ("vmax", vmax, 0), ("vmin", vmin, 0),
        ("vmax_exp_max", vmax, emax), ("vmin_exp_max", vmin, emax),
        ("vmax_exp_min", vmax, emin), ("vmin_exp_min", vmin, emin),
        ("one_exp_min", 1, emin), ("one_exp_max", 1, emax),
        ("min_subnormal", 1, -149), ("minus_min_subnormal", -1, -149),
        ("half_min_subnormal_tie_to_zero", 1, -150), ("neg_half_min_subnormal", -1, -150),
        ("three_halves_subnormal_tie_up", 3, -150), ("five_halves_subnormal_tie_down", 5, -150),
        ("just_above_half_min_subnormal", 3, -151),
        ("quarter_min_subnormal", 1, -151),
        ("max_subnormal", (1 << 23) - 1, -149), ("min_normal", 1, -126),
        ("subnormal_rounds_to_min_normal", (1 << 24) - 1, -150),
        ("max_finite", (1 << 24) - 1, 104), ("two_pow_128_overflow", 1, 128),
        ("neg_two_pow_128_overflow", -1, 128), ("two_pow_127", 1, 127),
        ("max_finite_half_ulp_tie_to_inf", (1 << 25) - 1, 103),
        ("below_max_finite_tie", (1 << 25) - 3, 103),
    ]
    if vb >= 26:
        cases += [
            ("tie_to_even_down", (1 << 24) + 1, 0),            # 2^24+1 -> 2^24
            ("tie_to_even_up", (1 << 24) + 3, 0),              # 2^24+3 -> 2^24+4
            ("neg_tie_to_even", -((1 << 24) + 3), -40),
            ("above_tie_sticky", (1 << 25) + 3, 0),            # guard 1, sticky 1 -> up
            ("below_tie", (1 << 25) + 2, 0),
        ]
    out = []
    for name, v, e in cases:
        if vmin <= v <= vmax and emin <= e <= emax:
            out.append((name, v, e))
    return out


def random_vectors(rng, n: int, config) -> list[tuple[int, int]]:
    """``n`` random ``(value, exp)`` pairs biased to interesting results: a mix of normal,
    subnormal, underflowing and overflowing results, exact ties (about 12 %), zeros, uniform
    and extreme exponents. ``rng`` is a :class:`random.Random`."""
    vb, eb = config.int_bits, config.exp_bits
    emax, emin = (1 << (eb - 1)) - 1, -(1 << (eb - 1))
    vmax = (1 << (vb - 1)) - 1
    out = []
    for _ in range(n):
        bits = rng.randrange(1, vb)                       # magnitude bit length
        mag = rng.randrange(1 << (bits - 1), 1 << bits) if bits > 1 else 1
        r = rng.random()
        if r < 0.03:
            exp = rng.choice((emin, emax))                # exponent extremes
        elif r < 0.15:
            exp = rng.randint(emin, emax)                 # anything (mostly 0 or Inf)
        elif r < 0.45:
            exp = rng.randint(-152, -126) - (bits - 1)    # subnormal / underflow results
        elif r < 0.6:
            exp = rng.randint(124, 130) - (bits - 1)      # near overflow
        else:
            exp = rng.randint(-126, 127) - (bits - 1)     # normal
        exp = max(min(exp, emax), emin)
        if rng.random() < 0.12:                           # make it an exact tie
            lead = exp + bits - 1
            shift = max(lead - 23, -149) - exp            # bits below the result's LSB
            if not 1 <= shift <= bits:                    # no rounding here: a subnormal tie
                shift = rng.randint(max(1, bits - 24), bits)
                exp = max(-149 - shift, emin)
            if 1 <= shift <= bits:
                mag = (mag >> shift << shift) | (1 << (shift - 1))
        if rng.random() < 0.04:
            mag = 0
        value = -mag if rng.random() < 0.5 else mag
        out.append((max(min(value, vmax), -vmax - 1), exp))
    return out


def is_tie(value: int, exp: int) -> bool:
    """True when ``value * 2**exp`` lies exactly halfway between two FP32 neighbours (the
    rounding decision is a tie; includes ties at subnormal and zero results)."""
    mag = abs(int(value))
    if mag == 0:
        return False
    lead = exp + mag.bit_length() - 1
    lsb = max(lead - 23, -149)
    shift = lsb - exp
    if shift <= 0:
        return False
    return mag & ((1 << shift) - 1) == 1 << (shift - 1)
