"""Configuration and constants of the FP32 natural-log unit (pure Python, no Amaranth import).

:class:`FP32LogConfig` configures :class:`hdl.fp32.log.FP32Log`; :func:`log_constants` gives the
integer constants of the algorithm, shared by the hardware and the golden model
:mod:`sim.model.fp32_log` (the algorithm is described there and in ``docs/fp32_log.md``).
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import ClassVar

from ..config import PresetMixin, check_int

__all__ = ["FP32LogConfig", "LogConstants", "log_constants", "LOG_FRAC_BITS", "LOG_W_BITS",
           "LOG_LATENCY"]

#: Fraction bits of the fixed-point sum ``E*ln2 + log(1/inv_j) + log1p(r)``.
LOG_FRAC_BITS = 56
#: Fraction bits of the polynomial ``w(r) ~ log1p(r) / r``.
LOG_W_BITS = 32
#: Pipeline registers (unpack, index, reduce, 4 Horner steps, product, sum, and the rounding's
#: count, prepare and finish).
LOG_LATENCY = 12


@dataclass(frozen=True)
class FP32LogConfig(PresetMixin):
    """FP32 natural logarithm unit.

    Parameters
    ----------
    table_bits : int
        ``t``: the significand ``m`` in ``[1, 2)`` is reduced with the table entry nearest to
        it, ``c_j = 1 + j/2**t`` (``2**t + 1`` entries), so ``|r| <~ 2**-(t+1)``; 4..8.
    """

    table_bits: int = 6

    PRESETS: ClassVar[dict[str, dict]] = {"tiny": {"table_bits": 4}, "default": {}}

    def __post_init__(self):
        check_int("FP32LogConfig", "table_bits", self.table_bits, lo=4, hi=8)

    @property
    def latency(self) -> int:
        """Cycles from an accepted operand to its result (fixed: :data:`LOG_LATENCY`)."""
        return LOG_LATENCY


class LogConstants:
    """Integer constants of the log datapath for ``table_bits = t`` (computed exactly).

    Attributes
    ----------
    t, N : int
        Index bits and ``N = 2**t``; table index ``j`` in ``0..N``.
    K : int
        Fraction bits of the reciprocal table (``t + 5``).
    RF : int
        Fraction bits of the reduced argument ``r`` (``23 + K``: ``r`` is exact).
    F, W : int
        :data:`LOG_FRAC_BITS`, :data:`LOG_W_BITS`.
    INV : tuple of int
        ``round(2**K * N / (N + j))``: ``inv_j ~ 1 / c_j``; ``INV[0] = 2**K``,
        ``INV[N] = 2**(K-1)`` exactly.
    LOGT : tuple of int
        ``round(ln(2**K / INV[j]) * 2**F)`` = ``-ln(inv_j)``; ``LOGT[0] = 0``,
        ``LOGT[N] = LN2``.
    LN2 : int
        ``round(ln 2 * 2**F)``.
    H : tuple of int
        Horner coefficients ``(1/5, -1/4, 1/3, -1/2, 1)`` with ``W`` fraction bits.
    """

    def __init__(self, t: int):
        check_int("LogConstants", "t", t, lo=1, hi=12)
        self.t = t
        self.N = 1 << t
        self.K = t + 5
        self.RF = 23 + self.K
        self.F = LOG_FRAC_BITS
        self.W = LOG_W_BITS
        n = self.N
        self.INV = tuple(round(Fraction((1 << self.K) * n, n + j)) for j in range(n + 1))
        with localcontext() as ctx:
            ctx.prec = 60                     # ~200 bits: far beyond the 56 kept
            scale = Decimal(1 << self.F)
            self.LN2 = int((Decimal(2).ln() * scale).to_integral_value())
            self.LOGT = tuple(
                int(((Decimal(1 << self.K) / Decimal(inv)).ln() * scale).to_integral_value())
                for inv in self.INV)
        w = self.W
        self.H = (round(Fraction(1 << w, 5)), -(1 << (w - 2)), round(Fraction(1 << w, 3)),
                  -(1 << (w - 1)), 1 << w)
        assert self.INV[0] == 1 << self.K and self.INV[n] == 1 << (self.K - 1)
        assert self.LOGT[0] == 0 and self.LOGT[n] == self.LN2


_LOG_CONSTANTS: dict[int, LogConstants] = {}


def log_constants(t: int) -> LogConstants:
    """The (cached) :class:`LogConstants` for ``table_bits = t``."""
    if t not in _LOG_CONSTANTS:
        _LOG_CONSTANTS[t] = LogConstants(t)
    return _LOG_CONSTANTS[t]
