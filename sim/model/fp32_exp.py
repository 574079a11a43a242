"""Golden models of the FP32 divide, square root and exp units (pure numpy, no Amaranth).

The exp constants (table, ``ln2/N``, ...) come from :func:`hdl.fp32.divsqrt_config.exp_constants`
(plain Python, exact rational arithmetic), shared with the hardware.

* :class:`FP32Div`, :class:`FP32Sqrt`: numpy ``float32`` division and square root (IEEE 754,
  round-to-nearest-even, subnormals kept). The hardware matches them bit for bit on every
  non-NaN result; every NaN is mapped to :data:`QNAN` (what the hardware returns).
* :class:`FP32Exp`: the hardware's ``exp`` approximation, step for step in ``int64`` numpy
  arithmetic (every intermediate fits in 63 bits), so it is bit-exact with
  :class:`hdl.fp32.exp.FP32Exp`. :func:`exp_ulp_error` measures it against float64 ``exp``.

The exp algorithm (``t = config.exp_table_bits``, ``N = 2**t``, ``F = 30`` fraction bits):

1. ``X = trunc(|x| * 2**F)`` (``|x| < 128``; zero for ``|x| < 2**-30``), ``Xs = ±X``.
2. ``n = round(x * N / ln2)``, from ``(Xs >> 14) * CINV`` with ``CINV = round(N/ln2 * 2**16)``
   (``n`` may be off by one from the exact rounding; the range below allows for it).
3. ``R = Xs - round(n * LN2N / 2**18)``, ``LN2N = round(ln2/N * 2**48)``: the reduced
   argument ``r = x - n*ln2/N`` with ``|r| <= (1/2 + 2**-7) * ln2/N``, 30 fraction bits. The
   constant is split as ``n * ln2/N`` evaluated with a 48-bit constant and rounded once, so the
   reduction error is below ``2**-31`` for every ``|n| < 2**16``.
4. ``p = e**r`` by Horner, degree 3 (Taylor), each product truncated to ``F`` bits:
   ``h = C2 + (R*C3 >> F)``, ``h = C1 + (R*h >> F)``, ``p = C0 + (R*h >> F)``.
5. ``P = T[j] * p`` with ``T[j] = round(2**(j/N) * 2**F)``, ``j = n mod N``, ``k = n >> t``.
6. Round ``(P >> 28) * 2**(k - 32)`` (sticky: ``P mod 2**28 != 0``) to FP32 (RNE, exact
   subnormals, overflow to Inf), as :func:`sim.model.fp32_round.round_to_fp32`. ``2**59 <= P <
   2**61`` for every argument (:func:`exp_product_bounds`): the hardware relies on it to
   round without a leading-zero count.

Specials: NaN -> :data:`QNAN`; ``+Inf`` and finite ``x >= 128`` -> ``+Inf``; ``-Inf`` and
finite ``x <= -128`` -> ``+0``; ``|x| < 2**-30`` (zeros, subnormals) -> exactly ``1.0``.
Results overflow to ``+Inf`` from ``x ~ 88.7228`` and underflow through the subnormals to
``+0`` below ``x ~ -103.97`` by the rounding itself.
"""
from __future__ import annotations

import numpy as np

from hdl.fp32.divsqrt_config import EXP_FRAC_BITS, ExpConstants, FP32DivSqrtConfig, exp_constants
from sim.model.fp32 import HardwareFields

__all__ = ["QNAN", "EXP_FRAC_BITS", "ExpConstants", "exp_constants", "round_to_fp32_vec",
           "FP32Div", "FP32Sqrt", "FP32Exp", "MODELS", "model_for", "exp_ulp_error",
           "measure_exp_accuracy", "EXP_BANDS", "DIVSQRT_EXTRA", "EXP_SPECIALS", "special_operands",
           "random_operands", "exp_product_bounds"]

#: The NaN every unit returns (quiet, positive, zero payload).
QNAN = 0x7FC00000
_U32 = np.uint32


