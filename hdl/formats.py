"""Number formats as Amaranth data layouts (docs/bfp.md).

Tests and drivers pack and unpack with these same layouts (``layout.const({...})`` and
``layout.from_bits(int)``; the golden models' payload packers read their field offsets from
them).

* FP32: IEEE 754 binary32, ``frac`` (23) | ``exp`` (8) | ``sign`` (1), LSB first.
* BFP element: ``mag`` (``max_mantissa`` bits, unsigned magnitude) | ``sign`` (1).
* BFP group: ``exp`` (signed ``exp_bits``, the shared exponent ``E``) | ``elems``
  (``ArrayLayout`` of ``group_size`` elements). Element value is
  ``(-1)**sign * mag * 2**(E - (m - 1))`` with ``m`` the run-time mantissa width.
"""
from amaranth.hdl import signed, unsigned
from amaranth.lib import data

from .config import BFPConfig

__all__ = ["FP32", "bfp_elem_layout", "bfp_group_layout", "fp32_group_layout", "BFPFlags"]


class FP32(data.Struct):
    """IEEE 754 binary32, bit-compatible with ``numpy.float32.view(numpy.uint32)``."""

    frac: 23
    exp: 8
    sign: 1


class BFPFlags(data.Struct):
    """Sticky status of the BFP converter.

    ``invalid``: a NaN was seen. ``overflow``: an infinity was seen.
    """

    invalid: 1
    overflow: 1


def bfp_elem_layout(config: BFPConfig) -> data.StructLayout:
    return data.StructLayout({"mag": unsigned(config.max_mantissa), "sign": 1})


def bfp_group_layout(config: BFPConfig) -> data.StructLayout:
    return data.StructLayout({
        "exp": signed(config.exp_bits),
        "elems": data.ArrayLayout(bfp_elem_layout(config), config.group_size),
    })


def fp32_group_layout(config: BFPConfig) -> data.ArrayLayout:
    """``group_size`` FP32 words, element 0 in the low bits."""
    return data.ArrayLayout(FP32, config.group_size)
