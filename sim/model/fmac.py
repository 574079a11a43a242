"""Golden model of the chunked fMAC (:mod:`hdl.fmac`), pure Python integers and numpy.

Mirrors the hardware's names and numerics bit-exactly:

* :func:`chunks` - an ``m``-bit magnitude as ``m/2`` 2-bit chunks, least significant first.
* :func:`chunk_product` - the product as the shifted sum of 2b x 2b chunk products.
* :func:`pair_schedule` - which chunk pairs ``(i, j)`` each cycle's lanes multiply
  (pair ``p = i*(m_b/2) + j``, lane ``l`` of cycle ``s`` takes ``p = s*lanes + l``).
* :func:`product_cycles` - ``ceil((m_a/2)*(m_b/2)/lanes)``, the beat of one product.
* :func:`saturating_add` / :func:`dot` - the ``acc_bits`` saturating accumulator with a sticky
  overflow flag, and whole dot products with their cycle count.

No Amaranth import: usable from cocotb testbenches and software.
"""
from __future__ import annotations

import numpy as np

__all__ = ["WIDTHS", "chunks", "chunk_product", "pair_schedule", "product_cycles",
           "signed_product", "acc_limits", "saturating_add", "dot", "dot_cycles",
           "fmac_stream_cycles"]

#: mantissa widths an fMAC operand can have
WIDTHS = (2, 4, 6, 8)


def _check_width(name: str, m) -> int:
    if isinstance(m, (bool, np.bool_)) or not isinstance(m, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(m).__name__} {m!r}")
    m = int(m)
    if m not in WIDTHS:
        raise ValueError(f"{name} must be one of {WIDTHS}, not {m!r}")
    return m