def _bits(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64) & 0xFFFFFFFF


def _f32(bits) -> np.ndarray:
    return _bits(bits).astype(_U32).view(np.float32)


def _canon(bits) -> np.ndarray:
    b = _bits(bits)
    return np.where((b & 0x7FFFFFFF) > 0x7F800000, QNAN, b).astype(np.int64)


# ----------------------------------------------------------------------------------------------
# Rounding (vectorised twin of sim.model.fp32_round.round_to_fp32)
# ----------------------------------------------------------------------------------------------

def round_to_fp32_vec(sign, exp, sig, sticky=0) -> np.ndarray:
    """FP32 bits nearest to ``(-1)**sign * (sig + delta) * 2**exp`` (RNE), vectorised.

    Same contract as :func:`sim.model.fp32_round.round_to_fp32` (``0 < delta < 1`` iff ``sticky``),
    for ``0 <= sig < 2**52``; exact subnormals, ``±Inf`` on overflow, signed zero.
    """
    sig = np.asarray(sig, dtype=np.int64)
    exp = np.broadcast_to(np.asarray(exp, dtype=np.int64), sig.shape)
    sign = np.broadcast_to(np.asarray(sign, dtype=np.int64), sig.shape)
    sticky = np.broadcast_to(np.asarray(sticky, dtype=np.int64) != 0, sig.shape)
    if np.any(sig < 0) or np.any(sig >= 1 << 52):
        raise ValueError("sig must be in [0, 2**52)")
    # bit length: exact through float64 for sig < 2**53
    _, length = np.frexp(sig.astype(np.float64))
    length = length.astype(np.int64)
    lead = exp + length - 1
    lsb = np.maximum(lead - 23, -149)
    shift = lsb - exp
    pos = np.maximum(shift, 0)
    q = np.where(shift > 0, sig >> np.minimum(pos, 62), sig << np.maximum(-shift, 0))
    q = np.where(shift > 62, 0, q)
    guard = np.where(shift > 0, (sig >> np.clip(pos - 1, 0, 62)) & 1, 0)
    guard = np.where(shift > 63, 0, guard)
    below = np.where(pos > 1, sig & ((np.int64(1) << np.clip(pos - 1, 0, 62)) - 1), 0)
    below = np.where(pos - 1 > 62, sig, below)
    rest = (below != 0) | sticky
    q = q + (guard & (rest | (q & 1)).astype(np.int64))
    carry = (q >> 24) != 0
    q = np.where(carry, q >> 1, q)
    lsb = lsb + carry
    biased = np.where((q >> 23) != 0, lsb + 150, 0)
    out = np.where(biased >= 255, 0x7F800000, (biased << 23) | (q & 0x7FFFFF))
    out = np.where(sig == 0, 0, out)
    return ((sign & 1) << 31) | out


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------

class _Model:
    NAME = ""
    IN_FIELDS: tuple[tuple[str, int], ...] = ()
    OUT_FIELDS = (("r", 32),)
    LATENCY_ATTR = ""

    def __init__(self, config: FP32DivSqrtConfig | None = None):
        self.config = config if config is not None else FP32DivSqrtConfig()

    @property
    def latency(self) -> int:
        return getattr(self.config, self.LATENCY_ATTR)

    def pack_in(self, **fields) -> list[int]:
        cols = [np.asarray(fields[name], dtype=np.int64) & ((1 << w) - 1)
                for name, w in self.IN_FIELDS]
        out = np.zeros(len(cols[0]), dtype=object)
        shift = 0
        for (name, w), col in zip(self.IN_FIELDS, cols):
            out = out + (col.astype(object) << shift)
            shift += w
        return [int(v) for v in out]

    def unpack_in(self, payloads) -> dict:
        p = np.array([int(v) for v in payloads], dtype=object)
        out, shift = {}, 0
        for name, w in self.IN_FIELDS:
            out[name] = ((p >> shift) & ((1 << w) - 1)).astype(np.int64)
            shift += w
        return out

    def expected_payloads(self, in_payloads) -> list[int]:
        return [int(v) for v in self(**self.unpack_in(in_payloads))["r"]]

    def describe(self, in_payload: int) -> str:
        f = self.unpack_in([in_payload])
        return ", ".join(f"{k}={int(v[0]):#010x} ({float(_f32(v[0])):.9g})"
                         for k, v in f.items())


