"""Configuration and constants of the FP32 divide, square root and exp units.

:class:`FP32DivSqrtConfig` configures :class:`hdl.fp32.div.FP32Div`,
:class:`hdl.fp32.sqrt.FP32Sqrt` and :class:`hdl.fp32.exp.FP32Exp`; :func:`exp_constants` gives
the integer constants of the exp algorithm, shared by the hardware and the golden model
:mod:`sim.model.fp32_exp`. This module imports no Amaranth (the golden models use it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fractions import Fraction

from ..config import PresetMixin, check_int

__all__ = ["FP32DivSqrtConfig", "DIV_QUOTIENT_BITS", "SQRT_ROOT_BITS", "EXP_LATENCY",
           "EXP_FRAC_BITS", "ExpConstants", "exp_constants"]

#: Minimum quotient bits of the divider: 24 significant bits + guard bit (+1 when a < b).
DIV_QUOTIENT_BITS = 26
#: Minimum root bits of the square root: 24 significant bits + guard bit (+1 spare).
SQRT_ROOT_BITS = 26
#: Latency of the exp unit (independent of the configuration).
EXP_LATENCY = 21


@dataclass(frozen=True)
class FP32DivSqrtConfig(PresetMixin):
    """FP32 divide / square root / exp units.

    Parameters
    ----------
    div_bits_per_stage : int
        Quotient bits computed by one pipeline stage of :class:`~hdl.fp32.div.FP32Div`
        (restoring digit recurrence, radix 2, ``div_bits_per_stage`` steps unrolled per
        register stage), 1..8. Fewer bits per stage: more stages, shorter paths.
    sqrt_bits_per_stage : int
        Root bits computed by one pipeline stage of :class:`~hdl.fp32.sqrt.FP32Sqrt`, 1..8.
    exp_table_bits : int
        ``t`` of :class:`~hdl.fp32.exp.FP32Exp`: the table holds ``2**(j/2**t)`` for
        ``j < 2**t``, and the reduced argument satisfies ``|r| <~ ln2 / 2**(t+1)``, 4..8.
    lzc_stage : bool
        A register stage ahead of the divider's and the square root's first: the operands'
        significand leading-zero counts are registered before the shifts that normalise
        subnormals (one cycle more each; the FPGA builds', ``hdl.core.config.
        fpga_divsqrt_config``). ``False`` (the default): count and shift in one stage.
    """

    div_bits_per_stage: int = 2
    sqrt_bits_per_stage: int = 2
    exp_table_bits: int = 6
    lzc_stage: bool = False

    PRESETS: ClassVar[dict[str, dict]] = {
        "tiny": {"div_bits_per_stage": 4, "sqrt_bits_per_stage": 4, "exp_table_bits": 4},
        "default": {},
    }

    def __post_init__(self):
        check_int("FP32DivSqrtConfig", "div_bits_per_stage", self.div_bits_per_stage,
                  lo=1, hi=8)
        check_int("FP32DivSqrtConfig", "sqrt_bits_per_stage", self.sqrt_bits_per_stage,
                  lo=1, hi=8)
        if not isinstance(self.lzc_stage, bool):
            raise TypeError(f"FP32DivSqrtConfig.lzc_stage must be a bool, not "
                            f"{type(self.lzc_stage).__name__} {self.lzc_stage!r}")
        check_int("FP32DivSqrtConfig", "exp_table_bits", self.exp_table_bits, lo=4, hi=8)

    # Derived sizes (shared by the hardware, the docs and the tests).
    @property
    def div_stages(self) -> int:
        """Register stages of the divider's digit recurrence."""
        return -(-DIV_QUOTIENT_BITS // self.div_bits_per_stage)

    @property
    def div_quotient_bits(self) -> int:
        """Quotient bits computed, ``div_stages * div_bits_per_stage`` (>= 26)."""
        return self.div_stages * self.div_bits_per_stage

    @property
    def div_latency(self) -> int:
        """Cycles of :class:`~hdl.fp32.div.FP32Div`: unpack/normalize + recurrence stages +
        two rounding stages (prepare | finish and output), and the :attr:`lzc_stage`."""
        return 1 + self.div_stages + 2 + self.lzc_stage

    @property
    def sqrt_stages(self) -> int:
        return -(-SQRT_ROOT_BITS // self.sqrt_bits_per_stage)

    @property
    def sqrt_root_bits(self) -> int:
        return self.sqrt_stages * self.sqrt_bits_per_stage

    @property
    def sqrt_latency(self) -> int:
        """Cycles of :class:`~hdl.fp32.sqrt.FP32Sqrt`: unpack + recurrence stages + two
        rounding stages (prepare | finish and output), and the :attr:`lzc_stage`."""
        return 1 + self.sqrt_stages + 2 + self.lzc_stage

    @property
    def exp_latency(self) -> int:
        """Cycles of :class:`~hdl.fp32.exp.FP32Exp`: convert, n, r, 3 Horner steps, table
        product, two rounding stages (prepare | finish and output); see ``hdl/fp32/exp.py``."""
        return EXP_LATENCY




#: Fraction bits of the exp datapath's fixed-point numbers.
EXP_FRAC_BITS = 30
#: ln 2 to 66 decimal digits (far more than the 48 + 16 bits used).
_LN2 = Fraction("0.693147180559945309417232121458176568075500134360255254120680009493")


def _iroot(x: int, k: int) -> int:
    """``floor(x ** (1/k))`` for a positive integer ``x``, exact (integer Newton from above)."""
    r = 1 << -(-x.bit_length() // k)             # 2**ceil(bits/k) > x**(1/k)
    while True:
        s = ((k - 1) * r + x // r ** (k - 1)) // k
        if s >= r:
            break
        r = s
    while r ** k > x:
        r -= 1
    while (r + 1) ** k <= x:
        r += 1
    return r


class ExpConstants:
    """Integer constants of the exp datapath for a ``2**t``-entry table (exactly computed).

    Attributes
    ----------
    t, N : int
        Table index bits and size ``N = 2**t``.
    CINV : int
        ``round(N / ln2 * 2**16)``.
    LN2N : int
        ``round(ln2 / N * 2**48)``.
    C3, C2, C1, C0 : int
        Horner coefficients ``1/6, 1/2, 1, 1`` with :data:`EXP_FRAC_BITS` fraction bits.
    TABLE : tuple of int
        ``round(2**(j/N) * 2**30)`` for ``j < N`` (31-bit values).
    """

    def __init__(self, t: int):
        check_int("ExpConstants", "t", t, lo=1, hi=12)
        f = EXP_FRAC_BITS
        self.t = t
        self.N = 1 << t
        self.CINV = round(Fraction(self.N) / _LN2 * (1 << 16))
        self.LN2N = round(_LN2 / self.N * (1 << 48))
        self.C3 = round(Fraction(1 << f, 6))
        self.C2 = 1 << (f - 1)
        self.C1 = 1 << f
        self.C0 = 1 << f
        # floor(2 * 2**(j/N + f)) = floor((2**(N * (f + 1) + j)) ** (1/N)); never a tie.
        self.TABLE = tuple((_iroot(1 << (self.N * (f + 1) + j), self.N) + 1) >> 1
                           for j in range(self.N))


_EXP_CONSTANTS: dict[int, ExpConstants] = {}


def exp_constants(t: int) -> ExpConstants:
    """The (cached) :class:`ExpConstants` for ``exp_table_bits = t``."""
    if t not in _EXP_CONSTANTS:
        _EXP_CONSTANTS[t] = ExpConstants(t)
    return _EXP_CONSTANTS[t]
