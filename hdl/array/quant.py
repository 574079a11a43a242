"""Scratchpad lines -> BFP groups: memory read, lane masking, optional block transpose, and
the FP32 -> BFP converter (one operand path of the matmul engine)."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..bfp.converter import fp32_stream_layout
from ..bfp.stat import QuantStat, stat_layout
from ..formats import bfp_group_layout
from ..lib.rotate import ColumnRows, rotated_block_memories
from ..lib.streamreg import StreamSkid
from .config import ArrayConfig
from .pe import width_shape

__all__ = ["line_req_layout", "group_out_layout", "conv_req_layout", "LineQuantizer"]


def line_req_layout(config: ArrayConfig, side_bits: int) -> data.StructLayout:
    """A line request: read ``addr`` (or use zeros when ``zero``), keep lanes set in ``mask``;
    ``side`` is carried to the output unchanged."""
    return data.StructLayout({
        "addr": range(config.mem_depth), "zero": 1, "mask": config.size,
        "side": unsigned(side_bits),
    })


def group_out_layout(config: ArrayConfig, index: int, side_bits: int) -> data.StructLayout:
    """A BFP group (``exp``, ``elems``), its invalid/overflow flags, the request's ``side`` and
    ``col`` (the column of a transposed block, 0 in row mode)."""
    return data.StructLayout({
        "group": bfp_group_layout(config.bfp(index)),
        "invalid": 1, "overflow": 1,
        "side": unsigned(side_bits), "col": range(config.size),
    })


def conv_req_layout(config: ArrayConfig, side_bits: int) -> data.StructLayout:
    """A converter request (``shared_converter``): ``conv`` (the converter's input payload:
    ``S`` FP32 words in the order read, ``width``, ``rounding``), the request's ``side`` and
    ``col`` (the block column; the words are rotated by it, :class:`BFPConverter`'s ``rot``)."""
    return data.StructLayout({
        "conv": fp32_stream_layout(config.bfp(0)),
        "side": unsigned(side_bits), "col": range(config.size),
    })


class LineQuantizer(wiring.Component):
    """One operand path: line requests in, BFP groups out, in order.

    * **Row mode** (``transpose = 0``): every request's line (``S`` FP32 words, lanes outside
      ``mask`` replaced by ``+0.0``) is one group along the line.
    * **Block mode** (``transpose = 1``): ``S`` consecutive requests are the rows of an
      ``S x S`` block; it is sent to the converter column by column (group ``j`` = column ``j``,
      along the rows), each output carrying the last row's ``side`` and ``col = j``. Two
      block buffers: the next block fills while the current one is sent (one line and one
      group per cycle). A block is held in ``S`` lane memories with asynchronous reads (LUT
      RAM on the ECP5, not flip-flops), each row stored rotated by its index so that a column
      is one read per lane; the converter rotates the rounded column back (its ``rot``).

    The memory read port is synchronous (data one cycle after ``rd_en``); reads are issued only
    when the 4-entry line FIFO has room, so no data is ever dropped under backpressure. The
    converter (:class:`hdl.bfp.stat.QuantStat` with ``config.bfp(index)``: the
    ``BFPConverter`` plus FAST's statistic, docs/fast.md) quantizes with the run-time
    ``width``/``rounding``; its LFSR advances once per group.

    Members
    -------
    req : In(stream.Signature(line_req_layout))
        Line requests.
    o : Out(stream.Signature(group_out_layout))
        BFP groups with flags, ``side`` and ``col``.
    rd_addr : Out(range(mem_depth)), rd_en : Out(1), rd_data : In(S * 32)
        The scratchpad read port this path owns during a pass.
    width : In(width_shape), rounding : In(2), transpose : In(1)
        Run-time settings, constant during a pass.
    busy : Out(1)
        Lines or groups in flight.
    stat_load : In(1), stat_in : In(stat_layout), stat : Out(stat_layout)
        The converter's statistic (:class:`hdl.bfp.stat.QuantStat`).
    c : Out(stream.Signature(conv_req_layout))
        Only with ``config.shared_converter``, which replaces ``o``, the converter and its
        statistic: the converter requests, for :class:`hdl.array.convpair.SharedConverter`
        (the groups in the same order; the converter the two paths share).
    """

    #: Line FIFO entries: a line holds its claim (``room``) from its read to the cycle it
    #: leaves, ``mem_latency + 1`` cycles, so ``mem_latency + 2`` (at least 4) keep a read
    #: every cycle.
    LINE_FIFO = 4
    SIDE_FIFO = 8

    def __init__(self, *, config: ArrayConfig, index: int, side_bits: int):
        if not isinstance(config, ArrayConfig):
            self._MustUse__silence = True        # no "never used" warning when rejected
            raise TypeError(f"LineQuantizer.config must be an ArrayConfig, not {config!r}")
        self.config = config
        self.index = index
        self.side_bits = side_bits
        self.line_fifo = max(self.LINE_FIFO, config.mem_latency + 2)
        if config.shared_converter:
            out = {"c": Out(stream.Signature(conv_req_layout(config, side_bits)))}
        else:
            out = {"o": Out(stream.Signature(group_out_layout(config, index, side_bits))),
                   "stat_load": In(1), "stat_in": In(stat_layout(config.bfp(index))),
                   "stat": Out(stat_layout(config.bfp(index)))}
        super().__init__({
            "req": In(stream.Signature(line_req_layout(config, side_bits))),
            "rd_addr": Out(range(config.mem_depth)), "rd_en": Out(1),
            "rd_data": In(config.size * 32),
            "width": In(width_shape(config)), "rounding": In(2), "transpose": In(1),
            "busy": Out(1),
            **out,
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        if cfg.shared_converter:
            return self._elaborate_lines(m, None)
        conv = m.submodules.converter = QuantStat(config=cfg.bfp(self.index), rotate=True)
        stat_load, stat_in = self.stat_load, self.stat_in
        if cfg.cmd_reg:
            # the FPGA build: the load and its statistic from registers of this quantizer's
            # own, placed by its converter (the sequencer's registers drove the statistic's
            # load select and adders across the die: 5.28 ns of the S = 4 FPGA core's routed
            # critical path at 51c75b2, 14.13 ns). The load then lands a cycle later, still
            # long before the pass's first group reaches the converter: with ``cmd_reg`` the
            # pass itself starts two cycles after the command
            stat_load = Signal(name="stat_load_q")
            stat_in = Signal(stat_layout(cfg.bfp(self.index)), name="stat_in_q")
            m.d.sync += [stat_load.eq(self.stat_load), stat_in.eq(self.stat_in)]
        m.d.comb += [conv.stat_load.eq(stat_load), conv.stat_in.eq(stat_in),
                     self.stat.eq(conv.stat)]
        return self._elaborate_lines(m, conv)

    def _elaborate_lines(self, m, conv):
        """The line reads, the block memories and, with ``conv`` (a :class:`QuantStat`), the
        converter's input, side FIFO and output; without it, the requests on ``c``."""
        cfg = self.config
        S = cfg.size
        sb = self.side_bits

        # ---- read with credits into the line FIFO -------------------------------------------
        line = data.StructLayout({"data": S * 32, "side": unsigned(sb)})
        lf = m.submodules.line_fifo = SyncFIFO(width=line.size, depth=self.line_fifo)
        pending = Signal(name="read_pending")
        p_zero = Signal(name="read_zero")
        p_mask = Signal(S, name="read_mask")
        p_side = Signal(sb, name="read_side")
        issue = Signal(name="issue")
        # free line-FIFO entries not claimed by a read in flight (line_fifo - level - pending),
        # kept in a register: the read enable is the request's valid and one compare of a
        # register, not an adder, on its way into the crossbar and a bank's address
        room = Signal(range(self.line_fifo + 1), init=self.line_fifo, name="line_room")
        room_next = Signal.like(room, name="line_room_next")
        # ``room != 0`` as a register of its own (``room_next != 0``): the request's ready
        # leaves a flip-flop, one LUT level less on its way through the request slice into
        # the line generator's step and its counters' enables (13.66 ns routed at 51c75b2)
        has_room = Signal(init=1, name="line_has_room")
        m.d.comb += room_next.eq(room - issue + (lf.r_en & lf.r_rdy))
        m.d.sync += [room.eq(room_next), has_room.eq(room_next != 0)]
        m.d.comb += [
            self.req.ready.eq(has_room),
            issue.eq(self.req.valid & self.req.ready),
            self.rd_addr.eq(self.req.payload.addr),
            self.rd_en.eq(issue),
        ]
        # the read's lane mask and side travel with it: ``mem_latency`` stages (its data is on
        # rd_data in the last one); ``room`` counts a line from its read to its leaving the
        # FIFO, so line_fifo entries keep a read per cycle
        req = self.req.payload
        stages = [(issue, req.zero, req.mask, req.side)]
        for k in range(cfg.mem_latency):
            st = (Signal(name=f"read_pending{k}"), Signal(name=f"read_zero{k}"),
                  Signal(S, name=f"read_mask{k}"), Signal(sb, name=f"read_side{k}"))
            m.d.sync += st[0].eq(stages[-1][0])
            with m.If(stages[-1][0]):
                m.d.sync += [a.eq(b) for a, b in zip(st[1:], stages[-1][1:])]
            stages.append(st)
        m.d.comb += [pending.eq(stages[-1][0]), p_zero.eq(stages[-1][1]),
                     p_mask.eq(stages[-1][2]), p_side.eq(stages[-1][3])]
        in_flight = Cat(*(st[0] for st in stages[1:])).any()
        masked = Signal(S * 32, name="masked_line")
        for lane in range(S):
            keep = ~p_zero & p_mask[lane]
            m.d.comb += masked.word_select(lane, 32).eq(
                Mux(keep, self.rd_data.word_select(lane, 32), 0))
        m.d.comb += [lf.w_en.eq(pending), lf.w_data.eq(Cat(masked, p_side))]
        head = Signal(line, name="line_head")
        m.d.comb += head.eq(lf.r_data)

        # ---- block memories (transpose mode), double-buffered: one fills while one is sent ---
        # S lane memories of 2S words (bank, row), asynchronous read (LUT RAM on the FPGA): row r
        # is stored rotated by r (lane k holds its word (k - r) mod S), so column c is in row r
        # = (k - c) mod S of lane k, a different address per lane, read in one cycle and
        # rotated back by c (in the converter, after rounding). The same groups leave in the
        # same cycles as from registers, with S x 32 x 2S fewer flip-flops.
        blk_side = [Signal(sb, name=f"block_{b}_side") for b in range(2)]
        blk_full = [Signal(name=f"block_{b}_full") for b in range(2)]
        fill_bank = Signal(name="fill_bank")
        send_bank = Signal(name="send_bank")
        fill = Signal(range(S), name="block_fill")
        col = Signal(range(S), name="block_col")
        fill_ok = Signal(name="fill_ok")
        send_full = Signal(name="send_full")
        m.d.comb += [fill_ok.eq(~Mux(fill_bank, blk_full[1], blk_full[0])),
                     send_full.eq(Mux(send_bank, blk_full[1], blk_full[0]))]
        lanes_rd = Signal(S * 32, name="block_lanes_read")    # lane k: row (k - col) mod S
        col_rows = ColumnRows(S, "block_col_row")               # those rows, as registers
        lane_wps, rd = rotated_block_memories(
            m, name="block_lane", width=32,
            w_lanes=[head.data.word_select(k, 32) for k in range(S)], w_row=fill,
            w_bank=fill_bank, r_col=col, r_bank=send_bank, r_rows=col_rows)
        m.d.comb += lanes_rd.eq(rd)
        col_bits = max(1, (S - 1).bit_length())
        cin_data = Signal(S * 32, name="conv_in_data")
        cin_side = Signal(sb, name="conv_in_side")
        cin_col = Signal(range(S), name="conv_in_col")
        cin_valid = Signal(name="conv_in_valid")
        cin_go = Signal(name="conv_in_go")
        if conv is None:
            # the shared converter's request: its credits stand for the side FIFO's room
            c = self.c.payload
            m.d.comb += [
                self.c.valid.eq(cin_valid), c.conv.data.eq(cin_data),
                c.conv.width.eq(self.width), c.conv.rounding.eq(self.rounding),
                c.side.eq(cin_side), c.col.eq(cin_col),
                cin_go.eq(self.c.valid & self.c.ready),
            ]
        else:
            side_fifo = m.submodules.side_fifo = SyncFIFO(width=sb + col_bits,
                                                          depth=self.SIDE_FIFO)
            m.d.comb += [
                conv.i.valid.eq(cin_valid & side_fifo.w_rdy),
                conv.i.payload.data.eq(cin_data),
                conv.i.payload.width.eq(self.width),
                conv.i.payload.rounding.eq(self.rounding),
                cin_go.eq(conv.i.valid & conv.i.ready),
                side_fifo.w_en.eq(cin_go),
                side_fifo.w_data.eq(Cat(cin_side, cin_col)),
            ]
        with m.If(~self.transpose):
            m.d.comb += [cin_valid.eq(lf.r_rdy), cin_data.eq(head.data), cin_side.eq(head.side),
                         cin_col.eq(0), lf.r_en.eq(cin_go)]
        with m.Else():
            # column col's element r is in lane (r + col) mod S: the converter takes the lanes
            # as read and rotates the rounded group back (conv.rot), far fewer bits than S words
            m.d.comb += cin_data.eq(lanes_rd)
            if conv is not None:
                m.d.comb += conv.rot.eq(col)
            m.d.comb += [cin_valid.eq(send_full),
                         cin_side.eq(Mux(send_bank, blk_side[1], blk_side[0])),
                         cin_col.eq(col), lf.r_en.eq(fill_ok & lf.r_rdy)]
            with m.If(fill_ok & lf.r_rdy):
                for wp in lane_wps:
                    m.d.comb += wp.en.eq(1)
                for b in range(2):
                    with m.If(fill_bank == b):
                        m.d.sync += blk_side[b].eq(head.side)
                        with m.If(fill == S - 1):
                            m.d.sync += blk_full[b].eq(1)
                with m.If(fill == S - 1):
                    m.d.sync += [fill.eq(0), fill_bank.eq(~fill_bank)]
                with m.Else():
                    m.d.sync += fill.eq(fill + 1)
            with m.If(cin_go):
                m.d.sync += col_rows.step()         # col + 1 mod S (S a power of two)
                with m.If(col == S - 1):
                    m.d.sync += [col.eq(0), send_bank.eq(~send_bank)]
                    for b in range(2):
                        with m.If(send_bank == b):
                            m.d.sync += blk_full[b].eq(0)
                with m.Else():
                    m.d.sync += col.eq(col + 1)

        in_lines = in_flight | lf.r_rdy | (fill != 0) | blk_full[0] | blk_full[1]
        if conv is None:
            m.d.comb += self.busy.eq(in_lines)
            return m

        # ---- converter output + sideband ----------------------------------------------------
        # (``out_skid``: through a skid buffer, so the consumer's ``ready`` ends at its register
        # instead of running on into the converter's pipeline enable and the side FIFO)
        if cfg.out_skid:
            skid = m.submodules.out_skid = StreamSkid(self.o.payload.shape())
            wiring.connect(m, skid.o, wiring.flipped(self.o))
            out, skid_busy = skid.i, skid.o.valid
        else:
            out, skid_busy = self.o, 0
        m.d.comb += [
            out.valid.eq(conv.o.valid),
            conv.o.ready.eq(out.ready),
            out.payload.group.eq(conv.o.payload.group),
            out.payload.invalid.eq(conv.o.payload.flags.invalid),
            out.payload.overflow.eq(conv.o.payload.flags.overflow),
            out.payload.side.eq(side_fifo.r_data[:sb]),
            out.payload.col.eq(side_fifo.r_data[sb:]),
            side_fifo.r_en.eq(out.valid & out.ready),
        ]
        m.d.comb += self.busy.eq(in_lines | side_fifo.r_rdy | skid_busy)
        return m
