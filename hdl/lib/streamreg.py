"""A register slice on an ``amaranth.lib.stream`` connection (a pipeline register for timing)."""
from __future__ import annotations

from amaranth.hdl import Module, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StreamRegister"]


class StreamRegister(wiring.Component):
    """One register stage on a stream: ``o.payload`` and ``o.valid`` come from flip-flops, so
    whatever logic computes ``i.payload`` ends at this register instead of continuing into the
    consumer's logic.

    A full-throughput slice: it takes a transfer when it is empty or when its content leaves in
    the same cycle (``i.ready = ~o.valid | o.ready``; the backward ``ready`` stays
    combinational, which is fine when the consumer's ``ready`` comes from registers). It obeys
    the stream rules: ``o.valid`` depends on no ``ready``, and ``o.payload`` holds while
    ``o.valid & ~o.ready``.

    Latency: 1 cycle (a transfer on ``i`` is offered on ``o`` in the next cycle).

    Parameters
    ----------
    shape : shape-like
        The payload's shape (a ``data`` layout is kept: ``o.payload`` is a view).

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    """

    latency = 1

    def __init__(self, shape):
        Shape.cast(shape)          # raises TypeError for a non-shape
        self.shape = shape
        super().__init__({"i": In(stream.Signature(shape)),
                          "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        valid = Signal(name="full")
        m.d.comb += [self.o.valid.eq(valid), self.i.ready.eq(~valid | self.o.ready)]
        with m.If(self.i.ready):
            m.d.sync += valid.eq(self.i.valid)
            with m.If(self.i.valid):
                m.d.sync += self.o.payload.eq(self.i.payload)
        return m
