"""Instruction decoder: operand ranges, bank masks and the instruction check (combinational,
or in two register stages: ``CoreConfig.decode_stages``).

The hardware twin of :func:`hdl.core.isa.operand_ranges` and
:func:`hdl.core.isa.check_instruction`: the same ranges, bank sets and status for every
instruction word (tests compare them on random and hand-made words).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..multi.topk import message_words
from .config import CoreConfig
from .isa import ADDR_BITS, INSTR, OPT_MAX_COUNT, Acc, Op, Rop, Status, Vop

__all__ = ["Decoder", "PORTS", "range_layout"]

#: Operand slots of the decoder, in the order of :func:`hdl.core.isa.operand_ranges`:
#: MATMUL a b c; VEC a b d; REDUCE a d; SOFTMAX a b d e; OPT w m v g.
PORTS = 4
#: width of line arithmetic (ranges may run past the scratchpad: that is an error, not a wrap)
WIDE = 34


def range_layout(config: CoreConfig) -> data.StructLayout:
    """One operand range: ``start`` (run-time address incl. the loop offset), ``lines`` (incl.
    the loop span), ``read``/``write`` (bank ports used), ``banks`` (one bit per bank)."""
    return data.StructLayout({"start": WIDE, "lines": WIDE, "read": 1, "write": 1,
                              "banks": config.banks})


class Decoder(wiring.Component):
    """Decode one instruction word, in :attr:`latency` cycles.

    With ``config.decode_stages = 0`` the decoder is combinational. With 2 (the FPGA build),
    two register stages cut the check into three steps of about equal depth (the whole check
    in one cycle was the slowest path of the FPGA build, docs/bench/paths.md): (0) the slot
    fields and line counts (the multiplies) and the field and shape checks, (1) the ranges
    with the loop offset and span, their ends, bank masks and the address check, (2) bank
    conflicts, overlaps and the status. The inputs must then be held for :attr:`latency`
    cycles; the outputs are those of the held word from then until the inputs change (the
    sequencer decodes its registered instruction, docs/core.md).

    Members
    -------
    instr : In(INSTR)
    offset : In(ADDR_BITS + 16)
        Loop offset added to the fields flagged in ``loop`` (0 outside a loop).
    span : In(ADDR_BITS + 16)
        ``(count - 1) * stride`` of the enclosing loop during the program check (0 at run time).
    iter0 : In(1)
        The loop is in its first iteration (resolves ``Acc.AFTER_FIRST``).
    status : Out(4)
        :class:`~hdl.core.isa.Status` of the instruction (loop structure excluded).
    ranges : Out(range_layout).array(PORTS)
    banks : Out(config.banks)
        Union of the ranges' bank masks.
    acc : Out(1)
        Resolved accumulate flag (MATMUL, REDUCE): combinational.

    Attributes
    ----------
    latency : int
        Cycles from a held input to its ``status``, ``ranges`` and ``banks``:
        ``config.decode_stages``.
    """

    def __init__(self, *, config: CoreConfig):
        if not isinstance(config, CoreConfig):
            raise TypeError(f"Decoder.config must be a CoreConfig, not {config!r}")
        self.config = config
        self.latency = config.decode_stages
        super().__init__({
            "instr": In(INSTR),
            "offset": In(ADDR_BITS + 16),
            "span": In(ADDR_BITS + 16),
            "iter0": In(1),
            "status": Out(4),
            "ranges": Out(range_layout(config)).array(PORTS),
            "banks": Out(config.banks),
            "acc": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S = cfg.size
        lg = (S - 1).bit_length()
        ins = self.instr
        op = ins.op
        mm, vec, red, sx, opt, lp, ar, sr = (ins.args.matmul, ins.args.vec, ins.args.reduce,
                                             ins.args.softmax, ins.args.opt, ins.args.loop,
                                             ins.args.allreduce, ins.args.sendrecv)

        def cdiv(x):
            return (x + (S - 1)) >> lg

        # ---- per-slot field, base lines, kind, loop flag ------------------------------------
        field = [Signal(ADDR_BITS, name=f"field{i}") for i in range(PORTS)]
        base = [Signal(WIDE, name=f"base_lines{i}") for i in range(PORTS)]
        rd = [Signal(name=f"rd{i}") for i in range(PORTS)]
        wr = [Signal(name=f"wr{i}") for i in range(PORTS)]
        flag = [Signal(name=f"flag{i}") for i in range(PORTS)]

        def slot(i, f, lines, r, w, fl=0):
            return [field[i].eq(f), base[i].eq(lines), rd[i].eq(r), wr[i].eq(w), flag[i].eq(fl)]

        n_vec = Signal(WIDE, name="vec_lines")
        n_red = Signal(WIDE, name="red_lines")
        n_sx = Signal(WIDE, name="sx_lines")
        m.d.comb += [n_vec.eq(vec.rows * cdiv(vec.cols)), n_red.eq(red.rows * cdiv(red.cols)),
                     n_sx.eq(sx.rows * cdiv(sx.cols))]
        reads_a = Signal(name="vec_reads_a")
        reads_b = Signal(name="vec_reads_b")
        m.d.comb += [
            reads_a.eq(Cat(*[vec.vop == v for v in Vop.READS_A]).any()),
            reads_b.eq(Cat(*[vec.vop == v for v in Vop.READS_B]).any()),
        ]
        with m.Switch(op):
            with m.Case(Op.MATMUL):
                la = mm.M * cdiv(mm.K)
                lb = mm.K * cdiv(mm.N)
                lc = mm.M * cdiv(mm.N)
                valid_mode = mm.mode <= 2
                m.d.comb += [
                    *slot(0, mm.a, la, valid_mode, mm.mode == 1, mm.loop[0]),
                    *slot(1, mm.b, lb, valid_mode, mm.mode == 2, mm.loop[1]),
                    *slot(2, mm.c, lc, valid_mode, mm.mode == 0, mm.loop[2]),
                ]
            with m.Case(Op.VEC):
                m.d.comb += [
                    *slot(0, vec.a, n_vec, reads_a, 0, vec.loop[0]),
                    *slot(1, vec.b, Mux(vec.bcast, cdiv(vec.cols), n_vec), reads_b, 0,
                          vec.loop[1]),
                    *slot(2, vec.d, n_vec, 0, 1, vec.loop[2]),
                ]
            with m.Case(Op.REDUCE):
                sumsq = red.rop == Rop.SUMSQ
                m.d.comb += [
                    *slot(0, red.a, n_red, 1, 0, red.loop[0]),
                    *slot(2, red.d, Mux(sumsq, 1, cdiv(red.cols)), ~sumsq & (red.acc != Acc.OFF),
                          1, red.loop[1]),
                ]
            with m.Case(Op.SOFTMAX_XENT):
                m.d.comb += [
                    *slot(0, sx.a, n_sx, 1, 0, sx.loop[0]),
                    *slot(1, sx.b, cdiv(sx.rows), 1, 0, sx.loop[1]),
                    *slot(2, sx.d, n_sx, 0, 1, sx.loop[2]),
                    *slot(3, sx.e, cdiv(sx.rows), 0, 1, sx.loop[3]),
                ]
            with m.Case(Op.OPT):
                n = cdiv(opt.count)
                m.d.comb += [
                    *slot(0, opt.w, n, 1, 1), *slot(1, opt.m, n, 1, 1),
                    *slot(2, opt.v, n, 1, 1), *slot(3, opt.g, n, 1, 0),
                ]
            with m.Case(Op.ALLREDUCE):      # top-k (comp 2): also the residual and buffer
                topk_ranges = ar.comp == 2
                m.d.comb += [*slot(0, ar.a, ar.lines, 1, 1),
                             *slot(1, ar.b, ar.lines, topk_ranges, topk_ranges),
                             *slot(2, ar.g, ar.glines, topk_ranges, topk_ranges)]
            with m.Case(Op.SENDRECV):       # an empty range is absent (hdl.core.isa)
                m.d.comb += [*slot(0, sr.a, sr.lines, sr.lines != 0, 0),
                             *slot(1, sr.b, sr.rlines, 0, sr.rlines != 0)]

        piped = self.latency > 0

        def stage(sig, n, name):
            """``sig`` registered in stage ``n`` (0 or 1); itself without stages."""
            if not piped:
                return sig
            r = Signal.like(sig, name=f"s{n}_{name}")
            m.d.sync += r.eq(sig)
            return r

        # ---- stage 0 -> 1: slot fields, line counts, kinds, loop flags ------------------------
        field = [stage(f, 0, f"field{i}") for i, f in enumerate(field)]
        base0 = [stage(b, 0, f"base_lines{i}") for i, b in enumerate(base)]
        rd0 = [stage(r, 0, f"rd{i}") for i, r in enumerate(rd)]
        wr0 = [stage(w, 0, f"wr{i}") for i, w in enumerate(wr)]
        flag0 = [stage(f, 0, f"flag{i}") for i, f in enumerate(flag)]

        # ---- ranges and bank masks (stage 1) ---------------------------------------------------
        present = [Signal(name=f"present{i}") for i in range(PORTS)]
        start = [Signal(WIDE, name=f"start{i}") for i in range(PORTS)]
        lines = [Signal(WIDE, name=f"lines{i}") for i in range(PORTS)]
        end = [Signal(WIDE, name=f"end{i}") for i in range(PORTS)]
        banks = [Signal(cfg.banks, name=f"banks{i}") for i in range(PORTS)]
        oor = []
        bank_bits = cfg.bank_bits
        for i in range(PORTS):
            m.d.comb += [
                present[i].eq(rd0[i] | wr0[i]),
                start[i].eq(field[i] + Mux(flag0[i], self.offset, 0)),
                lines[i].eq(base0[i] + Mux(flag0[i], self.span, 0)),
                end[i].eq(start[i] + lines[i]),          # one past the last line
            ]
            oor.append(present[i] & (end[i] > cfg.lines))
            first = Signal(WIDE, name=f"first_bank{i}")
            m.d.comb += first.eq(start[i] >> bank_bits)
            # bank b is touched when first <= b <= last, the last line's bank: last >= b is
            # end - 1 >= b * bank_depth, i.e. end > b * bank_depth, a compare of ``end``
            # with a constant (no decrement after the two adders; for b = 0: first == 0)
            m.d.comb += banks[i].eq(Cat(*[
                present[i] & (lines[i] != 0)
                & ((first == 0) if b == 0 else ((first <= b) & (end[i] > (b << bank_bits))))
                for b in range(cfg.banks)]))

        # ---- stage 1 -> 2 ------------------------------------------------------------------------
        out_of_range = stage(Cat(*oor).any(), 1, "out_of_range")
        # The overlap checks (stage 2) compare only the low `nb_lines` bits: their ERR_ADDR
        # matters only when every range lies inside the scratchpad (an end past it is ERR_ADDR
        # already, and takes precedence over ERR_BANK), and then every start and end is
        # < 2**nb_lines.
        nb_lines = cfg.lines.bit_length()
        end = [stage(e[:nb_lines], 1, f"end{i}") for i, e in enumerate(end)]
        # one past the first iteration's lines (a loop's ranges are checked per iteration)
        first_end = [stage((start[i] + base0[i])[:nb_lines], 1, f"first_end{i}")
                     for i in range(PORTS)]
        rd = [stage(r, 1, f"rd{i}") for i, r in enumerate(rd0)]
        wr = [stage(w, 1, f"wr{i}") for i, w in enumerate(wr0)]
        flag = [stage(f, 1, f"flag{i}") for i, f in enumerate(flag0)]
        out = m.d.sync if piped else m.d.comb
        for i in range(PORTS):
            r = self.ranges[i]
            out += [r.start.eq(start[i]), r.lines.eq(lines[i]), r.read.eq(rd0[i]),
                    r.write.eq(wr0[i]), r.banks.eq(banks[i])]
        out += self.banks.eq(banks[0] | banks[1] | banks[2] | banks[3])

        # ---- bank conflicts and overlaps (stage 2) ---------------------------------------------
        span_nz = stage(stage(self.span != 0, 0, "span_nonzero"), 1, "span_nonzero")
        sendrecv = stage(stage(op == Op.SENDRECV, 0, "sendrecv"), 1, "sendrecv")

        # two ranges that both read (or both write) may not share a bank
        bank_conflict = []
        for i in range(PORTS):
            for j in range(i + 1, PORTS):
                ri, rj = self.ranges[i], self.ranges[j]
                both = (rd[i] & rd[j]) | (wr[i] & wr[j])
                bank_conflict.append(both & (ri.banks & rj.banks).any())
        # a read-only range overlapping a write-only range must coincide with it
        overlap = []
        for i in range(PORTS):
            for j in range(PORTS):
                if i == j:
                    continue
                ro = rd[i] & ~wr[i]
                wo = wr[j] & ~rd[j]
                both = flag[i] & flag[j] & span_nz
                ri, rj = self.ranges[i], self.ranges[j]
                r1 = Signal(nb_lines, name=f"ov_r1_{i}{j}")
                s1 = Signal(nb_lines, name=f"ov_s1_{i}{j}")
                m.d.comb += [r1.eq(Mux(both, first_end[i], end[i])),
                             s1.eq(Mux(both, first_end[j], end[j]))]
                si, sj = ri.start[:nb_lines], rj.start[:nb_lines]
                # a SENDRECV's ranges may not overlap at all (hdl.core.isa.check_instruction)
                hit = (si < s1) & (sj < r1) & ((si != sj) | (r1 != s1) | sendrecv)
                overlap.append(ro & wo & hit)

        # ---- field and shape checks ----------------------------------------------------------
        dmax = (1 << cfg.dim_bits) - 1
        known = Signal(name="known_op")
        coll = cfg.collective        # None: no collective engine, ALLREDUCE is unknown
        m.d.comb += known.eq(Cat(*[op == o for o in Op.ALL
                                   if o not in Op.COLLECTIVE or coll is not None]).any())
        bad_field = Signal(name="bad_field")
        bad_shape = Signal(name="bad_shape")
        with m.Switch(op):
            with m.Case(Op.MATMUL):
                m.d.comb += [
                    bad_field.eq((mm.mode > 2) | (mm.acc > 2) | (mm.layer >= cfg.layers)),
                    bad_shape.eq((mm.M == 0) | (mm.K == 0) | (mm.N == 0) | (mm.M > dmax)
                                 | (mm.K > dmax) | (mm.N > dmax)),
                ]
            with m.Case(Op.VEC):
                m.d.comb += [bad_field.eq(vec.vop > max(Vop.ALL)),
                             bad_shape.eq((vec.rows == 0) | (vec.cols == 0))]
            with m.Case(Op.REDUCE):
                no_sumsq = (red.rop == Rop.SUMSQ) if not cfg.vector_sumsq else 0
                m.d.comb += [bad_field.eq((red.acc > 2) | no_sumsq),
                             bad_shape.eq((red.rows == 0) | (red.cols == 0))]
            with m.Case(Op.SOFTMAX_XENT):
                imm_exp = sx.imm[23:31]
                m.d.comb += bad_field.eq((imm_exp == 0) | (imm_exp == 0xFF))
                m.d.comb += bad_shape.eq((sx.rows == 0) | (sx.cols < 2)
                                         | (sx.cols > cfg.max_classes))
            with m.Case(Op.OPT):
                m.d.comb += [bad_field.eq(opt.one_pass & (opt.count[:lg] != 0) if lg else 0),
                             bad_shape.eq((opt.count == 0) | (opt.count > OPT_MAX_COUNT))]
            with m.Case(Op.LOOP):
                m.d.comb += bad_shape.eq(lp.count == 0)
            if coll is not None:         # hdl.core.isa.check_allreduce
                with m.Case(Op.ALLREDUCE):
                    bfp = ar.comp == 1
                    width_ok = Cat(*[ar.width == w for w in coll.bfp.widths]).any()
                    words = Signal(16 + lg + 1, name="ar_words")
                    m.d.comb += words.eq(ar.lines * S)
                    bad_timeout = (ar.timeout == 0) | (ar.timeout >= (1 << coll.timeout_bits))
                    with m.If(ar.comp == 2):
                        # top-k (hdl.core.isa.check_allreduce): seg and width unchecked
                        if coll.topk is None:
                            m.d.comb += bad_field.eq(1)
                        else:
                            tk_m = message_words(m, words, coll.topk, name="ar_tk_m")
                            hull = Signal(WIDE, name="ar_tk_hull")
                            ends = [Signal(WIDE, name=f"ar_tk_end{i}") for i in range(3)]
                            m.d.comb += [ends[0].eq(ar.a + ar.lines), ends[1].eq(ar.b + ar.lines),
                                         ends[2].eq(ar.g + ar.glines)]
                            hi01 = Mux(ends[1] > ends[0], ends[1], ends[0])
                            m.d.comb += hull.eq(Mux(ends[2] > hi01, ends[2], hi01))
                            gwords = Signal(16 + lg + 1, name="ar_tk_gwords")
                            m.d.comb += gwords.eq(ar.glines * S)
                            m.d.comb += [
                                bad_field.eq(bad_timeout | (ar.b < ar.a) | (ar.g < ar.a)),
                                bad_shape.eq((ar.lines == 0)
                                             | (((hull - ar.a) << lg) > coll.depth)
                                             | (gwords < coll.ranks * tk_m)),
                            ]
                    with m.Else():
                        m.d.comb += [
                            bad_field.eq((ar.comp > 1) | (bfp & ~width_ok)
                                         | (bfp & (ar.rounding == 3)) | bad_timeout
                                         | (ar.seg * coll.ranks < ar.lines)),
                            bad_shape.eq((ar.lines == 0) | (ar.seg == 0)
                                         | (words > coll.depth)),
                        ]
                with m.Case(Op.SENDRECV):    # hdl.core.isa.check_sendrecv
                    a_end = Signal(WIDE, name="sr_a_end")
                    b_end = Signal(WIDE, name="sr_b_end")
                    lo = Signal(WIDE, name="sr_lo")
                    hi = Signal(WIDE, name="sr_hi")
                    m.d.comb += [a_end.eq(sr.a + sr.lines), b_end.eq(sr.b + sr.rlines)]
                    with m.If(sr.lines == 0):
                        m.d.comb += [lo.eq(sr.b), hi.eq(b_end)]
                    with m.Elif(sr.rlines == 0):
                        m.d.comb += [lo.eq(sr.a), hi.eq(a_end)]
                    with m.Else():
                        m.d.comb += [lo.eq(Mux(sr.a < sr.b, sr.a, sr.b)),
                                     hi.eq(Mux(a_end > b_end, a_end, b_end))]
                    m.d.comb += [
                        bad_field.eq((sr.timeout == 0)
                                     | (sr.timeout >= (1 << coll.timeout_bits))
                                     | ((sr.sdir | sr.rdir) & (0 if coll.reverse else 1))),
                        bad_shape.eq(((sr.lines == 0) & (sr.rlines == 0))
                                     | (((hi - lo) << lg) > coll.depth)),
                    ]

        # the field and shape checks (stage 0), registered twice to meet the range checks
        known, bad_field, bad_shape = (stage(stage(v, 0, n), 1, n) for v, n in
                                       ((known, "known_op"), (bad_field, "bad_field"),
                                        (bad_shape, "bad_shape")))
        with m.If(~known):
            m.d.comb += self.status.eq(Status.ERR_OPCODE)
        with m.Elif(bad_field):
            m.d.comb += self.status.eq(Status.ERR_FIELD)
        with m.Elif(bad_shape):
            m.d.comb += self.status.eq(Status.ERR_SHAPE)
        with m.Elif(out_of_range):
            m.d.comb += self.status.eq(Status.ERR_ADDR)
        with m.Elif(Cat(*bank_conflict).any()):
            m.d.comb += self.status.eq(Status.ERR_BANK)
        with m.Elif(Cat(*overlap).any()):
            m.d.comb += self.status.eq(Status.ERR_ADDR)
        with m.Else():
            m.d.comb += self.status.eq(Status.OK)

        acc_field = Mux(op == Op.MATMUL, mm.acc, red.acc)
        m.d.comb += self.acc.eq((acc_field == Acc.ON) | ((acc_field == Acc.AFTER_FIRST)
                                                         & ~self.iter0))
        return m
