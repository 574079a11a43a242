"""Golden model of the FP32 natural-log unit :class:`hdl.fp32.log.FP32Log` (pure numpy).

Integer steps in ``int64`` numpy arithmetic (every intermediate fits in 63 bits), bit-exact with
the hardware. Constants: :func:`hdl.fp32.log_config.log_constants` (``t`` = table bits,
``N = 2**t``, ``K = t + 5``, ``RF = 23 + K``, ``W = 32``, ``F = 56``).

1. Unpack; normalise subnormals: ``x = m * 2**E`` with ``m = M / 2**23``, ``M`` in
   ``[2**23, 2**24)`` (exact for every positive finite input, subnormals included).
2. Table index ``j = round((m - 1) * N) = (frac + 2**(22-t)) >> (23-t)`` in ``0..N``.
3. Reduced argument ``R = M * INV[j] - 2**RF``: ``r = m * inv_j - 1`` *exactly* (``RF``
   fraction bits), ``|r| <= 2**-(t+1) + 2**-K``.
4. ``w(r) = log1p(r) / r ~ 1 - r/2 + r**2/3 - r**3/4 + r**4/5`` by Horner, each product
   floored to ``W`` fraction bits: ``h = H[0]``; ``h = H[i] + (R*h >> RF)`` for ``i = 1..4``.
5. ``P = R * w`` (``log1p(r)``, exact product, ``RF + W`` fraction bits);
   ``A = E * LN2 + LOGT[j]`` (``E ln2 - ln(inv_j)``, ``F`` fraction bits).
6. ``S = A + (P >> (RF + W - F))`` (floor), ``d = P mod 2**(RF+W-F) != 0``: the exact value of
   ``A + P * 2**-(RF+W-F)`` is ``(S + delta) * 2**-F`` with ``0 <= delta < 1``, ``delta != 0``
   iff ``d``. Round it to FP32 (RNE): sign ``S < 0``, magnitude ``|S| - d`` with sticky ``d``.

Why the small results are accurate: for ``x`` just above 1 (``E = 0, j = 0``) and just below 1
(``E = -1, j = N``: ``INV[N] = 2**(K-1)``, ``LOGT[N] = LN2``) the table terms cancel exactly
(``A = 0``), and the result is the correctly rounded ``r * w(r)`` with ``r`` exact: relative
error = that of ``w``. Elsewhere ``|log x| >= ~2**-(t+2)`` and the absolute error of the fixed
point (``~2**-50``) is far below half an ulp.

Specials: NaN -> :data:`QNAN`; ``±0`` -> ``-Inf``; any negative non-zero input (``-Inf``
included) -> :data:`QNAN`; ``+Inf`` -> ``+Inf``; ``log(1) = +0``.
"""
from __future__ import annotations

import numpy as np

from hdl.fp32.log_config import FP32LogConfig, LogConstants, log_constants
from sim.model.fp32_exp import round_to_fp32_vec

__all__ = ["QNAN", "NEG_INF", "FP32Log", "log_ulp_error", "measure_log_accuracy", "LOG_BANDS",
           "LOG_SPECIALS", "special_operands", "random_operands"]

QNAN = 0x7FC00000
NEG_INF = 0xFF800000
POS_INF = 0x7F800000
_U32 = np.uint32


def _bits(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64) & 0xFFFFFFFF


def _f32(bits) -> np.ndarray:
    return _bits(bits).astype(_U32).view(np.float32)


def _round_wide(sign, exp, sig, sticky) -> np.ndarray:
    """:func:`sim.model.fp32_exp.round_to_fp32_vec` for ``sig < 2**63``: bits beyond 52 go into
    the sticky bit first (the same correctly rounded result)."""
    sig = np.asarray(sig, np.int64)
    _, length = np.frexp(sig.astype(np.float64))       # may be one too high near 2**k
    sh = np.clip(length.astype(np.int64) - 51, 0, 62)
    dropped = sig & ((np.int64(1) << sh) - 1)
    return round_to_fp32_vec(sign, exp + sh, sig >> sh, (np.asarray(sticky) != 0) | (dropped != 0))