class FP32Div(_Model):
    """``r = a / b`` in numpy float32, NaNs canonical."""

    NAME = "fp32_div"
    IN_FIELDS = HardwareFields("hdl.fp32.div:FP32DivIn")
    LATENCY_ATTR = "div_latency"

    def __call__(self, a, b) -> dict:
        with np.errstate(all="ignore"):
            r = np.divide(_f32(a), _f32(b), dtype=np.float32)
        return {"r": _canon(np.asarray(r).view(_U32))}


class FP32Sqrt(_Model):
    """``r = sqrt(a)`` in numpy float32, NaNs canonical."""

    NAME = "fp32_sqrt"
    IN_FIELDS = (("a", 32),)
    LATENCY_ATTR = "sqrt_latency"

    def __call__(self, a) -> dict:
        with np.errstate(all="ignore"):
            r = np.sqrt(_f32(a), dtype=np.float32)
        return {"r": _canon(np.asarray(r).view(_U32))}


class FP32Exp(_Model):
    """The hardware exp approximation, bit-exact (see the module docstring for the steps).

    :meth:`steps` returns every named intermediate (the hardware's signal names) for tests.
    """

    NAME = "fp32_exp"
    IN_FIELDS = (("a", 32),)
    LATENCY_ATTR = "exp_latency"

    @property
    def constants(self) -> ExpConstants:
        return exp_constants(self.config.exp_table_bits)

    def steps(self, a) -> dict:
        c = self.constants
        F = EXP_FRAC_BITS
        a = _bits(a)
        sign = (a >> 31) & 1
        efield = (a >> 23) & 0xFF
        frac = a & 0x7FFFFF
        nan = (efield == 0xFF) & (frac != 0)
        inf = (efield == 0xFF) & (frac == 0)
        big = (efield >= 134) & ~nan            # |x| >= 128 (incl. Inf)
        # 1. fixed point, F fraction bits, truncated toward zero
        m24 = np.where(efield != 0, frac | (1 << 23), frac)
        sh = np.clip(133 - efield, 0, 63)
        x_fix = np.where(efield <= 133, (m24 << 13) >> sh, 0)
        x_fix = np.where(sh >= 37, 0, x_fix)
        xs = np.where(sign == 1, -x_fix, x_fix)
        # 2. n = round(x * N / ln2)
        n = ((xs >> 14) * c.CINV + (1 << 31)) >> 32
        # 3. reduced argument
        red = xs - ((n * c.LN2N + (1 << 17)) >> 18)
        # 4. Horner
        h1 = c.C2 + ((red * c.C3) >> F)
        h2 = c.C1 + ((red * h1) >> F)
        p = c.C0 + ((red * h2) >> F)
        # 5. table
        j = n & (c.N - 1)
        k = n >> c.t
        table = np.array(c.TABLE, dtype=np.int64)[j]
        prod = table * p
        # 6. round
        sig = prod >> 28
        sticky = (prod & ((1 << 28) - 1)) != 0
        rounded = round_to_fp32_vec(0, k - 32, sig, sticky)
        special = nan | big
        special_val = np.where(nan, QNAN, np.where(sign == 1, 0, 0x7F800000))
        r = np.where(special, special_val, rounded)
        return {"x_fix": xs, "n": n, "red": red, "h1": h1, "h2": h2, "p": p, "j": j, "k": k,
                "table": table, "prod": prod, "sig": sig, "sticky": sticky,
                "rounded": rounded, "special": special, "r": r.astype(np.int64),
                "inf": inf}

    def __call__(self, a) -> dict:
        return {"r": self.steps(a)["r"]}


