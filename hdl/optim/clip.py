"""Gradient-clipping factor from the global sum of squares.

``factor = q if q < 1 else 1`` with ``q = max_norm / (sqrt(sumsq) + eps)``, each operation one
FP32 RNE operation in this order (golden model: :meth:`sim.model.optim.OptimEngineModel.step`).
The optimizer engine computes ``q`` on its update pipeline's square root, adder and divider
(:class:`~hdl.optim.datapath.OptimDatapath`, ``alt`` pass); :func:`clip_factor` is the compare
behind it. The compare ``q < 1`` is on bit patterns: true for every non-NaN negative value or
zero, and for a positive ``q`` exactly when ``bits(q) < 0x3F800000``; false for NaN (factor 1).
"""
from __future__ import annotations

from amaranth.hdl import Mux, Signal

from ..lib.fp32bits import is_nan

__all__ = ["clip_factor", "ONE_F32"]

ONE_F32 = 0x3F800000


def clip_factor(m, q):
    """``(factor, clipped)``: combinational signals of the factor for the quotient ``q``
    (FP32 bits) and whether it is below 1.

    Parameters
    ----------
    m : Module
        Module the compare logic is added to.
    q : Value
        ``max_norm / (sqrt(sumsq) + eps)`` (32 bits).
    """
    lt = Signal(name="q_lt_one")
    factor = Signal(32, name="clip_q_factor")
    m.d.comb += [lt.eq(Mux(q[31], ~is_nan(q), q < ONE_F32)),
                 factor.eq(Mux(lt, q, ONE_F32))]
    return factor, lt
