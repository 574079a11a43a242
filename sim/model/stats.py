"""Golden model of FAST's precision-switching statistic (pure numpy, integer arithmetic).

Bit-exact with :class:`hdl.bfp.stat.QuantStat` (docs/fast.md). While a tensor ``X`` is
quantized at width ``m`` (by any rounding mode), the statistic unit also quantizes it at
``m + 2`` with round-to-nearest-even and accumulates

    r(X) = sum |BFP(X, m + 2) - BFP(X, m)| / sum |BFP(X, m)|

(the denominator is the L1 norm of the quantized tensor, ``sum |BFP(X, m)|``: the absolute value of
the signed sum cancels and can be 0 for any tensor, so it is not used).

Number format
-------------
One BFP group (exponent ``E``, magnitudes ``M_j`` at width ``m`` and ``H_j`` at ``m + 2``; both
share ``E``, and signs are equal: the sign is the input's sign bit) gives two exact integers in
units of ``2**(E - mm + 1)`` (the LSB of the widest width ``mm = max_mantissa``):

* ``D = sum_j |H_j - 4 M_j| << (mm - m - 2)`` (``|H_j - 4 M_j| <= 4``: 4 when ``M_j``
  truncates or rounds stochastically),
* ``N = sum_j M_j << (mm - m)``.

The accumulator is a small floating-point pair ``(exp, num, den)`` with ``STAT_BITS``-bit
unsigned ``num``/``den`` sharing one exponent, value ``num * 2**(exp - mm + 1)``:

* first group after a clear: ``exp, num, den = E, D, N``;
* later groups: the side with the smaller exponent is shifted right (truncated) to the larger one,
  by ``min(difference, STAT_BITS)``; then ``num += D'``, ``den += N'``;
* if either sum reaches ``2**STAT_BITS``, both are shifted right by one and ``exp`` grows by one
  (renormalisation instead of saturation: the ratio stays right).

Groups that add nothing: ``m = mm`` (there is no ``m + 2``: no statistic at the top width), and
groups with ``N = 0`` (all-zero, NaN/Inf groups). The result depends on the group order (the
truncations), which is the converter's order, reproduced by the golden model.
``r = num / den`` (no statistic when ``den = 0``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdl.config import STAT_BITS, BFPConfig, check_stat_bits
from sim.model.bfp import (ROUND_NEAREST, BFPConverterModel, decode_width, fp32_stream_fields,
                           quantize, unpack_bfp_group, unpack_fp32_group)

__all__ = ["STAT_BITS", "StatState", "group_terms", "stat_update",
           "StatModel", "QuantStatModel", "ratio"]


@dataclass(frozen=True)
class StatState:
    """The accumulator: ``exp`` (signed), ``num``, ``den`` (``STAT_BITS`` bits), ``seen``
    (a group was added since the last clear). A cleared accumulator is all zeros."""

    exp: int = 0
    num: int = 0
    den: int = 0
    seen: bool = False

    @classmethod
    def of(cls, value) -> "StatState":
        """From anything with ``exp``, ``num``, ``den``, ``seen`` fields: the hardware's
        ``stat`` port read in a simulator (an Amaranth view/const of
        :func:`hdl.bfp.stat.stat_layout`, e.g. ``stat_layout(c).from_bits(bits)``)."""
        return cls(exp=int(value.exp), num=int(value.num), den=int(value.den),
                   seen=bool(value.seen))


def group_terms(mag_lo, mag_hi, width: int, max_mantissa: int) -> tuple[int, int]:
    """``(D, N)`` of one group: magnitudes at ``width`` (``mag_lo``) and ``width + 2``
    (``mag_hi``), both in units of ``2**(E - max_mantissa + 1)``."""
    lo = np.asarray(mag_lo, np.int64)
    hi = np.asarray(mag_hi, np.int64)
    d = int(np.abs(hi - 4 * lo).sum())
    n = int(lo.sum())
    return d << (max_mantissa - width - 2), n << (max_mantissa - width)


def stat_update(state: StatState, exp: int, D: int, N: int, *,
                bits: int = STAT_BITS) -> StatState:
    """The accumulator (``bits``-bit ``num``/``den``) after adding one group with exponent
    ``exp`` and terms ``(D, N)`` (``N > 0``)."""
    B = bits
    if not state.seen:
        e, num, den = exp, D, N
    elif exp > state.exp:
        k = min(exp - state.exp, B)
        e, num, den = exp, (state.num >> k) + D, (state.den >> k) + N
    else:
        k = min(state.exp - exp, B)
        e, num, den = state.exp, state.num + (D >> k), state.den + (N >> k)
    if num >> B or den >> B:
        e, num, den = e + 1, num >> 1, den >> 1
    return StatState(exp=e, num=num, den=den, seen=True)


def ratio(state: StatState) -> float | None:
    """``r = num / den`` (``None`` without a statistic)."""
    return state.num / state.den if state.den else None


class StatModel:
    """The statistic of one converter: call :meth:`accept` with every group it delivers.

    Parameters
    ----------
    config : BFPConfig
        The converter's configuration (``group_size``, ``max_mantissa``).
    stat_bits : int
        Width of ``num``/``den`` (:data:`STAT_BITS`; smaller in tests of the renormalisation).
    """

    def __init__(self, config: BFPConfig, *, stat_bits: int = STAT_BITS):
        if not isinstance(config, BFPConfig):
            raise TypeError(f"config must be a BFPConfig, not {type(config).__name__}")
        check_stat_bits("StatModel", stat_bits, config)
        self.config = config
        self.stat_bits = stat_bits
        self.state = StatState()

    def clear(self) -> None:
        self.state = StatState()

    def accept(self, values, width_code: int, exp: int, mag) -> None:
        """One group: its FP32 ``values`` (``group_size`` float32), the width field, and the
        converter's output ``exp`` and magnitudes ``mag`` at that width (any rounding mode)."""
        mm = self.config.max_mantissa
        m = decode_width(width_code, self.config)
        if m == mm:
            return
        hi = quantize(np.asarray(values, np.float32).reshape(-1), self.config, width=m + 2,
                      rounding=ROUND_NEAREST)
        D, N = group_terms(mag, hi.mag, m, mm)
        if N:
            self.state = stat_update(self.state, int(exp), D, N, bits=self.stat_bits)

    def accept_groups(self, values, width_code: int, groups, *, axis: int = -1) -> None:
        """Every group of a :func:`sim.model.bfp.quantize` result ``groups`` of the float32
        ``values`` (any number of leading axes, already padded like ``groups.mag``), grouped
        along ``axis`` (-1: along the last axis; -2 or, for 2-D, 0: along the second-to-last),
        in C order of the groups with the group axis last. Same result as :meth:`accept` on
        each group in that order; the ``m + 2`` quantization and the terms are vectorised."""
        G, mm = self.config.group_size, self.config.max_mantissa
        m = decode_width(width_code, self.config)
        if m == mm:
            return
        vals = np.asarray(values, np.float32)
        mags = np.asarray(groups.mag)
        exps = np.asarray(groups.exp)
        if axis in (0, -2):
            vals, mags, exps = (np.swapaxes(a, -1, -2) for a in (vals, mags, exps))
        elif axis != -1:
            raise ValueError(f"axis must be -1, -2 or 0, not {axis!r}")
        vals = np.ascontiguousarray(vals).reshape(-1, G)
        lo = np.ascontiguousarray(mags).reshape(-1, G).astype(np.int64)
        exps = np.ascontiguousarray(exps).reshape(-1)
        hi = quantize(vals, self.config, width=m + 2, axis=-1,
                      rounding=ROUND_NEAREST).mag.astype(np.int64)
        D = np.abs(hi - 4 * lo).sum(axis=-1) << (mm - m - 2)
        N = lo.sum(axis=-1) << (mm - m)
        state = self.state
        for i in np.flatnonzero(N):
            state = stat_update(state, int(exps[i]), int(D[i]), int(N[i]), bits=self.stat_bits)
        self.state = state