def exp_product_bounds(t: int, *, chunk: int = 1 << 22) -> dict:
    """Exhaustive bounds of the exp datapath's product ``P = T[j] * p`` for table bits ``t``.

    Every argument ``|x| < 128`` (and every special, which enters as ``Xs = 0``) has
    ``|Xs| < 2**37``, so ``u = Xs >> 14`` takes at most ``2**24`` values; ``n`` depends on
    ``u`` only, and for one ``u`` the reduced argument ``R = Xs - c(n)`` covers an interval of
    ``2**14`` integers. This enumerates every ``u`` for the range ``[r_min, r_max]`` of ``R``
    (a superset of the reachable values), then every ``R`` in it for the range of ``p``, and
    bounds ``P`` by ``min(T) * min(p)`` and ``max(T) * max(p)`` (all positive).

    Returns ``{"r_min", "r_max", "p_min", "p_max", "P_min", "P_max"}`` (Python ints).
    ``hdl.fp32.exp`` needs ``2**59 <= P_min`` and ``P_max < 2**61``.
    """
    c = exp_constants(t)
    u = np.arange(-(1 << 23), 1 << 23, dtype=np.int64)
    n = (u * c.CINV + (1 << 31)) >> 32
    cn = (n * c.LN2N + (1 << 17)) >> 18
    r_min = int(((u << 14) - cn).min())
    r_max = int(((u << 14) + ((1 << 14) - 1) - cn).max())
    del u, n, cn
    p_min = p_max = None
    for lo in range(r_min, r_max + 1, chunk):
        red = np.arange(lo, min(lo + chunk, r_max + 1), dtype=np.int64)
        h1 = c.C2 + ((red * c.C3) >> EXP_FRAC_BITS)
        h2 = c.C1 + ((red * h1) >> EXP_FRAC_BITS)
        p = c.C0 + ((red * h2) >> EXP_FRAC_BITS)
        lo_p, hi_p = int(p.min()), int(p.max())
        p_min = lo_p if p_min is None else min(p_min, lo_p)
        p_max = hi_p if p_max is None else max(p_max, hi_p)
    return {"r_min": r_min, "r_max": r_max, "p_min": p_min, "p_max": p_max,
            "P_min": min(c.TABLE) * p_min, "P_max": max(c.TABLE) * p_max}


MODELS = {cls.NAME: cls for cls in (FP32Div, FP32Sqrt, FP32Exp)}


def model_for(block: str, config: FP32DivSqrtConfig | None = None) -> _Model:
    if block not in MODELS:
        raise ValueError(f"block must be one of {tuple(MODELS)}, not {block!r}")
    return MODELS[block](config)


# ----------------------------------------------------------------------------------------------
# Accuracy of exp against float64
# ----------------------------------------------------------------------------------------------

def exp_ulp_error(a_bits, r_bits) -> np.ndarray:
    """|r - exp(x)| in units of the float32 ulp at ``exp(x)`` (float64 reference).

    ``x = a_bits`` as float32; ``r_bits`` the result. The ulp of a value ``v`` is
    ``2**(max(floor(log2 v), -126) - 23)``; ``+Inf`` counts as ``2**128`` (the IEEE overflow
    point), and a true value past ``2**128`` counts as ``2**128`` too. Only for finite ``x``.
    """
    x = _f32(a_bits).astype(np.float64)
    with np.errstate(over="ignore"):
        true = np.minimum(np.exp(x), 2.0 ** 128)
    r = _f32(r_bits).astype(np.float64)
    r = np.where(np.isinf(r), 2.0 ** 128, r)
    _, e = np.frexp(true)                    # true = f * 2**e, f in [0.5, 1)
    ulp_exp = np.maximum(e - 1, -126) - 23
    ulp_exp = np.minimum(ulp_exp, 104)
    return np.abs(r - true) / np.ldexp(1.0, ulp_exp)


