"""Golden models and operand generators for the FP32 units (pure numpy, no Amaranth).

The golden results are numpy ``float32`` operations (IEEE 754 binary32, round-to-nearest-even,
subnormals kept) -- the hardware must match them bit for bit on every non-NaN result. A NaN
result only has to be *a* NaN: :func:`canon` maps every NaN to :data:`QNAN` (``0x7FC00000``,
which is also what the hardware produces) before results are compared.

Model classes carry the hardware's names (:class:`FP32Add` mirrors ``hdl.fp32.add.FP32Add``,
...), take the same :class:`~hdl.fp32.config.FP32Config` and describe the stream payloads as
``IN_FIELDS`` / ``OUT_FIELDS`` (name, width), LSB first: read from the hardware's payload layout
(:class:`HardwareFields`, e.g. ``hdl.fp32.add.FP32AddIn``, imported on first use) or, for a
payload that is one plain 32-bit word, that word. ``model(**fields) -> {out field: array}`` is
vectorised over numpy arrays; ``pack_in`` / ``unpack_out`` convert between field arrays and
payload integers.
"""
from __future__ import annotations

import functools
import importlib

import numpy as np

from hdl.fp32.config import FP32Config

__all__ = [
    "QNAN", "f32_to_bits", "bits_to_f32", "is_nan", "canon", "fp32_str",
    "SPECIALS", "SPECIALS_SMALL", "INT_SPECIALS", "FTOI_SPECIALS",
    "random_fp32", "random_pairs", "random_int32", "random_ftoi",
    "FP32Add", "FP32Mul", "FP32Compare", "IntToFP32", "FP32ToInt", "MODELS", "model_for",
    "HardwareFields",
]

#: The NaN every unit produces (quiet, positive, payload 0).
QNAN = 0x7FC00000
_U32 = np.uint32


def f32_to_bits(x) -> np.ndarray:
    """float(s) -> uint32 bit patterns (``float32`` first, so Python floats round RNE)."""
    return np.asarray(x, dtype=np.float32).view(_U32)


def bits_to_f32(b) -> np.ndarray:
    """uint32 bit pattern(s) -> ``float32``."""
    return np.asarray(b, dtype=np.int64).astype(_U32).view(np.float32)


def is_nan(b) -> np.ndarray:
    b = np.asarray(b, dtype=np.int64) & 0x7FFFFFFF
    return b > 0x7F800000


def canon(b) -> np.ndarray:
    """Bit patterns with every NaN replaced by :data:`QNAN`."""
    b = np.asarray(b, dtype=np.int64).astype(_U32)
    return np.where(is_nan(b), _U32(QNAN), b).astype(_U32)


def fp32_str(b: int) -> str:
    """``0x3f800000 (1.0)``, for failure messages."""
    return f"{int(b):#010x} ({float(bits_to_f32(int(b))):.9g})"


# ----------------------------------------------------------------------------------------------
# Operand sets
# ----------------------------------------------------------------------------------------------

def _pm(*pos):
    out = []
    for p in pos:
        out += [p, p | 0x80000000]
    return out


#: Named special operands, both signs: zero, subnormals (smallest, largest, a few between),
#: smallest normal and its neighbours, ones and neighbours (ties in add), 1.5, 3, powers of two
#: around 2^24 (integer precision), the largest finite and its neighbour, +-Inf, quiet and
#: signalling NaNs.
SPECIALS: tuple[int, ...] = tuple(_pm(
    0x00000000,  # 0
    0x00000001,  # smallest subnormal 2^-149
    0x00000002, 0x00000003,
    0x00400000,  # 2^-127 (subnormal)
    0x007FFFFF,  # largest subnormal
    0x00800000,  # smallest normal 2^-126
    0x00800001,
    0x00FFFFFF,  # largest in the lowest binade
    0x01000000,  # 2^-125
    0x33800000,  # 2^-24: 1 + 2^-24 is a tie
    0x34000000,  # 2^-23 = ulp(1)
    0x3F000000,  # 0.5
    0x3F7FFFFF,  # 1 - 2^-24
    0x3F800000,  # 1.0
    0x3F800001,  # 1 + 2^-23
    0x3FC00000,  # 1.5
    0x40400000,  # 3.0
    0x4B800000,  # 2^24
    0x4B800001,  # 2^24 + 2
    0x4F000000,  # 2^31
    0x5F800000,  # 2^64
    0x7F000000,  # 2^127
    0x7F7FFFFE,
    0x7F7FFFFF,  # largest finite
    0x7F800000,  # Inf
    0x7FC00000,  # quiet NaN
    0x7F800001,  # signalling NaN (smallest payload)
    0x7FFFFFFF,  # NaN, all payload bits
))

