"""Softmax + cross-entropy gradient per row, with the max subtraction.

For each row ``z[0..C-1]`` with label ``y`` (golden model :func:`sim.grad.softmax_xent`)::

    mx   = max_j z_j                 (ordered bit keys, -0 < +0; NaN if any z is NaN)
    e_j  = exp(z_j - mx)             (FP32 sub, then the hardware exp approximation)
    s    = lane_sum(e)               (:class:`~hdl.grad.lanesum.LaneSum` order)
    g_j  = (e_j / s - [j == y]) * gscale     (gscale = loss scale / batch size, a register)
    zt   = z_y - mx

The loss value is ``log(s) - zt``: the block outputs ``s`` and ``zt`` with the row's last
gradient and the host takes one float64 log per row (no FP32 log unit; see
docs/datapaths.md). Phases per row, sharing one row buffer: LOAD (C cycles, stores z, max),
EXP (C cycles + latency; stores e, sums), OUT (C cycles + latency, streams g).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..fp32.config import FP32Config
from ..fp32.divsqrt_config import FP32DivSqrtConfig
from ..optim.dataflow import Dataflow, credit_fifo
from .config import GradConfig
from .lanesum import LaneSum

__all__ = ["SoftmaxXent", "SX_IN_LAYOUT", "SX_OUT_LAYOUT"]

SX_IN_LAYOUT = data.StructLayout({"x": 32, "label": 16, "last": 1})
SX_OUT_LAYOUT = data.StructLayout({"r": 32, "last": 1, "sum": 32, "zt": 32})
ONE = 0x3F800000
QNAN = 0x7FC00000


def _key(x):
    """Unsigned key ordering FP32 bit patterns like their values (-0 < +0)."""
    return Mux(x[31], ~x, x | 0x80000000)


class SoftmaxXent(wiring.Component):
    """Softmax cross-entropy gradient and loss terms, one row at a time.

    Parameters
    ----------
    config : GradConfig
        ``max_classes`` (row buffer depth) and ``lanes`` (denominator summation order).
    fp32_config, divsqrt_config : unit configurations.

    Attributes
    ----------
    latency : int
        Cycles from reading ``e_j`` to ``g_j`` entering the output FIFO (OUT phase pipeline).

    Members
    -------
    i : In(stream.Signature(SX_IN_LAYOUT))
        Logits ``x`` (FP32) of one row, ``last`` on the row's final class; ``label`` is taken
        from the row's first element. Rows of 2..max_classes classes.
    o : Out(stream.Signature(SX_OUT_LAYOUT))
        Gradient ``r`` (FP32) per class in order; on ``last`` also ``sum`` = s and
        ``zt`` = z_y - max (FP32) of the row.
    gscale : In(32)
        FP32 factor applied to the gradient (``1/B``, or ``2**k / B`` with loss scaling).
    """

    def __init__(self, *, config: GradConfig | None = None,
                 fp32_config: FP32Config | None = None,
                 divsqrt_config: FP32DivSqrtConfig | None = None):
        self.config = config or GradConfig()
        self.fp32_config = fp32_config or FP32Config()
        self.divsqrt_config = divsqrt_config or FP32DivSqrtConfig()
        la = self.fp32_config.latency("fp32_add")
        if la >= self.config.lanes:
            raise ValueError(f"GradConfig.lanes ({self.config.lanes}) must exceed the FP32 adder "
                             f"latency ({la})")
        self.latency = (1 + self.divsqrt_config.div_latency + la
                        + self.fp32_config.latency("fp32_mul"))
        super().__init__({
            "i": In(stream.Signature(SX_IN_LAYOUT)),
            "o": Out(stream.Signature(SX_OUT_LAYOUT)),
            "gscale": In(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        fc, dc = self.fp32_config, self.divsqrt_config
        m.submodules.buf = mem = Memory(shape=32, depth=cfg.max_classes, init=[])
        rp = mem.read_port()
        wp = mem.write_port()
        m.submodules.sum = ls = LaneSum(config=cfg, fp32_config=fc)

        cb = range(cfg.max_classes + 1)
        n = Signal(cb, name="ncols")
        j = Signal(cb, name="col")
        label = Signal(16, name="label")
        mx = Signal(32, name="max")
        any_nan = Signal(name="any_nan")
        zy = Signal(32, name="z_label")
        s = Signal(32, name="s")
        zt = Signal(32, name="zt")
        mx_eff = Signal(32, name="max_eff")
        m.d.comb += mx_eff.eq(Mux(any_nan, QNAN, mx))

        # EXP phase pipeline: read z_j -> (z_j - mx) -> exp -> write e_j, LaneSum.
        ev = Signal(name="exp_v")
        ecol = Signal(cb, name="exp_col")
        elast = Signal(name="exp_last")
        m.d.sync += ev.eq(0)
        edf = Dataflow(m, ev, fp32_config=fc, divsqrt_config=dc, prefix="sx_exp")
        d = edf.sub(edf.input(rp.data, "z"), edf.const(mx_eff, "max"), name="z_minus_max")
        e = edf.exp(d, name="exp")
        dzt = edf.sub(edf.const(zy, "zy"), edf.const(mx_eff, "max2"), name="zt")
        te = e.t
        e_valid = edf.valid_at(te)
        m.d.comb += [
            ls.i.valid.eq(e_valid), ls.i.payload.x.eq(edf.at(e, te)),
            ls.i.payload.last.eq(edf.at(edf.input(elast, "last"), te)),
        ]
        e_waddr = edf.at(edf.input(ecol, "col"), te)
        zt_first = edf.at(edf.input(ecol == 0, "first"), dzt.t)
        with m.If(edf.valid_at(dzt.t) & zt_first):
            m.d.sync += zt.eq(edf.at(dzt, dzt.t))

        # OUT phase pipeline: read e_j -> e_j / s -> - onehot -> * gscale -> FIFO.
        ov = Signal(name="out_v")
        ocol = Signal(cb, name="out_col")
        olast = Signal(name="out_last")
        m.d.sync += ov.eq(0)
        odf = Dataflow(m, ov, fp32_config=fc, divsqrt_config=dc, prefix="sx_out")
        p = odf.div(odf.input(rp.data, "e"), odf.const(s, "s"), name="p")
        oh = odf.input(Mux(ocol == label, ONE, 0), "onehot")
        g = odf.sub(p, oh, name="p_minus_onehot")
        r = odf.mul(g, odf.const(self.gscale, "gscale"), name="grad")
        tr = r.t
        out_accept = Signal(name="out_accept")
        can = credit_fifo(m, "ofifo", latency=tr + 1, accept=out_accept,
                          done_valid=odf.valid_at(tr),
                          done_data=Cat(odf.at(r, tr), odf.at(odf.input(olast, "last"), tr),
                                        odf.at(odf.input(s, "s_row"), tr),
                                        odf.at(odf.input(zt, "zt_row"), tr)),
                          o=self.o)

        x = self.i.payload.x
        with m.FSM(name="sx"):
            with m.State("LOAD"):
                m.d.comb += [self.i.ready.eq(1), wp.addr.eq(j), wp.data.eq(x)]
                with m.If(self.i.valid):
                    m.d.comb += wp.en.eq(1)
                    m.d.sync += j.eq(j + 1)
                    first = j == 0
                    lab = Mux(first, self.i.payload.label, label)
                    with m.If(first):
                        m.d.sync += [label.eq(self.i.payload.label), mx.eq(x),
                                     any_nan.eq(0)]
                    with m.Elif(_key(x) > _key(mx)):
                        m.d.sync += mx.eq(x)
                    with m.If((x[23:31] == 0xFF) & (x[0:23] != 0)):
                        m.d.sync += any_nan.eq(1)
                    with m.If(j == lab):
                        m.d.sync += zy.eq(x)
                    with m.If(self.i.payload.last):
                        m.d.sync += [n.eq(j + 1), j.eq(0)]
                        m.next = "EXP"
            with m.State("EXP"):
                m.d.comb += rp.addr.eq(j)
                m.d.sync += [ev.eq(1), ecol.eq(j), elast.eq(j == n - 1), j.eq(j + 1)]
                with m.If(j == n - 1):
                    m.next = "SUM"
            with m.State("SUM"):
                m.d.comb += ls.o.ready.eq(1)
                with m.If(ls.o.valid):
                    m.d.sync += [s.eq(ls.o.payload.r), j.eq(0)]
                    m.next = "OUT"
            with m.State("OUT"):
                m.d.comb += rp.addr.eq(j)
                with m.If(can):
                    m.d.comb += out_accept.eq(1)
                    m.d.sync += [ov.eq(1), ocol.eq(j), olast.eq(j == n - 1), j.eq(j + 1)]
                    with m.If(j == n - 1):
                        m.d.sync += j.eq(0)
                        m.next = "LOAD"

        # e_j written back over z_j (EXP phase only; LOAD drives the port otherwise).
        with m.If(e_valid):
            m.d.comb += [wp.addr.eq(e_waddr), wp.data.eq(edf.at(e, te)), wp.en.eq(1)]
        return m