#: Float32 bit-pattern ranges measured exhaustively by :func:`measure_exp_accuracy`:
#: ``[-1, -0.5)`` (2**23 values, the softmax range), ``[-104, -96)`` (2**20 values: subnormal
#: results and the underflow to zero), ``[88, 89)`` (2**17 values: the overflow threshold).
EXP_BANDS = ((0xBF000000, 0xBF800000), (0xC2C00000, 0xC2D00000), (0x42B00000, 0x42B20000))


def measure_exp_accuracy(config: FP32DivSqrtConfig | None = None, *, stride: int = 4099,
                         bands=EXP_BANDS, chunk: int = 1 << 21) -> dict:
    """Worst ulp error of :class:`FP32Exp` against float64 ``exp`` (:func:`exp_ulp_error`).

    Samples every ``stride``-th float32 bit pattern with ``|x| < 128`` (both signs; beyond,
    the result is a special case) plus every float32 in each ``(lo, hi)`` bit-pattern range
    of ``bands``. Returns ``{"max_ulp", "argmax_bits", "argmax_x", "mean_ulp", "count",
    "not_correctly_rounded", ...}`` (the last: results that differ from float64 ``exp``
    rounded to float32).
    """
    model = FP32Exp(config)
    pos = np.arange(0, 0x43000000, stride, dtype=np.int64)           # [0, 128)
    sets = [pos, pos | 0x80000000]
    sets += [np.arange(lo, hi, dtype=np.int64) for lo, hi in bands]
    worst, worst_bits, total, count, wrong = -1.0, 0, 0.0, 0, 0
    for s in sets:
        for i in range(0, len(s), chunk):
            a = s[i:i + chunk]
            r = model(a)["r"]
            err = exp_ulp_error(a, r)
            with np.errstate(over="ignore"):
                nearest = np.exp(_f32(a).astype(np.float64)).astype(np.float32).view(_U32)
            wrong += int(np.count_nonzero(nearest != r))
            j = int(np.argmax(err))
            if err[j] > worst:
                worst, worst_bits = float(err[j]), int(a[j])
            total += float(err.sum())
            count += len(a)
    return {"max_ulp": worst, "argmax_bits": worst_bits,
            "argmax_x": float(_f32(worst_bits)), "mean_ulp": total / count, "count": count,
            "not_correctly_rounded": wrong,
            "stride": stride, "bands": [[hex(lo), hex(hi)] for lo, hi in bands],
            "exp_table_bits": model.config.exp_table_bits}


# ----------------------------------------------------------------------------------------------
# Operand sets (fixed seeds in the tests)
# ----------------------------------------------------------------------------------------------

def _pm(values) -> list[int]:
    out = []
    for v in values:
        out += [int(v), int(v) | 0x80000000]
    return out


def _f2b(values) -> list[int]:
    return [int(b) for b in np.asarray(values, dtype=np.float32).view(_U32)]


#: Extra named operands for divide / square root, both signs: small integers and simple
#: fractions (exact quotients and roots), perfect squares, 1/3 (inexact), the subnormals whose
#: halves are exact ties (2**-149, 3 * 2**-149, 5 * 2**-149), even/odd-exponent subnormals
#: (2**-148, 2**-149: exact/inexact roots), 2**-126 * 1.5, 2**126, 2**-127.
DIVSQRT_EXTRA: tuple[int, ...] = tuple(_pm(_f2b([
    2.0, 4.0, 0.75, 7.0, 9.0, 10.0, 0.25, 16777215.0, 1.0 / 3.0, 2.0 ** 126, 2.0 ** -127,
    1.5 * 2.0 ** -126, 2.0 ** -148, 3 * 2.0 ** -149, 5 * 2.0 ** -149, 2.0 ** -140,
    (1 + 2.0 ** -12) ** 2, 1.9999999, 0.1,
])))