class QuantStatModel:
    """Transaction-level model of :class:`hdl.bfp.stat.QuantStat`: :meth:`accept` takes an input
    payload and returns the output payload (:class:`sim.model.bfp.BFPConverterModel`) and adds the
    group to the statistic (:attr:`state`) as the hardware does once that group is delivered;
    :meth:`clear` mirrors ``stat_clear``, :meth:`reset` the ``rst`` input."""

    def __init__(self, config: BFPConfig, *, stat_bits: int = STAT_BITS):
        self.conv = BFPConverterModel(config)
        self.stat = StatModel(config, stat_bits=stat_bits)
        self.config = config

    @property
    def state(self) -> StatState:
        return self.stat.state

    def reset(self) -> None:
        self.conv.reset()
        self.stat.clear()

    def clear(self) -> None:
        self.stat.clear()

    def load(self, state: StatState) -> None:
        """``stat_load`` with ``stat_in = state``."""
        self.stat.state = state

    def accept(self, word: int) -> int:
        out = self.conv.accept(word)
        g = unpack_bfp_group(out, self.config)
        off, bits = fp32_stream_fields(self.config)["width"]
        code = (word >> off) & ((1 << bits) - 1)
        values = unpack_fp32_group(word, self.config).view(np.float32)
        self.stat.accept(values, code, g["exp"], g["mag"])
        return out