class FP32Log:
    """The hardware log algorithm, bit-exact (module docstring); :meth:`steps` returns every
    named intermediate (the hardware's register names)."""

    NAME = "fp32_log"
    IN_FIELDS = (("a", 32),)
    OUT_FIELDS = (("r", 32),)

    def __init__(self, config: FP32LogConfig | None = None):
        self.config = config if config is not None else FP32LogConfig()

    @property
    def latency(self) -> int:
        return self.config.latency

    @property
    def constants(self) -> LogConstants:
        return log_constants(self.config.table_bits)

    def steps(self, a) -> dict:
        c = self.constants
        a = _bits(a)
        sign = (a >> 31) & 1
        efield = (a >> 23) & 0xFF
        frac = a & 0x7FFFFF
        nan = (efield == 0xFF) & (frac != 0)
        inf = (efield == 0xFF) & (frac == 0)
        zero = (efield == 0) & (frac == 0)
        # 1. normalise: M in [2**23, 2**24), x = M * 2**(E - 23)
        raw = np.where(efield != 0, frac | (1 << 23), frac)
        _, length = np.frexp(raw.astype(np.float64))
        lz = np.where(raw == 0, 24, 24 - length.astype(np.int64))
        m = (raw << np.minimum(lz, 23)) & 0xFFFFFF
        e = np.where(efield != 0, efield, 1) - 127 - lz
        # 2. table index
        j = ((m & 0x7FFFFF) + (1 << (22 - c.t))) >> (23 - c.t)
        # 3. reduced argument (exact)
        inv = np.array(c.INV, np.int64)[j]
        red = m * inv - (np.int64(1) << c.RF)
        # 4. Horner, floor to W fraction bits
        h = np.full_like(red, c.H[0])
        hs = []
        for coef in c.H[1:]:
            h = coef + ((red * h) >> c.RF)
            hs.append(h)
        w = h
        # 5. log1p(r) and the table part
        prod = red * w
        logt = np.array(c.LOGT, np.int64)[j]
        big = e * c.LN2 + logt
        # 6. sum and round
        drop = c.RF + c.W - c.F
        s = big + (prod >> drop)
        d = (prod & ((np.int64(1) << drop) - 1)) != 0
        neg = s < 0
        mag = np.where(neg, -s - d.astype(np.int64), s)
        rounded = _round_wide(neg.astype(np.int64), -c.F, mag, d)
        special = nan | inf | zero | (sign == 1)
        special_val = np.select([nan, zero, sign == 1], [QNAN, NEG_INF, QNAN], POS_INF)
        r = np.where(special, special_val, rounded)
        return {"m": m, "e": e, "j": j, "inv": inv, "red": red, "h1": hs[0], "h2": hs[1],
                "h3": hs[2], "w": w, "prod": prod, "logt": logt, "big": big, "s": s,
                "sticky": d, "rounded": rounded, "special": special,
                "r": r.astype(np.int64)}

    def __call__(self, a) -> dict:
        return {"r": self.steps(a)["r"]}

    # stream helpers, as the models in sim.model.fp32_exp
    def pack_in(self, a) -> list[int]:
        return [int(v) for v in _bits(a)]

    def expected_payloads(self, in_payloads) -> list[int]:
        return [int(v) for v in self(np.array([int(p) for p in in_payloads], np.int64))["r"]]

    def describe(self, in_payload: int) -> str:
        return f"a={in_payload:#010x} ({float(_f32(in_payload)):.9g})"


# ----------------------------------------------------------------------------------------------
# Accuracy against float64
# ----------------------------------------------------------------------------------------------

def log_ulp_error(a_bits, r_bits) -> np.ndarray:
    """``|r - log(x)|`` in float32 ulps of ``log(x)`` (float64 reference), for finite ``x > 0``
    with ``x != 1``. The ulp of ``v`` is ``2**(floor(log2|v|) - 23)`` (``|log x| >= 2**-25``
    for every float32 ``x != 1``: never subnormal)."""
    x = _f32(a_bits).astype(np.float64)
    true = np.log(x)
    r = _f32(r_bits).astype(np.float64)
    _, e = np.frexp(true)                      # |true| = f * 2**e, f in [0.5, 1)
    return np.abs(r - true) / np.ldexp(1.0, e - 1 - 23)


#: Float32 bit-pattern ranges measured exhaustively by :func:`measure_log_accuracy`:
#: ``[0.5, 2)`` (2**24 values: both sides of 1, where the result is small and the table terms
#: cancel), the subnormals ``[2**-149, 2**-140)``, ``[2**-127, 2**-126)`` (subnormal / normal
#: boundary) and the top binade's last 2**20 values.
LOG_BANDS = ((0x3F000000, 0x40000000), (0x00000001, 0x00800000 >> 8),
             (0x00400000, 0x00800000), (0x7F700000, 0x7F800000))


