"""Golden model of the collective engine's ring all-reduce (pure numpy, bit-exact).

Mirrors :mod:`hdl.multi.collective`: the same :class:`~hdl.multi.config.CollectiveConfig`,
the same segments (:func:`segments`), the same schedule (step ``t`` sends segment
``(r - t) mod N`` and receives ``(r - t - 1) mod N``) and the same FP32 additions
(``received + local``, numpy ``float32``, NaN canonicalised to ``0x7FC00000`` as
:class:`hdl.fp32.add.FP32Add` produces), so every rank's result is predicted bit for bit,
and :func:`validate` gives the status the engine answers to a command.

Summation order: segment ``k`` is reduced as ``((x_k + x_{k+1}) + x_{k+2}) + ... + x_{k-1}``
(ranks mod ``N``); :func:`sum_order` lists it.
"""
from __future__ import annotations

import numpy as np

from hdl.multi.config import CollectiveConfig, CollOp, CollStatus

from .fp32 import bits_to_f32, canon

__all__ = ["segments", "schedule", "sum_order", "validate", "ring_allreduce",
           "CollectiveModel"]


def _check_config(config) -> CollectiveConfig:
    if not isinstance(config, CollectiveConfig):
        raise TypeError(f"config must be a CollectiveConfig, not {type(config).__name__}")
    return config


def segments(length: int, seg: int, ranks: int) -> list[tuple[int, int]]:
    """``(start, count)`` of segment ``k = 0 .. ranks - 1``: ``[k*seg, min((k+1)*seg,
    length))``, empty past the end."""
    out = []
    for k in range(ranks):
        start = k * seg
        out.append((start, max(0, min(seg, length - start))))
    return out


def schedule(rank: int, ranks: int) -> list[tuple[int, int, bool]]:
    """``(send segment, receive segment, reduce)`` of every step of rank ``rank``: ``2N - 2``
    steps, the first ``N - 1`` reduce-scatter (``reduce``), then all-gather."""
    return [((rank - t) % ranks, (rank - t - 1) % ranks, t < ranks - 1)
            for t in range(2 * (ranks - 1))]


def sum_order(segment: int, ranks: int) -> list[int]:
    """The ranks whose contributions segment ``segment`` sums, left to right."""
    return [(segment + j) % ranks for j in range(ranks)]


def validate(config: CollectiveConfig, *, op: int, base: int, length: int, seg: int,
             timeout: int) -> int:
    """The status the engine answers before running (``OK`` when it runs)."""
    cfg = _check_config(config)
    if op != CollOp.ALLREDUCE:
        return CollStatus.BAD_OP
    if length == 0 or base + length > cfg.depth:
        return CollStatus.BAD_LEN
    if seg == 0 or seg * cfg.ranks < length:
        return CollStatus.BAD_SEG
    if timeout == 0:
        return CollStatus.BAD_TIMEOUT
    return CollStatus.OK


def _add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """FP32 ``a + b`` on bit patterns, as the hardware adder (NaN -> the canonical NaN)."""
    with np.errstate(all="ignore"):
        r = (bits_to_f32(a) + bits_to_f32(b)).astype(np.float32)
    return canon(r.view(np.uint32))


def ring_allreduce(vectors, seg: int) -> list[np.ndarray]:
    """Run the ring all-reduce on ``vectors`` (one ``uint32`` array of bit patterns per rank,
    all the same length) exactly as the engines do, step by step; return every rank's vector
    afterwards (all equal)."""
    ranks = len(vectors)
    if ranks < 2:
        raise ValueError(f"ring_allreduce needs at least 2 ranks, not {ranks}")
    mem = [np.asarray(v, dtype=np.uint32).copy() for v in vectors]
    length = len(mem[0])
    if any(len(v) != length for v in mem):
        raise ValueError("every rank's vector must have the same length")
    if seg < 1 or seg * ranks < length:
        raise ValueError(f"seg must be >= 1 and seg * ranks >= length, not {seg!r}")
    segs = segments(length, seg, ranks)
    plans = [schedule(r, ranks) for r in range(ranks)]
    for t in range(2 * (ranks - 1)):
        # every rank sends before anyone writes: a step's sends read the previous step's state
        sent = []
        for r in range(ranks):
            s0, n = segs[plans[r][t][0]]
            sent.append(mem[r][s0:s0 + n].copy())
        for r in range(ranks):
            _, recv, reduce = plans[r][t]
            s0, n = segs[recv]
            incoming = sent[(r - 1) % ranks]
            assert len(incoming) == n
            mem[r][s0:s0 + n] = _add(incoming, mem[r][s0:s0 + n]) if reduce else incoming
    return mem


class CollectiveModel:
    """Golden model of ``N`` engines with their memories (:class:`hdl.multi.ring.CollectiveRing`):
    ``allreduce(...)`` answers the status the engines give and updates the memories as they
    do (a ``BAD_*`` command changes nothing).

    Parameters
    ----------
    config : CollectiveConfig
    """

    def __init__(self, config: CollectiveConfig | None = None):
        self.config = _check_config(config or CollectiveConfig())
        self.mem = [np.zeros(self.config.depth, dtype=np.uint32)
                    for _ in range(self.config.ranks)]

    def allreduce(self, *, base: int, length: int, seg: int, timeout: int = 1000,
                  op: int = CollOp.ALLREDUCE) -> int:
        status = validate(self.config, op=op, base=base, length=length, seg=seg,
                          timeout=timeout)
        if status == CollStatus.OK:
            out = ring_allreduce([m[base:base + length] for m in self.mem], seg)
            for m, v in zip(self.mem, out):
                m[base:base + length] = v
        return status
