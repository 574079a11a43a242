"""Golden model of the array-edge converter (:class:`hdl.edge_converter.EdgeConverter`).

``edge_to_fp32(value, exp)`` is the IEEE 754 binary32 bit pattern of ``value * 2**exp``,
round-to-nearest-even, exact subnormals, ±Inf on overflow, ``+0.0`` for ``value == 0`` (a
non-zero value too small for the smallest subnormal rounds to a zero with its sign). Pure
Python integers through :func:`sim.fp32_round.round_to_fp32`; no floating point, no Amaranth.
"""
from __future__ import annotations

import numpy as np

from sim.fp32_round import round_to_fp32

__all__ = ["edge_to_fp32", "edge_to_fp32_array", "check_edge_input"]


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
