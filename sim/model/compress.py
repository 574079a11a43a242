"""Golden model of top-k link compression with error feedback (pure numpy, bit-exact).

Each rank keeps a *residual* (FP32, same length as the gradient vector, zero at the start).
Per all-reduce, rank ``r``:

1. ``acc = grad + residual`` (FP32 adds, round to nearest even, NaN canonicalised to
   ``0x7FC00000`` as :class:`hdl.fp32.add.FP32Add`);
2. cuts ``acc`` into segments of ``seg`` words (the last may be shorter) and in each segment
   selects the ``k`` words of largest magnitude (all of a segment shorter than ``k``);
   **tie-breaking**: magnitudes are compared as the unsigned integers ``bits & 0x7FFFFFFF``
   (what an integer comparator does: NaN above infinity above every finite value, ``-0`` equal
   to ``+0``), equal magnitudes go to the lower index;
3. sends the selected words as ``(index, value)`` pairs: ``index_bits = ceil(log2(seg))``
   bits (the index inside the segment) plus 32 value bits;
4. keeps ``residual = acc`` with the sent words replaced by ``+0``. So at every index exactly
   one of ``sent`` (dense, ``+0`` where nothing is sent) and ``residual`` holds ``acc``'s word
   and the other is ``+0``, and the FP32 sum ``sent + residual == acc`` bit for bit except
   where ``acc`` is ``-0`` and not sent (``-0 + +0 = +0`` under round to nearest); a NaN
   ``acc`` is the canonical NaN and stays it.

:func:`topk_allreduce` then delivers every rank's pairs to every other rank (an all-gather
around the ring: each message crosses ``N - 1`` links) and every rank sums the ``N`` sparse
vectors densely in rank order, ``((s_0 + s_1) + s_2) + ...`` (FP32), so all ranks hold the
same bits. Bytes on the links are counted per link (:func:`topk_link_bits`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdl.config import check_int

from .collective import add_f32

__all__ = ["TopK", "topk_select", "TopKState", "topk_allreduce", "topk_link_bits"]


@dataclass(frozen=True)
class TopK:
    """Top-k compression parameters.

    Parameters
    ----------
    seg : int
        Words per segment (>= 1).
    k : int
        Words sent per segment, 1..``seg``.
    """

    seg: int = 256
    k: int = 16

    def __post_init__(self):
        check_int("TopK", "seg", self.seg, lo=1)
        check_int("TopK", "k", self.k, lo=1, hi=self.seg)

    @property
    def index_bits(self) -> int:
        """Bits of an index inside a segment: ``ceil(log2(seg))`` (0 for ``seg = 1``)."""
        return (self.seg - 1).bit_length()

    @property
    def pair_bits(self) -> int:
        """Bits of one ``(index, value)`` pair."""
        return self.index_bits + 32


def topk_select(words: np.ndarray, topk: TopK) -> np.ndarray:
    """Boolean mask of the sent words of ``words`` (uint32 FP32 bit patterns): per segment the
    ``k`` largest magnitudes, ties to the lower index (module docstring)."""
    if not isinstance(topk, TopK):
        raise TypeError(f"topk must be a TopK, not {type(topk).__name__}")
    words = np.asarray(words, np.uint32)
    mag = (words & np.uint32(0x7FFFFFFF)).astype(np.int64)
    mask = np.zeros(len(words), bool)
    for s0 in range(0, len(words), topk.seg):
        m = mag[s0:s0 + topk.seg]
        # stable sort on -magnitude: equal magnitudes keep ascending index order
        order = np.argsort(-m, kind="stable")[:topk.k]
        mask[s0 + order] = True
    return mask


class TopKState:
    """One rank's error-feedback residual.

    Parameters
    ----------
    length : int
        Words of the gradient vector.
    topk : TopK
    """

    def __init__(self, length: int, topk: TopK):
        check_int("TopKState", "length", length, lo=1)
        if not isinstance(topk, TopK):
            raise TypeError(f"topk must be a TopK, not {type(topk).__name__}")
        self.topk = topk
        self.residual = np.zeros(length, np.uint32)

    def compress(self, grad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, values)`` (global indices ascending, uint32 values) sent for ``grad``
        (uint32 bit patterns); updates the residual."""
        grad = np.asarray(grad, np.uint32)
        if grad.shape != self.residual.shape:
            raise ValueError(f"grad must have shape {self.residual.shape}, not {grad.shape}")
        acc = add_f32(grad, self.residual)
        mask = topk_select(acc, self.topk)
        idx = np.flatnonzero(mask)
        self.residual = np.where(mask, np.uint32(0), acc).astype(np.uint32)
        return idx, acc[idx]


def topk_link_bits(pairs: list[int], topk: TopK) -> list[int]:
    """Bits on each link of one :func:`topk_allreduce` (link ``r`` leaves rank ``r``): it
    carries the messages of ranks ``r, r - 1, ..., r - N + 2`` (``pairs[q]`` pairs each)."""
    N = len(pairs)
    return [sum(pairs[(r - j) % N] for j in range(N - 1)) * topk.pair_bits for r in range(N)]


def topk_allreduce(grads, states: list[TopKState]) -> tuple[list[np.ndarray], list[int]]:
    """Top-k all-reduce of ``grads`` (one uint32 vector per rank) with each rank's
    :class:`TopKState`: every rank's result (all equal: the rank-order FP32 sum of the sent
    sparse vectors) and the bits on each link (:func:`topk_link_bits`)."""
    N = len(grads)
    if N < 2 or len(states) != N:
        raise ValueError(f"topk_allreduce needs >= 2 ranks and one state per rank, not "
                         f"{N} gradients and {len(states)} states")
    length = len(states[0].residual)
    total = None
    pairs = []
    for g, st in zip(grads, states):
        idx, val = st.compress(g)
        pairs.append(len(idx))
        dense = np.zeros(length, np.uint32)
        dense[idx] = val
        total = dense if total is None else add_f32(total, dense)
    return [total.copy() for _ in range(N)], topk_link_bits(pairs, states[0].topk)
