"""Timing stages on an ``amaranth.lib.stream`` connection: a register slice (the data registered)
and a skid buffer (the ``ready`` registered)."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .mustuse import used_if_rejected

__all__ = ["StreamRegister", "StreamSkid"]


class _StreamStage(wiring.Component):
    """A stage between two streams of the same payload ``shape``: ``i`` in, ``o`` out."""

    def __init__(self, shape):
        with used_if_rejected(self):
            Shape.cast(shape)      # raises TypeError for a non-shape
        self.shape = shape
        super().__init__({"i": In(stream.Signature(shape)),
                          "o": Out(stream.Signature(shape))})


class StreamRegister(_StreamStage):
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

    def elaborate(self, platform):
        m = Module()
        valid = Signal(name="full")
        m.d.comb += [self.o.valid.eq(valid), self.i.ready.eq(~valid | self.o.ready)]
        with m.If(self.i.ready):
            m.d.sync += valid.eq(self.i.valid)
            with m.If(self.i.valid):
                m.d.sync += self.o.payload.eq(self.i.payload)
        return m


class StreamSkid(_StreamStage):
    """A skid buffer on a stream: ``i.ready`` comes from a flip-flop, so whatever logic
    computes the consumer's ``o.ready`` ends at this buffer instead of continuing into the
    producer (a pipeline's stall enable, say). The forward path stays combinational.

    ``i.ready`` is high while the one-word buffer is empty. A word offered on ``i`` and
    refused by ``o`` is taken into the buffer; while the buffer holds a word, ``o`` offers it
    and ``i`` waits. Full throughput while ``o.ready`` stays high. Every word leaves once, in
    order; ``o`` obeys the stream rules when ``i`` does (a word offered and refused is offered
    again, unchanged, from the buffer).

    Latency: 0 cycles (a word offered on ``i`` while the buffer is empty is offered on ``o`` in
    the same cycle). After ``o`` refused a word, ``i.ready`` stays low until the cycle after
    the buffered word leaves: a producer whose next word is first offered in the cycle the
    buffered word leaves waits a cycle longer than on a direct connection (the price of the
    registered ``ready``).

    Parameters
    ----------
    shape : shape-like
        The payload's shape (a ``data`` layout is kept).

    Members
    -------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    """

    latency = 0

    def elaborate(self, platform):
        m = Module()
        full = Signal(name="skid_full")
        word = Signal(self.shape, name="skid_word")
        m.d.comb += [
            self.i.ready.eq(~full),
            self.o.valid.eq(full | self.i.valid),
            self.o.payload.eq(Mux(full, word, self.i.payload)),
        ]
        with m.If(full):
            with m.If(self.o.ready):
                m.d.sync += full.eq(0)
        with m.Elif(self.i.valid & ~self.o.ready):
            m.d.sync += full.eq(1)
        # while empty the buffer takes ``i.payload`` every cycle (unread until it is full), so
        # its enable is ``~full``, a register: ``o.ready`` reaches only ``full``, not the
        # payload's flip-flops (a quantizer's output skid, 90 end points at 11.2 ns routed in
        # the S = 8 matmul engine at 28075d0: the array's accept into their enables)
        with m.If(~full):
            m.d.sync += word.eq(self.i.payload)
        return m
