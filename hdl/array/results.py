"""Result path of the matmul engine: array output vectors meet their descriptors (output line,
lanes, exponents, flags) and go to the output accumulator."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib.blockfifo import RegBlockFIFO
from .accum import acc_in_layout, line_ahead_signature
from .array import array_out_layout
from .config import ArrayConfig

__all__ = ["desc_layout", "ResultJoin"]


def desc_layout(config: ArrayConfig) -> data.StructLayout:
    """Descriptor of a beat's result: per-lane exponents ``exp``, the output line ``addr``,
    lanes to write ``mask``, ``first`` (add to ``+0.0``) and ``write`` (0: drop the line)."""
    return data.StructLayout({
        "exp": acc_in_layout(config)["exp"].shape, "addr": range(config.mem_depth),
        "mask": config.size, "first": 1, "write": 1})


class ResultJoin(wiring.Component):
    """A FIFO of result descriptors, joined in order with the array's output vectors (the
    head descriptor from a register: :class:`~hdl.lib.blockfifo.RegBlockFIFO`).

    Every beat that enters the array writes one descriptor and produces exactly one output
    vector, in order, so the head descriptor belongs to the array's current output.

    Parameters
    ----------
    config : ArrayConfig
    depth : int
        Descriptor FIFO entries (at least the beats that can be in the array and its output
        FIFO).

    Members
    -------
    desc : In(stream.Signature(desc_layout(config)))
        Descriptors; ``ready`` is the FIFO's room (with :attr:`write_reg`: fewer than
        ``depth`` held, a register) and does not depend on ``valid``.
    out : In(stream.Signature(array_out_layout(config)))
        The array's output vectors.
    acc : Out(stream.Signature(acc_in_layout(config)))
        To the output accumulator.
    ahead : Out(line_ahead_signature(config))
        The accumulator's next two lines: the head descriptor's and the next one's ``addr``
        and ``write`` (both from registers).
    """

    def __init__(self, *, config: ArrayConfig, depth: int):
        self.config, self.depth = config, depth
        #: The descriptor is written from a register a cycle after it is taken (``S >= 4``:
        #: the array's shortest latency, ``2S + 1``, still hides the extra cycle); ``ready``
        #: then never lets more than ``depth`` descriptors be held.
        self.write_reg = 2 * config.size + 1 >= RegBlockFIFO.VISIBLE + 3
        super().__init__({
            "desc": In(stream.Signature(desc_layout(config))),
            "out": In(stream.Signature(array_out_layout(config))),
            "acc": Out(stream.Signature(acc_in_layout(config))),
            "ahead": Out(line_ahead_signature(config)),
        })

    def elaborate(self, platform):
        m = Module()
        dl = desc_layout(self.config)
        # in block RAM, the head descriptor (whose address the accumulator's in-flight check
        # compares, and whose acceptance is this FIFO's read enable) in a fabric register
        # (RegBlockFIFO): that path starts at a register, not at the block RAM's slow read
        # data. Its RegBlockFIFO.VISIBLE cycles from write to read are hidden (a
        # descriptor is written when its beat enters the array, its output vector comes out
        # at least 2S + 1 cycles later), and three entries more than ``depth`` (a RegBlockFIFO
        # with ``ahead`` always takes one while it holds fewer than its depth - 3) keep
        # ``ready`` high whenever it holds fewer than ``depth``, as a plain FIFO of ``depth``
        # would.
        # The entry after the head is in a register too (``ahead``): the accumulator checks
        # the next line's address a cycle early. A descriptor is in the head or after it a
        # cycle after it is readable, so its check is ready before its output vector arrives.
        assert 2 * self.config.size + 1 >= RegBlockFIFO.VISIBLE + 2
        fifo = m.submodules.desc = RegBlockFIFO(width=dl.size, depth=self.depth + 3, ahead=True)
        if self.write_reg:
            # (S >= 4) the descriptor is written a cycle after it is taken, from a register:
            # the beat assembler's exponent arithmetic ended at the FIFO's storage (the S = 4
            # FPGA core's slowest routed paths at 56dc8c9, 12.75 ns, 39 end points). Its
            # ``ready`` is then a register too: fewer than ``depth`` descriptors taken and
            # not yet read (the FIFO holds at most those, so it always takes the write), the
            # same as the FIFO's own room whenever it holds fewer than ``depth``.
            held = Signal(range(self.depth + 1), name="desc_held")
            held_next = Signal.like(held, name="desc_held_next")
            ready = Signal(name="desc_room", init=1)
            w_v = Signal(name="desc_write")
            w_d = Signal(dl.size, name="desc_write_data")
            take = self.desc.valid & ready
            m.d.comb += [held_next.eq(held + take - fifo.r_en), self.desc.ready.eq(ready),
                         fifo.w_data.eq(w_d), fifo.w_en.eq(w_v)]
            m.d.sync += [held.eq(held_next), ready.eq(held_next < self.depth), w_v.eq(take),
                         w_d.eq(self.desc.payload)]
        else:
            m.d.comb += [fifo.w_data.eq(self.desc.payload), fifo.w_en.eq(self.desc.valid),
                         self.desc.ready.eq(fifo.w_rdy)]
        dh = Signal(dl, name="desc_head")
        dn = Signal(dl, name="desc_next")
        m.d.comb += [dh.eq(fifo.r_data), dn.eq(fifo.n_data)]
        ai = self.acc.payload
        m.d.comb += [
            self.acc.valid.eq(self.out.valid & fifo.r_rdy),
            self.out.ready.eq(self.acc.ready & fifo.r_rdy),
            fifo.r_en.eq(self.out.valid & self.acc.ready & fifo.r_rdy),
            ai.value.eq(self.out.payload.value), ai.exp.eq(dh.exp), ai.addr.eq(dh.addr),
            ai.mask.eq(dh.mask), ai.first.eq(dh.first), ai.write.eq(dh.write),
            self.ahead.head.valid.eq(fifo.r_rdy), self.ahead.head.addr.eq(dh.addr),
            self.ahead.head.write.eq(dh.write),
            self.ahead.next.valid.eq(fifo.n_rdy), self.ahead.next.addr.eq(dn.addr),
            self.ahead.next.write.eq(dn.write),
        ]
        return m
