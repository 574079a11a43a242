"""Gradient-clipping factor from the global sum of squares.

``factor = q if q < 1 else 1`` with ``q = max_norm / (sqrt(sumsq) + eps)``, each operation one
FP32 RNE operation in this order (golden model: :meth:`sim.model.optim.OptimEngineModel.step`). The
compare ``q < 1`` is on bit patterns: true for every non-NaN negative value or zero, and for a
positive ``q`` exactly when ``bits(q) < 0x3F800000``; false for NaN (factor 1).
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..fp32.config import FP32Config
from ..fp32.divsqrt_config import FP32DivSqrtConfig
from ..lib.dataflow import Dataflow
from ..lib.fp32bits import is_nan

__all__ = ["ClipFactor", "ONE_F32"]

ONE_F32 = 0x3F800000


class ClipFactor(wiring.Component):
    """One clipping factor per input (a scalar pipeline: sqrt, add, divide, compare).

    Parameters
    ----------
    fp32_config, divsqrt_config : unit configurations.

    Attributes
    ----------
    latency : int
        Cycles from an accepted ``sumsq`` to ``o.valid``.

    Members
    -------
    i : In(stream.Signature(StructLayout({"sumsq": 32})))
        Finite, non-negative FP32 sum of squares. Not ready while a factor is in flight or
        waiting to be taken.
    o : Out(stream.Signature(StructLayout({"factor": 32, "clipped": 1})))
        FP32 factor and ``clipped`` (factor < 1), held until taken.
    max_norm, eps : In(32)
        FP32 bound (> 0) and epsilon (>= 0).
    """

    def __init__(self, *, fp32_config: FP32Config | None = None,
                 divsqrt_config: FP32DivSqrtConfig | None = None):
        self.fp32_config = fp32_config or FP32Config()
        self.divsqrt_config = divsqrt_config or FP32DivSqrtConfig()
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"sumsq": 32}))),
            "o": Out(stream.Signature(data.StructLayout({"factor": 32, "clipped": 1}))),
            "max_norm": In(32),
            "eps": In(32),
        })
        self.latency = self._build(None)[0] + 1

    def _build(self, m, valid=None):
        df = Dataflow(m, valid, fp32_config=self.fp32_config,
                      divsqrt_config=self.divsqrt_config, prefix="clip")
        s = df.input(self.i.payload.sumsq if m is not None else None, "sumsq")
        norm = df.sqrt(s, name="norm")
        den = df.add(norm, df.const(self.eps, "eps"), name="norm_eps")
        q = df.div(df.const(self.max_norm, "max_norm"), den, name="ratio")
        return q.t, df, q

    def elaborate(self, platform):
        m = Module()
        accept = Signal(name="accept")
        busy = Signal(name="busy")
        m.d.comb += [self.i.ready.eq(~busy), accept.eq(self.i.valid & ~busy)]
        t, df, q = self._build(m, accept)
        qv = df.at(q, t)
        lt = Signal(name="q_lt_one")
        nan = is_nan(qv)
        m.d.comb += lt.eq(Mux(qv[31], ~nan, qv < ONE_F32))
        with m.If(accept):
            m.d.sync += busy.eq(1)
        with m.If(df.valid_at(t)):
            m.d.sync += [self.o.valid.eq(1), self.o.payload.factor.eq(Mux(lt, qv, ONE_F32)),
                         self.o.payload.clipped.eq(lt)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += [self.o.valid.eq(0), busy.eq(0)]
        return m