#: A smaller special set for the Amaranth-simulator tier (all pairs = 576 vectors).
SPECIALS_SMALL: tuple[int, ...] = tuple(_pm(
    0x00000000, 0x00000001, 0x007FFFFF, 0x00800000, 0x00800001, 0x33800000, 0x3F800000,
    0x3F800001, 0x3FC00000, 0x7F7FFFFF, 0x7F800000, 0x7FC00000,
))

#: Named int32 operands for :class:`IntToFP32`: 0, +-1, 2^24 +- 1 (first inexact), ties
#: (2^24 + 1 rounds to even 2^24, 2^24 + 3 up to 2^24 + 4), 2^25 + 2/6 ties, extremes.
INT_SPECIALS: tuple[int, ...] = (
    0, 1, -1, 2, 3, 7, 255, 0xFFFFFF, 0x1000000, 0x1000001, 0x1000002, 0x1000003,
    0x1000005, 0x2000002, 0x2000006, 0x2000001, -0x1000001, -0x1000003, 0x7FFFFFBF, 0x7FFFFFC0,
    0x7FFFFF7F, 0x7FFFFF80, 0x7FFFFFFF, -0x7FFFFFFF, -0x80000000, 0x40000000, -0x40000000,
    0x55555555, -0x55555555, 0x12345678,
)

#: Named float operands for :class:`FP32ToInt`: halves (ties), values just inside and outside
#: the int32 range, +-2^31, Inf, NaN, subnormals, zeros.
FTOI_SPECIALS: tuple[int, ...] = tuple(int(b) for b in f32_to_bits([
    0.0, -0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 8388607.5, 8388608.5,
    -8388607.5, 4194303.5, 16777216.0, 2147483520.0, -2147483520.0, 2147483648.0,
    -2147483648.0, 4294967296.0, -4294967296.0, 1e30, -1e30, 1e-40, -1e-40, 1e-45,
    0.49999997, -0.49999997,
])) + (0x7F800000, 0xFF800000, 0x7FC00000, 0xFF800001, 0x7F7FFFFF, 0xFF7FFFFF, 0xCF000001)


# ----------------------------------------------------------------------------------------------
# Random generators (all take a numpy Generator; fixed seeds in the tests)
# ----------------------------------------------------------------------------------------------

def _frac(rng, n) -> np.ndarray:
    """Random fractions with structure: uniform, 0, all ones, one bit, low bits only, ..."""
    kind = rng.integers(0, 8, n)
    uni = rng.integers(0, 1 << 23, n)
    bit = np.left_shift(1, rng.integers(0, 23, n))
    low = rng.integers(0, 8, n)
    out = np.select(
        [kind < 3, kind == 3, kind == 4, kind == 5, kind == 6],
        [uni, 0, (1 << 23) - 1, bit, low],
        (1 << 23) - 1 - low,  # kind 7: all ones but low bits
    )
    return out.astype(np.int64)


def _compose(sign, exp, frac) -> np.ndarray:
    return ((np.asarray(sign, np.int64) << 31) | (np.clip(exp, 0, 255).astype(np.int64) << 23)
            | np.asarray(frac, np.int64)).astype(_U32)


