"""Beat assembly of the matmul engine: BFP groups of both operand paths become array beats,
each with the descriptor of its result line."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib.rotate import ColumnRows, rotate_lanes, rotated_block_memories
from .array import beat_layout
from .config import BWD_DATA, BWD_WEIGHT, FWD, ArrayConfig
from .opgen import operand_side_layout
from .quant import group_out_layout
from .results import desc_layout
from .wload import tile_signature

__all__ = ["BeatAssembler"]


class BeatAssembler(wiring.Component):
    """Array beats and result descriptors from the quantized operand groups.

    * FWD / BWD_DATA: a beat is one group of path 0 (X on the left edge in FWD, dY on the top
      edge in BWD_DATA) with the current stationary tile (``tile``); it needs that tile loaded
      and room in the descriptor FIFO. Path 1's groups (weight-tile rows) go on to the
      aligner through ``rows``. The descriptor: the group's output line, lane mask and
      ``first`` from its sideband, exponent ``E_group + E_tile - shift`` per lane.
    * BWD_WEIGHT: path 0's groups (X columns) and path 1's (dY columns) fill two
      double-buffered ``S x S`` blocks (LUT RAM; below); when both blocks of a bank are full, ``S``
      beats are emitted (beat ``j``: row ``j`` of both blocks, ``first``/``last`` tags of the
      batch tile), beat ``j``'s descriptor is row ``j`` of the dW tile (line
      ``addr + j * stride``, written only for ``j < rows``), exponents
      ``E_x[j] + E_dy[lane] - shift``.

    A beat's NaN/Inf flags (``beat_invalid``, ``beat_overflow``) are those of its group and
    tile, or of its two blocks.

    Parameters
    ----------
    config : ArrayConfig

    Members
    -------
    x : In(stream.Signature(group_out_layout(config, 0, operand_side_layout(config).size)))
        Quantizer 0's groups.
    y : In(stream.Signature(group_out_layout(config, 1, 1)))
        Quantizer 1's groups.
    rows : Out(stream.Signature(group_out_layout(config, 1, 1)))
        Weight-tile rows to the aligner (FWD/BWD_DATA).
    tile : In(tile_signature(config))
        The current stationary tile.
    beat : Out(stream.Signature(beat_layout(config)))
        To the array (valid only while ``running``).
    desc : Out(stream.Signature(desc_layout(config)))
        Result descriptors, one per beat; ``valid`` is the beat's transfer and is raised only
        while ``ready`` (a FIFO write strobe).
    mode : In(2)
    shift : In(range(2 * max_mantissa))
    running : In(1)
    clear : In(1)
        A pass starts on an idle engine: empty the block registers.
    issue : Out(1)
        A beat is transferred this cycle.
    beat_invalid, beat_overflow : Out(1)
        Its NaN / Inf flags.
    """

    def __init__(self, *, config: ArrayConfig):
        self.config = config
        side = operand_side_layout(config).size
        super().__init__({
            "x": In(stream.Signature(group_out_layout(config, 0, side))),
            "y": In(stream.Signature(group_out_layout(config, 1, 1))),
            "rows": Out(stream.Signature(group_out_layout(config, 1, 1))),
            "tile": In(tile_signature(config)),
            "beat": Out(stream.Signature(beat_layout(config))),
            "desc": Out(stream.Signature(desc_layout(config))),
            "mode": In(2), "shift": In(range(2 * config.max_mantissa)),
            "running": In(1), "clear": In(1),
            "issue": Out(1), "beat_invalid": Out(1), "beat_overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S, mm = cfg.size, cfg.max_mantissa
        mode, shift = self.mode, self.shift
        # The mode's decodes are registers: ``mode`` changes only when a pass starts on an idle
        # engine (overlapping passes have the same mode), and that pass's first beat arrives
        # here many cycles later (its reads and the converter), so they are never a cycle
        # late; the decode of the control's register was the first LUT of the paths into the
        # result descriptors and the array's accept (13.65 ns, about 100 end points).
        is_fwd, is_bwd, is_bww = (Signal(name=n) for n in ("is_fwd", "is_bwd_data", "is_bww"))
        m.d.sync += [is_fwd.eq(mode == FWD), is_bwd.eq(mode == BWD_DATA),
                     is_bww.eq(mode == BWD_WEIGHT)]
        side0 = operand_side_layout(cfg)
        x, y = self.x, self.y
        issue, beat_inv, beat_ovf = self.issue, self.beat_invalid, self.beat_overflow

        # weight-tile rows (FWD/BWD_DATA) go on to the aligner
        m.d.comb += [self.rows.payload.eq(y.payload), self.rows.valid.eq(y.valid & ~is_bww)]

        inp = self.beat.payload
        dsc = Signal(desc_layout(cfg), name="desc_in")
        o0 = x.payload
        s0o = Signal(side0, name="q0_side")
        m.d.comb += s0o.eq(o0.side)
        # BWD_WEIGHT blocks: S X groups (columns k) and S dY groups (columns n), double
        # buffered. The elements are held in S lane memories per operand, 2S words each
        # (bank, row), asynchronous read (LUT RAM on the FPGA), as the quantizer's block
        # buffers (hdl.lib.rotate.rotated_block_memories): row r is stored rotated by r (lane
        # memory k holds its element (k - r) mod S), so element e of every row is one read per
        # lane memory, lane k at row (k - e) mod S, rotated back by e. A beat leaves in the
        # same cycle as from registers, without a 2S-way select per element.
        el = mm + 1
        xexp = [[Signal(signed(cfg.exp_bits), name=f"xexp_{b}_{j}") for j in range(S)]
                for b in range(2)]
        dexp = [[Signal(signed(cfg.exp_bits), name=f"dexp_{b}_{j}") for j in range(S)]
                for b in range(2)]
        xside = [Signal(side0, name=f"xblk_{b}_side") for b in range(2)]
        xfull = [Signal(name=f"xblk_{b}_full") for b in range(2)]
        # flags of the groups in each block (reach the pass with the block's beats)
        xflag = [Signal(2, name=f"xblk_{b}_flags") for b in range(2)]
        dflag = [Signal(2, name=f"dblk_{b}_flags") for b in range(2)]
        dfull = [Signal(name=f"dblk_{b}_full") for b in range(2)]
        xcnt = Signal(range(S), name="xblk_count")
        dcnt = Signal(range(S), name="dblk_count")
        xbank = Signal(name="xblk_bank")
        dbank = Signal(name="dblk_bank")
        ebank = Signal(name="emit_bank")
        emit = Signal(range(S), name="bww_beat")
        emit_rows = ColumnRows(S, "bww_beat_row")      # the lane memories' rows of ``emit``
        issue_v = Signal(name="issue_valid")
        m.d.comb += issue.eq(self.beat.valid & self.beat.ready)
        tile = self.tile
        # The descriptor's exponent is one add from registers: ``tile_exp_shifted`` (FWD /
        # BWD_DATA: the current tile's exponent minus the shift) and ``cur_xexp_shifted``
        # (BWD_WEIGHT: the beat's X exponent minus the shift) each take, every cycle, the
        # value of the next cycle's beat: the next tile's or the next row's when a beat
        # issues now that moves on to it, else the current one's (so a tile or block still
        # being loaded is followed until its first beat). The values they read are final a
        # cycle before that beat can issue: a tile's rows all carry its exponent, so the
        # loader's register holds it from its first row on, a tile being ready from after its
        # last; a block's row r exponent is written S - r cycles before it is full; the shift
        # changes only as a pass starts on an idle engine. (Two adds and the row select in
        # front of the result join's write register were 88 end points at 13.53 ns estimated
        # in the S = 8 FPGA core, and 25-39 routed end points over 11 ns at S = 4.)
        tile_sh = Signal(signed(cfg.exp_bits + 1), name="tile_exp_shifted")
        m.d.sync += tile_sh.eq(Mux(tile.used, tile.exp_next - shift, tile.exp - shift))
        ew = cfg.exp_bits
        last_row = Signal(name="bww_last_row")
        m.d.comb += last_row.eq(emit == S - 1)

        def xexp_at(e, b):
            # element ``e`` of bank ``b``'s X exponents (one select over both banks)
            return Cat(*xexp[0], *xexp[1]).word_select(Cat(e, b), ew).as_signed()

        xexp_sh = Signal(signed(cfg.exp_bits + 1), name="cur_xexp_shifted")
        nxt_row = Signal.like(emit, name="bww_next_beat")
        m.d.comb += nxt_row.eq(Mux(last_row, 0, emit + 1))
        m.d.sync += xexp_sh.eq(Mux(issue, xexp_at(nxt_row, ebank ^ last_row) - shift,
                                   xexp_at(emit, ebank) - shift))

        with m.If(~is_bww):
            m.d.comb += [
                issue_v.eq(x.valid & tile.ready & self.desc.ready),
                x.ready.eq(issue),
                y.ready.eq(self.rows.ready),
                inp.bank.eq(tile.bank), inp.first.eq(0), inp.last.eq(0),
                dsc.addr.eq(s0o.addr), dsc.mask.eq(s0o.mask), dsc.first.eq(s0o.first),
                dsc.write.eq(1),
            ]
            for j in range(S):
                m.d.comb += [
                    dsc.exp[j].eq(o0.group.exp + tile_sh),
                    inp.h[j].eq(Mux(is_fwd, o0.group.elems[j].as_value(), 0)),
                    inp.v[j].eq(Mux(is_bwd, o0.group.elems[j].as_value(), 0)),
                ]
            m.d.comb += [
                beat_inv.eq(o0.invalid | tile.invalid),
                beat_ovf.eq(o0.overflow | tile.overflow),
                tile.used.eq(issue & s0o.last),
            ]
        with m.Else():
            # double-buffered X and dY blocks: bank `xbank`/`dbank` fills, bank `ebank` is emitted
            x_room = Signal(name="x_room")
            d_room = Signal(name="d_room")
            blk_mem = {}    # per operand: (write ports, read data), beat ``emit`` of ``ebank``
            for tag, src, cnt_, bank_ in (("x", x, xcnt, xbank), ("d", y, dcnt, dbank)):
                blk_mem[tag] = rotated_block_memories(
                    m, name=f"{tag}blk_lane", width=el,
                    w_lanes=[src.payload.group.elems[e].as_value() for e in range(S)],
                    w_row=cnt_, w_bank=bank_, r_col=emit, r_bank=ebank, r_rows=emit_rows)
            m.d.comb += [x_room.eq(~Mux(xbank, xfull[1], xfull[0])),
                         d_room.eq(~Mux(dbank, dfull[1], dfull[0])),
                         x.ready.eq(x_room), y.ready.eq(d_room)]
            for tag, exp_, full_, cnt_, bank_, src, room, side_, flag_ in (
                    ("x", xexp, xfull, xcnt, xbank, x, x_room, xside, xflag),
                    ("d", dexp, dfull, dcnt, dbank, y, d_room, None, dflag)):
                for wp in blk_mem[tag][0]:
                    m.d.comb += wp.en.eq(src.valid & room)
                with m.If(src.valid & room):
                    fl = Cat(src.payload.invalid, src.payload.overflow)
                    for b in range(2):
                        with m.If(bank_ == b):
                            for j in range(S):
                                with m.If(cnt_ == j):
                                    m.d.sync += exp_[b][j].eq(src.payload.group.exp)
                            if side_ is not None:
                                m.d.sync += side_[b].eq(src.payload.side)
                            with m.If(cnt_ == 0):
                                m.d.sync += flag_[b].eq(fl)
                            with m.Else():
                                m.d.sync += flag_[b].eq(flag_[b] | fl)
                            with m.If(cnt_ == S - 1):
                                m.d.sync += full_[b].eq(1)
                    with m.If(cnt_ == S - 1):
                        m.d.sync += [cnt_.eq(0), bank_.eq(~bank_)]
                    with m.Else():
                        m.d.sync += cnt_.eq(cnt_ + 1)
            # beat ``emit`` of bank ``ebank``: element ``emit`` of every block row, each one
            # select over both banks' elements (not a bank select of whole rows first)
            es = Signal(side0, name="emit_side")
            m.d.comb += es.eq(Mux(ebank, xside[1], xside[0]))
            # row ``emit``'s line, ``addr + emit * stride``, as a running sum: no multiplier
            # (its DSP block, away from this logic, was on the path into the descriptor
            # FIFO's block RAM); the emitted bank's side is held while its beats leave
            bww_line = Signal(len(dsc.addr), name="bww_row_line")   # for the next beat
            cur_line = Signal(len(dsc.addr), name="bww_cur_line")
            m.d.comb += cur_line.eq(Mux(emit == 0, es.addr, bww_line))
            with m.If(issue):
                m.d.sync += bww_line.eq(cur_line + es.stride)
            m.d.comb += [
                issue_v.eq(Mux(ebank, xfull[1] & dfull[1], xfull[0] & dfull[0])
                           & self.desc.ready),
                inp.bank.eq(0), inp.first.eq(emit == 0), inp.last.eq(last_row),
                # rows of the dW tile past K are dropped (write = 0); their line is the
                # tile's first one, so the accumulator's read stays inside the matrix
                dsc.addr.eq(Mux(emit < es.rows, cur_line, es.addr)),
                dsc.mask.eq(es.mask), dsc.first.eq(es.first), dsc.write.eq(emit < es.rows),
            ]
            bflag = Signal(2, name="emit_flags")
            m.d.comb += [
                bflag.eq(Mux(ebank, xflag[1] | dflag[1], xflag[0] | dflag[0])),
                beat_inv.eq(bflag[0]), beat_ovf.eq(bflag[1]),
            ]
            # lane k holds element ``emit`` of row (k - emit) mod S: row j is lane j + emit
            rd = {tag: rotate_lanes([read.word_select(k, el) for k in range(S)], emit,
                                    left=False)
                  for tag, (_, read) in blk_mem.items()}
            for j in range(S):
                m.d.comb += [
                    inp.h[j].eq(rd["x"].word_select(j, el)),
                    inp.v[j].eq(rd["d"].word_select(j, el)),
                    dsc.exp[j].eq(xexp_sh + Mux(ebank, dexp[1][j], dexp[0][j])),
                ]
            with m.If(issue):
                m.d.sync += emit_rows.step()        # emit + 1 mod S (S a power of two)
                with m.If(last_row):
                    m.d.sync += [emit.eq(0), ebank.eq(~ebank)]
                    for b in range(2):
                        with m.If(ebank == b):
                            m.d.sync += [xfull[b].eq(0), dfull[b].eq(0)]
                with m.Else():
                    m.d.sync += emit.eq(emit + 1)
        m.d.comb += [self.beat.valid.eq(issue_v & self.running),
                     self.desc.valid.eq(issue), self.desc.payload.eq(dsc)]
        with m.If(self.clear):
            m.d.sync += [emit.eq(0), xcnt.eq(0), dcnt.eq(0), xbank.eq(0), dbank.eq(0),
                         ebank.eq(0)] + emit_rows.restart()
            m.d.sync += [f.eq(0) for f in xfull + dfull]
        return m