#: Named exp arguments: zeros, subnormals, tiny values around the ``exp(x) -> 1.0`` limits
#: (2**-24, 2**-25, 2**-30, 2**-31), ±1, ±0.5, ln 2, values at table boundaries, the overflow
#: threshold neighbourhood (88.7228..), the normal/subnormal result boundary (-87.3365..), the
#: smallest-subnormal and underflow-to-zero neighbourhood (-103.28.., -103.97..), ±128 and its
#: neighbours (the special-case bound), huge values, ±Inf and NaNs.
EXP_SPECIALS: tuple[int, ...] = tuple(_pm([
    0x00000000, 0x00000001, 0x007FFFFF, 0x00800000, 0x2F800000, 0x30000000, 0x30800000,
    0x33000000, 0x33800000, 0x34000000, 0x3F000000, 0x3F800000, 0x3F317218, 0x3F317217,
    0x3C317218, 0x3CB17218, 0x40000000, 0x41200000, 0x42B17217, 0x42B17218, 0x42B17219,
    0x42B17180, 0x42B20000, 0x42AEAC4F, 0x42AEAC50, 0x42AEAC51, 0x42CE8ED0, 0x42CFF1B4,
    0x42CFF1B5, 0x42CFF1B6, 0x42D00000, 0x42FFFFFF, 0x43000000, 0x43000001, 0x4B000000,
    0x7149F2CA, 0x7F7FFFFF, 0x7F800000, 0x7FC00000, 0x7F800001, 0x7FFFFFFF,
]))


def special_operands(block: str, base=()) -> dict:
    """Input fields of the named special cases of ``block``.

    ``fp32_div``: every pair of ``base + DIVSQRT_EXTRA`` (``base``: e.g.
    :data:`sim.model.fp32.SPECIALS`); ``fp32_sqrt``: ``base + DIVSQRT_EXTRA``; ``fp32_exp``:
    ``base + EXP_SPECIALS``.
    """
    if block == "fp32_div":
        vals = np.array(sorted(set(base) | set(DIVSQRT_EXTRA)), dtype=np.int64)
        a, b = np.meshgrid(vals, vals, indexing="ij")
        return {"a": a.ravel(), "b": b.ravel()}
    if block == "fp32_sqrt":
        return {"a": np.array(sorted(set(base) | set(DIVSQRT_EXTRA)), dtype=np.int64)}
    if block == "fp32_exp":
        return {"a": np.array(sorted(set(base) | set(EXP_SPECIALS)), dtype=np.int64)}
    raise ValueError(f"block must be one of {tuple(MODELS)}, not {block!r}")


def _compose(sign, efield, frac) -> np.ndarray:
    return ((np.asarray(sign, np.int64) << 31) | (np.clip(efield, 0, 255).astype(np.int64) << 23)
            | (np.asarray(frac, np.int64) & 0x7FFFFF))


def _structured_frac(rng, n) -> np.ndarray:
    kind = rng.integers(0, 6, n)
    uni = rng.integers(0, 1 << 23, n)
    low = rng.integers(0, 8, n)
    bit = np.left_shift(np.int64(1), rng.integers(0, 23, n))
    return np.select([kind < 3, kind == 3, kind == 4], [uni, low, (1 << 23) - 1 - low],
                     bit).astype(np.int64)