def chunks(mag: int, m: int) -> list[int]:
    """The ``m/2`` 2-bit chunks of magnitude ``mag`` (``0 <= mag < 2**m``), LSB chunk first."""
    m = _check_width("m", m)
    mag = int(mag)
    if not 0 <= mag < (1 << m):
        raise ValueError(f"mag must be in [0, 2**{m}), not {mag!r}")
    return [(mag >> (2 * k)) & 3 for k in range(m // 2)]


def chunk_product(a_mag: int, b_mag: int, m_a: int, m_b: int) -> int:
    """``a_mag * b_mag`` computed as ``sum(a_i * b_j << 2*(i+j))`` over all chunk pairs."""
    ca, cb = chunks(a_mag, m_a), chunks(b_mag, m_b)
    total = 0
    for i, x in enumerate(ca):
        for j, y in enumerate(cb):
            cp = x * y
            assert 0 <= cp < 16  # a 2b x 2b chunk product is 4 bits
            total += cp << (2 * (i + j))
    return total


def product_cycles(m_a: int, m_b: int, lanes: int) -> int:
    """Cycles one ``m_a x m_b`` product takes on ``lanes`` chunk multipliers."""
    m_a, m_b = _check_width("m_a", m_a), _check_width("m_b", m_b)
    if isinstance(lanes, bool) or not isinstance(lanes, (int, np.integer)) or lanes < 1:
        raise ValueError(f"lanes must be a positive int, not {lanes!r}")
    pairs = (m_a // 2) * (m_b // 2)
    return -(-pairs // int(lanes))


def pair_schedule(m_a: int, m_b: int, lanes: int) -> list[list[tuple[int, int]]]:
    """Per cycle, the chunk pairs ``(i, j)`` its lanes multiply (the hardware's order)."""
    na, nb = _check_width("m_a", m_a) // 2, _check_width("m_b", m_b) // 2
    steps = []
    for s in range(product_cycles(m_a, m_b, lanes)):
        ps = [s * lanes + lane for lane in range(lanes)]
        steps.append([(p // nb, p % nb) for p in ps if p < na * nb])
    return steps


def signed_product(a_sign: int, a_mag: int, b_sign: int, b_mag: int, m_a: int, m_b: int,
                   lanes: int = 1) -> int:
    """The fMAC's signed product, summed in :func:`pair_schedule` order (equals ``+-a*b``)."""
    ca, cb = chunks(a_mag, m_a), chunks(b_mag, m_b)
    psum = 0
    for step in pair_schedule(m_a, m_b, lanes):
        for i, j in step:
            psum += (ca[i] * cb[j]) << (2 * (i + j))
    return -psum if (int(a_sign) ^ int(b_sign)) else psum


def acc_limits(acc_bits: int) -> tuple[int, int]:
    return -(1 << (acc_bits - 1)), (1 << (acc_bits - 1)) - 1


def saturating_add(acc: int, overflow: bool, product: int, accumulate: bool,
                   acc_bits: int) -> tuple[int, bool]:
    """One accumulator update: ``accumulate`` 0 replaces (and clears the flag), 1 adds.

    A sum outside the ``acc_bits`` two's complement range is clamped to the nearest limit and
    sets the sticky ``overflow`` flag.
    """
    lo, hi = acc_limits(acc_bits)
    total = (acc if accumulate else 0) + product
    ovf = bool(overflow) and bool(accumulate)
    if total > hi:
        return hi, True
    if total < lo:
        return lo, True
    return total, ovf


def _broadcast(n, x, name):
    arr = np.broadcast_to(np.asarray(x), (n,))
    return [int(v) for v in arr]


def dot_cycles(m_a, m_b, lanes: int, n: int | None = None) -> int:
    """Sum of :func:`product_cycles` over a dot product (widths scalar or per element)."""
    if n is None:
        n = max(np.size(m_a), np.size(m_b))
    return sum(product_cycles(x, y, lanes)
               for x, y in zip(_broadcast(n, m_a, "m_a"), _broadcast(n, m_b, "m_b")))


def dot(a_sign, a_mag, b_sign, b_mag, m_a, m_b, lanes: int, acc_bits: int):
    """Exact saturating dot product as the fMAC computes it.

    Parameters
    ----------
    a_sign, a_mag, b_sign, b_mag : array_like of int
        Operand signs (0/1) and unsigned magnitudes, one per element (length ``n >= 1``).
    m_a, m_b : int or array_like of int
        Mantissa widths, scalar (per dot product) or per element.
    lanes, acc_bits : int
        As :class:`hdl.config.FMACConfig`.

    Returns
    -------
    (value, overflow, cycles)
        The saturated accumulator, the sticky overflow flag, and the number of cycles the
        products occupy the multiplier (``sum(product_cycles)``; with operands supplied back
        to back this is the distance in cycles from the first product's start to the last
        product's ``done``).
    """
    a_mag = [int(v) for v in np.ravel(a_mag)]
    n = len(a_mag)
    if n < 1:
        raise ValueError("a dot product needs at least one element")
    a_sign = _broadcast(n, a_sign, "a_sign")
    b_sign = _broadcast(n, b_sign, "b_sign")
    b_mag = _broadcast(n, b_mag, "b_mag")
    m_a = _broadcast(n, m_a, "m_a")
    m_b = _broadcast(n, m_b, "m_b")
    acc, ovf, cycles = 0, False, 0
    for k in range(n):
        p = signed_product(a_sign[k], a_mag[k], b_sign[k], b_mag[k], m_a[k], m_b[k], lanes)
        acc, ovf = saturating_add(acc, ovf, p, k > 0, acc_bits)
        cycles += product_cycles(m_a[k], m_b[k], lanes)
    return acc, ovf, cycles


def fmac_stream_cycles(widths, lanes: int, latency: int) -> int:
    """Cycles from the first operand's acceptance to the result on :class:`hdl.fmac.FMAC`'s
    output when operands arrive back to back and the output is ready: ``sum of beats +
    latency`` (``widths`` is a list of ``(m_a, m_b)``)."""
    return sum(product_cycles(x, y, lanes) for x, y in widths) + latency