def measure_log_accuracy(config: FP32LogConfig | None = None, *, stride: int = 4099,
                         bands=LOG_BANDS, chunk: int = 1 << 21) -> dict:
    """Worst ulp error of :class:`FP32Log` against float64 ``log`` (:func:`log_ulp_error`).

    Every ``stride``-th positive finite float32 bit pattern plus every pattern in each
    ``(lo, hi)`` range of ``bands`` (``x = 1`` excluded: exactly ``+0``, checked separately).
    Returns ``{"max_ulp", "argmax_bits", "argmax_x", "mean_ulp", "count",
    "not_correctly_rounded", ...}`` (the last: results that differ from float64 ``log``
    rounded to float32).
    """
    model = FP32Log(config)
    sets = [np.arange(1, 0x7F800000, stride, dtype=np.int64)]
    sets += [np.arange(lo, hi, dtype=np.int64) for lo, hi in bands]
    worst, worst_bits, total, count, wrong = -1.0, 0, 0.0, 0, 0
    for s in sets:
        s = s[s != 0x3F800000]
        for i in range(0, len(s), chunk):
            a = s[i:i + chunk]
            r = model(a)["r"]
            err = log_ulp_error(a, r)
            nearest = np.log(_f32(a).astype(np.float64)).astype(np.float32).view(_U32)
            wrong += int(np.count_nonzero(nearest != r))
            k = int(np.argmax(err))
            if err[k] > worst:
                worst, worst_bits = float(err[k]), int(a[k])
            total += float(err.sum())
            count += len(a)
    return {"max_ulp": worst, "argmax_bits": worst_bits,
            "argmax_x": float(_f32(worst_bits)), "mean_ulp": total / count, "count": count,
            "not_correctly_rounded": wrong, "stride": stride,
            "bands": [[hex(lo), hex(hi)] for lo, hi in bands],
            "table_bits": model.config.table_bits}


# ----------------------------------------------------------------------------------------------
# Operand sets
# ----------------------------------------------------------------------------------------------

def _pm(values) -> list[int]:
    out = []
    for v in values:
        out += [int(v), int(v) | 0x80000000]
    return out


#: Named log arguments, both signs: zeros, the smallest/largest subnormals and subnormals with
#: few bits, the smallest normal, 1 and its neighbours (results ±2**-24..), 1 ± a few ulps,
#: 0.5, 2 and their neighbours (table index 0 / N wrap), e, 10, the largest finite, ±Inf, NaNs
#: (quiet, signalling, negative), values at table boundaries (``m = 1 + (j + 1/2)/N``).
LOG_SPECIALS: tuple[int, ...] = tuple(_pm([
    0x00000000, 0x00000001, 0x00000002, 0x00000003, 0x00000100, 0x00400000, 0x007FFFFF,
    0x00800000, 0x00800001, 0x3F800000, 0x3F800001, 0x3F7FFFFF, 0x3F800002, 0x3F7FFFFE,
    0x3F800010, 0x3F7FFFF0, 0x3F000000, 0x3EFFFFFF, 0x3F000001, 0x40000000, 0x3FFFFFFF,
    0x40000001, 0x402DF854, 0x41200000, 0x3F810000, 0x3F808000, 0x3F80FFFF, 0x3FFC0000,
    0x3FFE0000, 0x3FFF0000, 0x3FB504F3, 0x3F3504F3, 0x7F7FFFFF, 0x7F000000, 0x7F800000,
    0x7FC00000, 0x7F800001, 0x7FFFFFFF,
]))


def special_operands(base=()) -> dict:
    """``{"a": ...}``: ``base`` (e.g. :data:`sim.model.fp32.SPECIALS`) plus :data:`LOG_SPECIALS`."""
    return {"a": np.array(sorted(set(base) | set(LOG_SPECIALS)), dtype=np.int64)}


def random_operands(rng: np.random.Generator, n: int, base=None) -> dict:
    """``n`` random operands: 20 % ``base(rng, n)`` (generic FP32 patterns of every class,
    e.g. :func:`sim.model.fp32.random_fp32`; uniform patterns if ``None``), 30 % uniform positive
    finite bit patterns, 20 % within 2**-12 relative of 1 (both sides), 10 % in
    ``[0.5, 2)``, 10 % positive subnormals, 10 % softmax sums (``[1, 1024)``)."""
    kind = rng.random(n)
    gen = (base(rng, n).astype(np.int64) if base is not None
           else rng.integers(0, 1 << 32, n, dtype=np.int64))
    pos = rng.integers(1, 0x7F800000, n, dtype=np.int64)
    near1 = np.where(rng.random(n) < 0.5, 0x3F800000 + rng.integers(0, 1 << 11, n),
                     0x3F800000 - rng.integers(1, 1 << 12, n))
    mid = rng.integers(0x3F000000, 0x40000000, n, dtype=np.int64)
    sub = rng.integers(1, 0x00800000, n, dtype=np.int64)
    sums = np.asarray(rng.uniform(1.0, 1024.0, n), np.float32).view(_U32).astype(np.int64)
    a = np.select([kind < 0.2, kind < 0.5, kind < 0.7, kind < 0.8, kind < 0.9],
                  [gen, pos, near1, mid, sub], sums)
    return {"a": a & 0xFFFFFFFF}
