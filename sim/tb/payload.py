"""Stream payloads as integers, packed and unpacked with the hardware's own Amaranth layouts.

Testbenches drive and sample payloads as plain integers; the field offsets and widths come from
the layout the hardware uses (``hdl.*`` layout functions), never from offsets copied by hand, so
a layout change reaches the testbenches by itself.
"""
from __future__ import annotations

from collections.abc import Mapping

from amaranth.lib import data

__all__ = ["pack", "unpack", "to_signed"]


def pack(layout, values: Mapping | list | tuple) -> int:
    """``values`` (field -> value; a list for an :class:`~amaranth.lib.data.ArrayLayout`) as the
    integer of a ``layout`` payload. Each value is masked to its field's width (two's complement
    for a negative value); a field whose shape is a layout (or a ``data.Struct``) also takes a
    nested mapping or list. Fields left out are 0."""
    layout = data.Layout.cast(layout)
    word = 0
    items = values.items() if isinstance(values, Mapping) else enumerate(values)
    for key, v in items:
        field = layout[key]
        if isinstance(v, (Mapping, list, tuple)):
            v = pack(field.shape, v)
        word |= (int(v) & ((1 << field.width) - 1)) << field.offset
    return word


def unpack(layout, word: int) -> dict:
    """The top-level fields of a ``layout`` payload, as unsigned integers."""
    word = int(word)
    return {name: (word >> field.offset) & ((1 << field.width) - 1)
            for name, field in data.Layout.cast(layout)}


def to_signed(value: int, width: int) -> int:
    """A ``width``-bit two's complement field value as a Python integer."""
    return value - (1 << width) if value >> (width - 1) & 1 else value