_EDGE_EXPS = np.array([0, 0, 0, 1, 1, 2, 3, 24, 25, 26, 103, 104, 126, 127, 128, 150, 151, 152,
                       230, 252, 253, 254, 254, 255])


def random_fp32(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` FP32 bit patterns covering every class.

    Mix: 25 % uniformly random bits (every class, ~0.4 % NaN/Inf); 30 % exponents from an edge
    list (subnormal/zero, smallest normals, around 2^0, 2^24, top binades, Inf/NaN); 45 %
    exponents in 100..154 (the usual range); fractions uniform or structured (0, all ones,
    single bits, low bits) so ties and carries happen.
    """
    kind = rng.random(n)
    sign = rng.integers(0, 2, n)
    exp = np.where(kind < 0.55, rng.choice(_EDGE_EXPS, n), rng.integers(100, 155, n))
    out = _compose(sign, exp, _frac(rng, n))
    uni = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(_U32)
    return np.where(kind < 0.25, uni, out).astype(_U32)


def random_pairs(rng: np.random.Generator, n: int, op: str) -> tuple[np.ndarray, np.ndarray]:
    """``n`` operand pairs for ``op`` in {"add", "mul", "cmp"}.

    Strategies (shares differ by op): independent :func:`random_fp32` operands; ``b`` with an
    exponent ``exp(a) + d`` for ``d`` in -40..40 (every alignment distance 0..30+, mostly
    small); near-cancellation ``b = +-a`` moved by a few ulps; equal and opposite values;
    for ``mul`` exponent sums near overflow (exp(a) + exp(b) ~ 381) and near/below underflow
    (~ 0..104, results subnormal or zero); both operands tiny (subnormal).
    """
    if op not in ("add", "mul", "cmp"):
        raise ValueError(f"op must be 'add', 'mul' or 'cmp', not {op!r}")
    a = random_fp32(rng, n)
    b = random_fp32(rng, n)
    ea = ((a >> 23) & 0xFF).astype(np.int64)
    kind = rng.random(n)
    sign_b = rng.integers(0, 2, n)
    # exponent difference (small differences more often)
    d = np.where(rng.random(n) < 0.6, rng.integers(-3, 4, n), rng.integers(-40, 41, n))
    b_diff = _compose(sign_b, ea + d, _frac(rng, n))
    # near-cancellation / equality: |b| = |a| + k ulps (bit-pattern step), random sign
    k = rng.integers(-3, 4, n)
    mag = np.clip((a & 0x7FFFFFFF).astype(np.int64) + k, 0, 0x7F7FFFFF)
    b_near = ((sign_b.astype(np.int64) << 31) | mag).astype(_U32)
    b_eq = np.where(rng.random(n) < 0.5, a, a ^ _U32(0x80000000)).astype(_U32)
    # both tiny
    tiny = _compose(rng.integers(0, 2, n), rng.integers(0, 3, n), _frac(rng, n))
    if op == "mul":
        # exponent sums near overflow / underflow: eb = target - ea
        hi = _compose(sign_b, rng.integers(374, 386, n) - ea, _frac(rng, n))
        lo = _compose(sign_b, rng.integers(-30, 110, n) - ea, _frac(rng, n))
        a_big = _compose(rng.integers(0, 2, n), rng.integers(120, 255, n), _frac(rng, n))
        a = np.where((kind >= 0.35) & (kind < 0.65), a_big, a).astype(_U32)
        ea = ((a >> 23) & 0xFF).astype(np.int64)
        hi = _compose(sign_b, rng.integers(374, 386, n) - ea, _frac(rng, n))
        lo = _compose(sign_b, rng.integers(-30, 110, n) - ea, _frac(rng, n))
        b = np.select([kind < 0.35, kind < 0.5, kind < 0.65, kind < 0.8, kind < 0.9],
                      [b, hi, lo, b_diff, tiny], b_near)
    else:
        b = np.select([kind < 0.25, kind < 0.6, kind < 0.8, kind < 0.9],
                      [b, b_diff, b_near, b_eq], tiny)
        a = np.where(kind >= 0.9, _compose(rng.integers(0, 2, n), rng.integers(0, 3, n),
                                           _frac(rng, n)), a)
    return a.astype(_U32), b.astype(_U32)


def random_int32(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` int32 values: uniform, small, every bit length 1..31 with structured low bits
    (exact ties and near-ties at the rounding position for 25..31 significant bits), and the
    extremes (``-2^31``, ``2^31 - 1``, ...)."""
    kind = rng.random(n)
    uni = rng.integers(-(1 << 31), 1 << 31, n, dtype=np.int64)
    small = rng.integers(-300, 301, n)
    length = rng.integers(1, 32, n)                       # bit length L of |value|
    top = np.left_shift(np.int64(1), length - 1)          # leading one
    rnd = rng.integers(0, 1 << 31, n, dtype=np.int64) % top
    half = np.where(length > 24, np.left_shift(np.int64(1), np.maximum(length - 25, 0)), 0)
    kept = rnd & ~np.maximum(2 * half - 1, 0)             # bits above the round bit
    low_kind = rng.integers(0, 4, n)
    low = np.select([low_kind == 0, low_kind == 1, low_kind == 2],
                    [rnd, kept | half, (kept | half) + np.where(half > 1, 1, 0)],
                    np.maximum(kept | half, 1) - 1)       # just below a tie
    structured = top | (low % top)
    structured = np.where(rng.random(n) < 0.5, -structured, structured)
    ext = rng.choice(np.array([-(1 << 31), (1 << 31) - 1, -(1 << 31) + 1, 0, -1]), n)
    out = np.select([kind < 0.3, kind < 0.4, kind < 0.95], [uni, small, structured], ext)
    return out.astype(np.int32)


def random_ftoi(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` FP32 operands for :class:`FP32ToInt`: exponents mostly 120..160 (|x| ~ 2^-7 ..
    2^33, covering the rounding range and the int32 boundary), exact halves (ties), integers,
    plus :func:`random_fp32` for every class."""
    kind = rng.random(n)
    sign = rng.integers(0, 2, n)
    x = _compose(sign, rng.integers(120, 161, n), _frac(rng, n))
    # exact halves: (k + 0.5), k up to 2^23
    k = rng.integers(0, 1 << rng.integers(1, 24, n), dtype=np.int64)
    halves = f32_to_bits(np.where(sign == 1, -1.0, 1.0) * (k + 0.5))
    near = _compose(sign, 158, np.where(rng.random(n) < 0.5, (1 << 23) - 1 - rng.integers(0, 4, n),
                                        rng.integers(0, 4, n)))
    return np.select([kind < 0.2, kind < 0.4, kind < 0.5], [random_fp32(rng, n), halves, near],
                     x).astype(_U32)


# ----------------------------------------------------------------------------------------------
# Golden models
# ----------------------------------------------------------------------------------------------

@functools.cache
def _layout_fields(spec: str) -> tuple[tuple[str, int], ...]:
    from amaranth.lib import data
    module, name = spec.split(":")
    layout = data.Layout.cast(getattr(importlib.import_module(module), name))
    fields = sorted(((f.offset, n, f.width) for n, f in layout), key=lambda t: t[0])
    offset = 0
    for at, n, width in fields:
        if at != offset:
            raise ValueError(f"{spec}: field {n} at bit {at}, not {offset} (not contiguous)")
        offset += width
    return tuple((n, width) for _, n, width in fields)


class HardwareFields:
    """A model's ``IN_FIELDS`` / ``OUT_FIELDS``: ``((name, width), ...)`` LSB first, read from the
    hardware's payload layout ``spec`` (``"module:attribute"``) when first used, so the payload
    packing follows the hardware and the models themselves import no Amaranth."""

    def __init__(self, spec: str):
        self.spec = spec

    def __get__(self, obj, owner=None) -> tuple[tuple[str, int], ...]:
        return _layout_fields(self.spec)


class _Model:
    #: registered block name
    NAME = ""
    IN_FIELDS: tuple[tuple[str, int], ...] = ()
    OUT_FIELDS: tuple[tuple[str, int], ...] = ()
    #: output fields holding FP32 values (NaN canonicalised before comparison)
    FP_OUT: tuple[str, ...] = ()

    def __init__(self, config: FP32Config | None = None):
        self.config = config if config is not None else FP32Config()

    @property
    def latency(self) -> int:
        return self.config.latency(self.NAME)

    @staticmethod
    def _pack(fields, values: dict) -> list[int]:
        n = len(next(iter(values.values())))
        out = [0] * n
        shift = 0
        for name, width in fields:
            col = np.asarray(values[name], dtype=np.int64) & ((1 << width) - 1)
            for i, v in enumerate(col.tolist()):
                out[i] |= v << shift
            shift += width
        return out

    @staticmethod
    def _unpack(fields, payloads) -> dict:
        payloads = [int(p) for p in payloads]
        out, shift = {}, 0
        for name, width in fields:
            mask = (1 << width) - 1
            out[name] = np.array([(p >> shift) & mask for p in payloads], dtype=np.int64)
            shift += width
        return out

    def pack_in(self, **fields) -> list[int]:
        return self._pack(self.IN_FIELDS, fields)

    def unpack_in(self, payloads) -> dict:
        return self._unpack(self.IN_FIELDS, payloads)

    def pack_out(self, **fields) -> list[int]:
        return self._pack(self.OUT_FIELDS, fields)

    def unpack_out(self, payloads) -> dict:
        return self._unpack(self.OUT_FIELDS, payloads)

    def expected_payloads(self, in_payloads) -> list[int]:
        """Golden output payloads for input payloads, NaNs canonical."""
        return self.pack_out(**self(**self.unpack_in(in_payloads)))

    def canon_out(self, payloads) -> list[int]:
        """Output payloads with every FP32 NaN field replaced by :data:`QNAN`."""
        fields = self.unpack_out(payloads)
        for name in self.FP_OUT:
            fields[name] = canon(fields[name])
        return self.pack_out(**fields)

    def describe(self, in_payload: int) -> str:
        f = self._unpack(self.IN_FIELDS, [in_payload])
        return ", ".join(f"{k}={int(v[0]):#x}" for k, v in f.items())


class FP32Add(_Model):
    """``r = a + b`` (``sub = 0``) or ``r = a - b`` (``sub = 1``), numpy float32."""

    NAME = "fp32_add"
    IN_FIELDS = HardwareFields("hdl.fp32.add:FP32AddIn")
    OUT_FIELDS = (("r", 32),)
    FP_OUT = ("r",)

    def __call__(self, a, b, sub) -> dict:
        fa, fb = bits_to_f32(a), bits_to_f32(b)
        with np.errstate(all="ignore"):
            r = np.where(np.asarray(sub) != 0, fa - fb, fa + fb).astype(np.float32)
        return {"r": canon(r.view(_U32))}


class FP32Mul(_Model):
    """``r = a * b``, numpy float32."""

    NAME = "fp32_mul"
    IN_FIELDS = HardwareFields("hdl.fp32.mul:FP32MulIn")
    OUT_FIELDS = (("r", 32),)
    FP_OUT = ("r",)

    def __call__(self, a, b) -> dict:
        with np.errstate(all="ignore"):
            r = (bits_to_f32(a) * bits_to_f32(b)).astype(np.float32)
        return {"r": canon(r.view(_U32))}


class FP32Compare(_Model):
    """IEEE comparison flags and max/min.

    ``less = a < b``, ``equal = a == b``, ``less_equal = a <= b`` (all false if either is NaN;
    ``-0 == +0``), ``unordered`` = either is NaN. ``max``/``min``: NaN if either operand is
    NaN (like ``np.maximum``); otherwise the larger/smaller; equal operands per
    :attr:`~hdl.fp32.config.FP32Config.cmp_zero_order` (``"numpy"``: ``b``, exactly
    ``np.maximum(a, b)``; ``"ieee"``: ``-0 < +0``).
    """

    NAME = "fp32_compare"
    IN_FIELDS = HardwareFields("hdl.fp32.compare:FP32CompareIn")
    OUT_FIELDS = HardwareFields("hdl.fp32.compare:FP32CompareOut")
    FP_OUT = ("max", "min")

    def __call__(self, a, b) -> dict:
        a = np.asarray(a, np.int64).astype(_U32)
        b = np.asarray(b, np.int64).astype(_U32)
        fa, fb = bits_to_f32(a), bits_to_f32(b)
        with np.errstate(all="ignore"):
            mx = np.maximum(fa, fb).view(_U32)
            mn = np.minimum(fa, fb).view(_U32)
            if self.config.cmp_zero_order == "ieee":
                both_zero = ((a | b) & _U32(0x7FFFFFFF)) == 0
                mx = np.where(both_zero, a & b, mx)   # -0 only if both are -0
                mn = np.where(both_zero, a | b, mn)   # +0 only if both are +0
            out = {"max": canon(mx), "min": canon(mn), "less": (fa < fb), "equal": (fa == fb),
                   "less_equal": (fa <= fb), "unordered": np.isnan(fa) | np.isnan(fb)}
        return {k: np.asarray(v).astype(np.int64) if k not in self.FP_OUT else v
                for k, v in out.items()}


class IntToFP32(_Model):
    """``r = float32(i)`` for signed int32 ``i``, round-to-nearest-even (numpy ``astype``)."""

    NAME = "int_to_fp32"
    IN_FIELDS = (("i", 32),)
    OUT_FIELDS = (("r", 32),)
    FP_OUT = ("r",)

    def __call__(self, i) -> dict:
        i = np.asarray(i, np.int64)
        i = np.where(i >= 1 << 31, i - (1 << 32), i).astype(np.int32)
        return {"r": i.astype(np.float32).view(_U32)}


class FP32ToInt(_Model):
    """``value = int32(round(a))`` with ``rne = 0``: toward zero (C cast, ``np.trunc``) or
    ``rne = 1``: nearest, ties to even (``np.rint``).

    Saturating: NaN gives 0, a rounded value above ``2^31 - 1`` (incl. +Inf) gives
    ``2^31 - 1``, below ``-2^31`` (incl. -Inf) gives ``-2^31``; ``invalid`` is set in exactly
    these cases. (``numpy.astype(int32)`` is undefined there; in range it equals the
    ``rne = 0`` result.)
    """

    NAME = "fp32_to_int"
    IN_FIELDS = HardwareFields("hdl.fp32.convert:FP32ToIntIn")
    OUT_FIELDS = HardwareFields("hdl.fp32.convert:FP32ToIntOut")
    FP_OUT = ()

    def __call__(self, a, rne) -> dict:
        with np.errstate(all="ignore"):
            x = bits_to_f32(a).astype(np.float64)
            r = np.where(np.asarray(rne) != 0, np.rint(x), np.trunc(x))
            nan = np.isnan(r)
            hi = r > (1 << 31) - 1
            lo = r < -(1 << 31)
            val = np.where(nan | hi | lo, 0, r).astype(np.int64)
        val = np.where(hi, (1 << 31) - 1, np.where(lo, -(1 << 31), val))
        return {"value": val & 0xFFFFFFFF, "invalid": (nan | hi | lo).astype(np.int64)}


MODELS = {cls.NAME: cls for cls in (FP32Add, FP32Mul, FP32Compare, IntToFP32, FP32ToInt)}


def model_for(block: str, config: FP32Config | None = None) -> _Model:
    if block not in MODELS:
        raise ValueError(f"block must be one of {tuple(MODELS)}, not {block!r}")
    return MODELS[block](config)
