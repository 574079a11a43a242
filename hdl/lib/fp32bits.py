"""Tests on FP32 bit patterns (Amaranth expressions on a 32-bit value, no FP32 unit).

Bit fields of IEEE binary32: fraction ``x[0:23]``, exponent field ``x[23:31]``, sign ``x[31]``.
"""
from __future__ import annotations

from amaranth.hdl import Mux

__all__ = ["is_nan", "is_inf_or_nan", "gt_zero", "order_key"]


def is_nan(x):
    """``x`` is a NaN (exponent field 255, fraction not 0)."""
    return (x[23:31] == 0xFF) & (x[0:23] != 0)


def is_inf_or_nan(x):
    """``x`` is not finite: +-Inf or NaN (exponent field 255)."""
    return x[23:31] == 0xFF


def gt_zero(x):
    """``x > 0`` (false for NaN and both zeros)."""
    return ~x[31] & (x[0:31] != 0) & ~is_nan(x)


def order_key(x):
    """Unsigned 32-bit key ordering non-NaN FP32 bit patterns like their values, with
    ``-0 < +0`` (negative: the bits inverted; positive: the sign bit set)."""
    return Mux(x[31], ~x, x | 0x80000000)