def random_operands(block: str, rng: np.random.Generator, n: int, base=None) -> dict:
    """``n`` random input fields for ``block``.

    ``base(rng, n)`` gives generic FP32 patterns of every class (:func:`sim.model.fp32.random_fp32`
    in the tests). On top of it:

    * ``fp32_div``: 30 % generic pairs; 20 % exponent difference ``ea - eb`` in -160..-120
      (subnormal and zero quotients, ties at the smallest subnormals) or 120..135 (overflow);
      20 % quotients near a rounding boundary (``a = fl(m * b)`` for a random ``b`` and a
      midpoint ``m`` between adjacent floats); 10 % ``a = b`` moved by a few ulps; 20 %
      structured mantissas (all ones, single bits, low bits).
    * ``fp32_sqrt``: 40 % generic; 20 % perfect squares ``y*y`` (exact roots, ``y`` with 12
      significant bits); 20 % squares moved by ±1..3 ulps (near-ties); 20 % structured.
    * ``fp32_exp``: 25 % generic; 35 % uniform in ``[-110, 95]``; 20 % uniform in ``[-20, 0]``
      (softmax range); 10 % ``|x| < 2**-10``; 10 % random patterns with ``|x|`` in ``[64, 128)``.
    """
    if base is None:
        raise TypeError("random_operands needs base=callable(rng, n) -> FP32 bit patterns")
    kind = rng.random(n)
    if block == "fp32_div":
        a = base(rng, n).astype(np.int64)
        b = base(rng, n).astype(np.int64)
        sa, sb = rng.integers(0, 2, n), rng.integers(0, 2, n)
        ea = rng.integers(1, 255, n)
        d = np.where(rng.random(n) < 0.6, rng.integers(-160, -119, n), rng.integers(120, 136, n))
        eb = np.clip(ea - d, 0, 254)
        ea = np.clip(eb + d, 0, 254)
        a_ex = _compose(sa, ea, _structured_frac(rng, n))
        b_ex = _compose(sb, eb, _structured_frac(rng, n))
        # near rounding boundaries: a = fl(mid * b)
        bm = _compose(sb, rng.integers(100, 155, n), rng.integers(0, 1 << 23, n))
        q = _compose(sa, rng.integers(100, 155, n), rng.integers(0, 1 << 23, n))
        mid = _f32(q).astype(np.float64) * (1 + 2.0 ** -24)
        with np.errstate(all="ignore"):
            a_mid = _bits((mid * _f32(bm).astype(np.float64)).astype(np.float32).view(_U32))
        a_eq = np.clip((bm & 0x7FFFFFFF) + rng.integers(-3, 4, n), 0, 0x7F7FFFFF) | (sa << 31)
        a_st = _compose(sa, rng.integers(90, 165, n), _structured_frac(rng, n))
        b_st = _compose(sb, rng.integers(90, 165, n), _structured_frac(rng, n))
        a = np.select([kind < 0.3, kind < 0.5, kind < 0.7, kind < 0.8], [a, a_ex, a_mid, a_eq],
                      a_st)
        b = np.select([kind < 0.3, kind < 0.5, kind < 0.7, kind < 0.8], [b, b_ex, bm, bm], b_st)
        return {"a": a & 0xFFFFFFFF, "b": b & 0xFFFFFFFF}
    if block == "fp32_sqrt":
        a = base(rng, n).astype(np.int64)
        y = _compose(0, rng.integers(52, 191, n), rng.integers(0, 1 << 11, n) << 12)
        with np.errstate(all="ignore"):
            sq = _bits((_f32(y) * _f32(y)).view(_U32))
        near = np.clip(sq + rng.choice(np.array([-3, -2, -1, 1, 2, 3]), n), 0, 0x7F7FFFFF)
        st = _compose(rng.integers(0, 8, n) == 0, rng.integers(0, 255, n),
                      _structured_frac(rng, n))
        a = np.select([kind < 0.4, kind < 0.6, kind < 0.8], [a, sq, near], st)
        return {"a": a & 0xFFFFFFFF}
    if block == "fp32_exp":
        a = base(rng, n).astype(np.int64)
        wide = _f2b(rng.uniform(-110, 95, n))
        soft = _f2b(rng.uniform(-20, 0, n))
        tiny = _f2b(rng.uniform(-2.0 ** -10, 2.0 ** -10, n))
        big = _compose(rng.integers(0, 2, n), 133, rng.integers(0, 1 << 23, n))
        a = np.select([kind < 0.25, kind < 0.6, kind < 0.8, kind < 0.9],
                      [a, np.array(wide), np.array(soft), np.array(tiny)], big)
        return {"a": a & 0xFFFFFFFF}
    raise ValueError(f"block must be one of {tuple(MODELS)}, not {block!r}")
