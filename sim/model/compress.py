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
vectors densely in rank order starting from ``+0``, ``(((+0 + s_0) + s_1) + s_2) + ...``
(FP32), so all ranks hold the same bits. Starting from ``+0`` makes the dense sum equal to
adding only the sent words (``x + +0 == x`` for every ``x`` but ``-0``, and the running sum
is never ``-0``), which is what the hardware does (:func:`topk_ring`, :mod:`hdl.multi.topk`). Bytes on the links are counted per link (:func:`topk_link_bits`).
"""
from __future__ import annotations

import numpy as np

from hdl.config import check_int
from hdl.multi.config import TopK

from .collective import add_f32

__all__ = ["TopK", "topk_select", "topk_order", "topk_message", "topk_unpack", "TopKState",
           "topk_allreduce", "topk_link_bits", "topk_ring"]


def topk_order(words: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``min(k, len(words))`` words (uint32) of largest magnitude, in selection
    order: largest first, equal magnitudes lower index first (what
    :class:`hdl.multi.topk_select.TopKSelect` holds in its slots)."""
    mag = (np.asarray(words, np.uint32) & np.uint32(0x7FFFFFFF)).astype(np.int64)
    # stable sort on -magnitude: equal magnitudes keep ascending index order
    return np.argsort(-mag, kind="stable")[:k]


def topk_select(words: np.ndarray, topk: TopK) -> np.ndarray:
    """Boolean mask of the sent words of ``words`` (uint32 FP32 bit patterns): per segment the
    ``k`` largest magnitudes, ties to the lower index (module docstring)."""
    if not isinstance(topk, TopK):
        raise TypeError(f"topk must be a TopK, not {type(topk).__name__}")
    words = np.asarray(words, np.uint32)
    mask = np.zeros(len(words), bool)
    for s0 in range(0, len(words), topk.seg):
        mask[s0 + topk_order(words[s0:s0 + topk.seg], topk.k)] = True
    return mask


def topk_message(acc: np.ndarray, topk: TopK) -> np.ndarray:
    """The message (uint32 words, :class:`~hdl.multi.config.TopK`'s format) sending the
    selected words of ``acc``: per segment the packed index words, then the values, both in
    selection order (:func:`topk_order`)."""
    acc = np.asarray(acc, np.uint32)
    ib, pw = max(1, topk.index_bits), topk.per_word
    out = []
    for s0 in range(0, len(acc), topk.seg):
        order = topk_order(acc[s0:s0 + topk.seg], topk.k)
        for w in range(0, len(order), pw):
            out.append(sum(int(i) << (p * ib) for p, i in enumerate(order[w:w + pw])))
        out.extend(int(v) for v in acc[s0 + order])
    msg = np.array(out, np.uint32)
    assert len(msg) == topk.message_words(len(acc))
    return msg


def topk_unpack(msg: np.ndarray, length: int, topk: TopK) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, values)`` (global indices, in message order) of a message of a vector of
    ``length`` words; ``ValueError`` if ``msg`` has the wrong size."""
    msg = np.asarray(msg, np.uint32)
    if len(msg) != topk.message_words(length):
        raise ValueError(f"a message of a {length}-word vector has "
                         f"{topk.message_words(length)} words, not {len(msg)}")
    ib, pw = max(1, topk.index_bits), topk.per_word
    idx, val, pos = [], [], 0
    for s0 in range(0, length, topk.seg):
        n = min(topk.k, length - s0)
        iw = -(-n // pw)
        for j in range(n):
            idx.append(s0 + ((int(msg[pos + j // pw]) >> ((j % pw) * ib)) & ((1 << ib) - 1)))
        val.extend(msg[pos + iw:pos + iw + n])
        pos += iw + n
    return np.array(idx, np.int64), np.array(val, np.uint32)


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
    total = np.zeros(length, np.uint32)          # +0: the sum starts from +0 (module doc)
    pairs = []
    for g, st in zip(grads, states):
        idx, val = st.compress(g)
        pairs.append(len(idx))
        dense = np.zeros(length, np.uint32)
        dense[idx] = val
        total = add_f32(total, dense)
    return [total.copy() for _ in range(N)], topk_link_bits(pairs, states[0].topk)


def topk_ring(memories, *, base: int, length: int, rbase: int, gbase: int,
              topk: TopK) -> list[np.ndarray]:
    """The memories after a top-k all-reduce on the hardware ring (an ``ALLREDUCE`` with
    ``comp = CollComp.TOPK``; :mod:`hdl.multi.topk`): rank ``r``'s gradient at
    ``mem[base:+length]``, residual at ``mem[rbase:+length]``, and a gather buffer at ``gbase``
    of ``N`` messages (:meth:`TopK.message_words` each, rank ``q``'s at ``q``-th place).
    Afterwards every rank holds the rank-order sum at ``base``, its new residual at ``rbase``
    and all ``N`` messages in the buffer: the same numbers as :func:`topk_allreduce`."""
    N = len(memories)
    M = topk.message_words(length)
    out = [np.array(mem, np.uint32) for mem in memories]
    msgs = []
    for mem in out:
        acc = add_f32(mem[base:base + length], mem[rbase:rbase + length])
        mask = topk_select(acc, topk)
        mem[rbase:rbase + length] = np.where(mask, np.uint32(0), acc)
        msgs.append(topk_message(acc, topk))
    total = np.zeros(length, np.uint32)
    for msg in msgs:                  # rank order, each sent word added to the running sum
        idx, val = topk_unpack(msg, length, topk)
        total[idx] = add_f32(total[idx], val)
    for mem in out:
        mem[gbase:gbase + N * M] = np.concatenate(msgs)
        mem[base:base + length] = total
    return out
