"""Elementwise FP32 stream operations: bias add, ReLU, ReLU derivative, scaling.

Golden model: :func:`sim.model.grad.elementwise` (bit-exact).
"""
from __future__ import annotations

import operator
from functools import reduce

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..fp32.config import FP32Config
from ..fp32.divsqrt_config import FP32DivSqrtConfig
from ..lib.dataflow import Dataflow, check_units, credit_fifo, unit_members, unit_ports
from ..lib.mustuse import used_if_rejected
from ..lib.fp32bits import gt_zero, is_nan

__all__ = ["Elementwise", "EW_IN_LAYOUT", "EW_OUT_LAYOUT", "EW_ADD", "EW_RELU", "EW_RELU_GRAD",
           "EW_SCALE", "EW_ADD_RELU"]

EW_ADD, EW_RELU, EW_RELU_GRAD, EW_SCALE, EW_ADD_RELU = range(5)
EW_IN_LAYOUT = data.StructLayout({"a": 32, "b": 32})
EW_OUT_LAYOUT = data.StructLayout({"r": 32})


def _relu(x):
    return Mux(gt_zero(x) | is_nan(x), x, 0)


class Elementwise(wiring.Component):
    """One FP32 elementwise operation per cycle, selected by ``op``.

    ``ADD: a + b`` (bias add: ``b`` is the column's bias); ``RELU: relu(a)``;
    ``RELU_GRAD: a if b > 0 else +0`` (``a = dY``, ``b`` = stored forward output, the mask);
    ``SCALE: a * scale``; ``ADD_RELU: relu(a + b)``. ``relu(x) = x if x > 0 or NaN else +0``.
    RNE, exact subnormals (the FP32 add/mul units).

    Parameters
    ----------
    fp32_config : FP32Config
    units : tuple of str
        Kinds of the operations that use units outside the component, in the order the
        datapath builds them (:class:`~hdl.lib.dataflow.UnitPort`; default none): each adds
        a ``unit_<kind><n>`` member. The vector unit of the FPGA build shares them
        (docs/vector.md).

    Attributes
    ----------
    latency : int
        ``max(add latency, mul latency)`` cycles from input to output FIFO (+1 through the FIFO
        when the output is not stalled).

    Members
    -------
    i : In(stream.Signature(EW_IN_LAYOUT))
        Operands ``a``, ``b`` (FP32).
    o : Out(stream.Signature(EW_OUT_LAYOUT))
        Result ``r`` (FP32), in order; backpressure stalls ``i`` through credits.
    op : In(3)
        Operation (constant while elements are in flight; decoded into a register, so it is
        read a cycle before a result leaves).
    scale : In(32)
        FP32 factor of ``SCALE``.
    """

    def __init__(self, *, fp32_config: FP32Config | None = None, units: tuple = ()):
        self.fp32_config = fp32_config or FP32Config()
        with used_if_rejected(self):
            self.units = check_units("Elementwise", units, {"add": 1, "mul": 1})
        # an operation on a unit outside takes one cycle more (its operand register)
        self.latency = max(self.fp32_config.latency("fp32_add") + ("add" in self.units),
                           self.fp32_config.latency("fp32_mul") + ("mul" in self.units))
        super().__init__({
            "i": In(stream.Signature(EW_IN_LAYOUT)),
            "o": Out(stream.Signature(EW_OUT_LAYOUT)),
            "op": In(3),
            "scale": In(32),
            **unit_members(self.units),
        })

    def elaborate(self, platform):
        m = Module()
        accept = Signal(name="accept")
        df = Dataflow(m, accept, fp32_config=self.fp32_config,
                      divsqrt_config=FP32DivSqrtConfig(), prefix="ew",
                      external=unit_ports(self, self.units))
        a = df.input(self.i.payload.a, "a")
        b = df.input(self.i.payload.b, "b")
        s = df.add(a, b, name="sum")
        p = df.mul(a, df.const(self.scale, "scale"), name="prod")
        t = self.latency
        # The operation decoded into a registered one-hot select (``op`` changes only with
        # the pipeline empty, and a result leaves t >= 1 cycles after its input), so the op
        # decode is not ahead of the output select into the FIFO's write data (13.45 ns
        # estimated, 12.40 routed into the FIFO storage in the S = 4 FPGA core at 56dc8c9).
        # (Taking relu(a) and the ReLU derivative at the input instead of the output, tried at
        # 90c4e89, moved 64 end points at 12 ns to the input side, behind the line readers'
        # FIFOs, at 5204923: the ReLU terms stay at the output.)
        assert t >= 1
        av, bv, sv, pv = (df.at(n, t) for n in (a, b, s, p))
        ops = (EW_ADD, EW_RELU, EW_RELU_GRAD, EW_SCALE, EW_ADD_RELU)
        sel = {k: Signal(name=f"op_is_{k}") for k in ops}
        m.d.sync += [sel[k].eq(self.op == k) for k in ops[:-1]]
        m.d.sync += sel[EW_ADD_RELU].eq(~Cat(*(self.op == k for k in ops[:-1])).any())
        # b > 0 for the ReLU derivative from a register, taken from b a cycle earlier on its
        # delay line (a plain shift register: ii = 1): the compare (a 31-bit OR and the NaN
        # test) is not ahead of the output select into the FIFO's storage (12.3 ns estimated
        # at S = 4, 12.26 routed at 9de3820)
        assert df.ii == 1
        b_pos = Signal(name="b_positive")
        m.d.sync += b_pos.eq(gt_zero(df.at(b, t - 1)))
        r = Signal(32, name="r")
        terms = ((EW_ADD, sv), (EW_RELU, _relu(av)), (EW_RELU_GRAD, Mux(b_pos, av, 0)),
                 (EW_SCALE, pv), (EW_ADD_RELU, _relu(sv)))
        m.d.comb += r.eq(reduce(operator.or_, (Mux(sel[k], v, 0) for k, v in terms)))
        df.check_external_used()
        can = credit_fifo(m, "ofifo", latency=t, accept=accept, done_valid=df.valid_at(t),
                          done_data=r, o=self.o)
        m.d.comb += [self.i.ready.eq(can), accept.eq(self.i.valid & can)]
        return m
