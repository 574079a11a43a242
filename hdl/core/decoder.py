"""Instruction decoder: operand ranges, bank masks and the instruction check (combinational,
or in two register stages: ``CoreConfig.decode_stages``).

The hardware twin of :func:`hdl.core.isa.operand_ranges` and
:func:`hdl.core.isa.check_instruction`: the same ranges, bank sets and status for every
instruction word (tests compare them on random and hand-made words).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..lib.dspmul import registered_product
from ..multi.topk import message_words
from .config import CoreConfig
from .isa import ADDR_BITS, DIM_BITS, INSTR, OPT_MAX_COUNT, Acc, Op, Rop, Status, Vop

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
    in one cycle was the slowest path of the FPGA build, docs/bench/paths.md), after the
    word's picks are registered as it is loaded (``load``: each slot's field, loop flag,
    kind, line count but the product and the product's two factors): (0) the
    line-count products (one multiplier per slot, from those registers straight into
    registers), the starts with the loop offset, each range's end but the
    product, and the field and shape checks, (1) the ends (one adder), bank masks and the
    address check (compares on the scratchpad's address bits, with flags for a summand past
    it), (2) bank conflicts, overlaps and the status. The inputs must then be held for
    :attr:`latency` cycles; the outputs are those of the held word from then until the inputs
    change (the sequencer decodes its registered instruction, docs/core.md; ``ranges[i].start``
    follows the inputs one cycle after they change, the others two).

    Members
    -------
    instr : In(INSTR)
        The word to decode, held for :attr:`latency` cycles.
    instr_next : In(INSTR), load : In(1)
        With stages: ``load`` high in the cycle before ``instr`` takes the word on
        ``instr_next`` (the sequencer's LOAD): the decoder registers the word's operand picks
        then, so a word must be loaded this way before it is held on ``instr``. Unused
        without stages.
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
            "instr_next": In(INSTR),
            "load": In(1),
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

        def word_picks(ins):
            """What stage 0 needs of a word that depends on the word alone: each slot's
            field, line count but the product, read / write / loop flags, and the two factors
            of each line-count product (the first 0 for a slot that takes none)."""
            op = ins.op
            mm, vec, red, sx, opt, ar, sr = (ins.args.matmul, ins.args.vec, ins.args.reduce,
                                             ins.args.softmax, ins.args.opt,
                                             ins.args.allreduce, ins.args.sendrecv)
            # ---- per-slot field, base lines, kind, loop flag --------------------------------
            field = [Signal(ADDR_BITS, name=f"field{i}") for i in range(PORTS)]
            rd = [Signal(name=f"rd{i}") for i in range(PORTS)]
            wr = [Signal(name=f"wr{i}") for i in range(PORTS)]
            flag = [Signal(name=f"flag{i}") for i in range(PORTS)]
            # the slots' line counts that are not products (0 where a product is taken, below)
            other = [Signal(WIDE, name=f"other_lines{i}") for i in range(PORTS)]

            def slot(i, f, lines, r, w, fl=0):
                return [field[i].eq(f), other[i].eq(lines), rd[i].eq(r), wr[i].eq(w),
                        flag[i].eq(fl)]

            # The line-count products, one multiplier per slot 0..2, their operands picked by the
            # opcode's two low bits alone (MATMUL 1, VEC 2, REDUCE 3, SOFTMAX_XENT 4), the first
            # one forced to 0 for a slot that takes no product: no select after the multipliers
            # (their results go straight into stage-0 registers; stage 1 adds them).
            assert {Op.SOFTMAX_XENT & 3, Op.MATMUL & 3, Op.VEC & 3, Op.REDUCE & 3} == {0, 1, 2, 3}

            def pick(by_op):
                v = [None] * 4
                for o, x in by_op.items():
                    v[o & 3] = x
                v = [x if x is not None else by_op[Op.MATMUL] for x in v]
                return Mux(op[1], Mux(op[0], v[3], v[2]), Mux(op[0], v[1], v[0]))

            is_mm, is_vec, is_red, is_sx = (op == o for o in (Op.MATMUL, Op.VEC, Op.REDUCE,
                                                              Op.SOFTMAX_XENT))
            take = [Signal(name=f"take_prod{i}") for i in range(3)]
            m.d.comb += [take[0].eq(is_mm | is_vec | is_red | is_sx),
                         take[1].eq(is_mm | (is_vec & ~vec.bcast)),
                         take[2].eq(is_mm | is_vec | is_sx)]
            # a product not taken is 0 (its first factor is), and so is ``other`` of a slot that
            # takes one: a slot's lines (before the loop span) are their sum
            pa = [Signal(DIM_BITS, name=f"prod_a{i}") for i in range(3)]
            pb = [Signal(DIM_BITS + 1, name=f"prod_b{i}") for i in range(3)]
            m.d.comb += [
                # slot 0: MATMUL a (M x K); VEC a, REDUCE a, SOFTMAX_XENT a (rows x cols)
                pa[0].eq(pick({Op.MATMUL: mm.M, Op.VEC: vec.rows, Op.REDUCE: red.rows,
                               Op.SOFTMAX_XENT: sx.rows}) & take[0].replicate(DIM_BITS)),
                pb[0].eq(cdiv(pick({Op.MATMUL: mm.K, Op.VEC: vec.cols, Op.REDUCE: red.cols,
                                    Op.SOFTMAX_XENT: sx.cols}))),
                # slot 1: MATMUL b (K x N); VEC b without broadcast
                pa[1].eq(Mux(op[0], mm.K, vec.rows) & take[1].replicate(DIM_BITS)),
                pb[1].eq(cdiv(Mux(op[0], mm.N, vec.cols))),
                # slot 2: MATMUL c (M x N); VEC d, SOFTMAX_XENT d
                pa[2].eq(pick({Op.MATMUL: mm.M, Op.VEC: vec.rows, Op.SOFTMAX_XENT: sx.rows})
                         & take[2].replicate(DIM_BITS)),
                pb[2].eq(cdiv(pick({Op.MATMUL: mm.N, Op.VEC: vec.cols,
                                    Op.SOFTMAX_XENT: sx.cols}))),
            ]
            reads_a = Signal(name="vec_reads_a")
            reads_b = Signal(name="vec_reads_b")
            m.d.comb += [
                reads_a.eq(Cat(*[vec.vop == v for v in Vop.READS_A]).any()),
                reads_b.eq(Cat(*[vec.vop == v for v in Vop.READS_B]).any()),
            ]
            with m.Switch(op):
                with m.Case(Op.MATMUL):
                    valid_mode = mm.mode <= 2
                    m.d.comb += [
                        *slot(0, mm.a, 0, valid_mode, mm.mode == 1, mm.loop[0]),
                        *slot(1, mm.b, 0, valid_mode, mm.mode == 2, mm.loop[1]),
                        *slot(2, mm.c, 0, valid_mode, mm.mode == 0, mm.loop[2]),
                    ]
                with m.Case(Op.VEC):
                    m.d.comb += [
                        *slot(0, vec.a, 0, reads_a, 0, vec.loop[0]),
                        *slot(1, vec.b, Mux(vec.bcast, cdiv(vec.cols), 0), reads_b, 0,
                              vec.loop[1]),
                        *slot(2, vec.d, 0, 0, 1, vec.loop[2]),
                    ]
                with m.Case(Op.REDUCE):
                    sumsq = red.rop == Rop.SUMSQ
                    m.d.comb += [
                        *slot(0, red.a, 0, 1, 0, red.loop[0]),
                        *slot(2, red.d, Mux(sumsq, 1, cdiv(red.cols)),
                              ~sumsq & (red.acc != Acc.OFF), 1, red.loop[1]),
                    ]
                with m.Case(Op.SOFTMAX_XENT):
                    m.d.comb += [
                        *slot(0, sx.a, 0, 1, 0, sx.loop[0]),
                        *slot(1, sx.b, cdiv(sx.rows), 1, 0, sx.loop[1]),
                        *slot(2, sx.d, 0, 0, 1, sx.loop[2]),
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
            return field, other, rd, wr, flag, pa, pb

        piped = self.latency > 0
        if piped:
            # From the next word as the sequencer loads it (``load``, ``instr_next``) into
            # registers that hold the word's picks while ``instr`` holds the word: stage 0
            # then starts at registers (the opcode's selects and the divisions' adders were
            # ahead of its multipliers and adders, the slowest paths from the sequencer's
            # instruction register in the FPGA builds)
            picked = word_picks(self.instr_next)
            held = [[Signal.like(x, name=f"w_{x.name}") for x in group] for group in picked]
            with m.If(self.load):
                m.d.sync += [h.eq(x) for hg, g in zip(held, picked) for h, x in zip(hg, g)]
            field, other, rd, wr, flag, pa, pb = held
        else:
            field, other, rd, wr, flag, pa, pb = word_picks(ins)
        prod = [Signal(WIDE, name=f"prod_lines{i}") for i in range(3)]
        if piped:
            # the products in stage 0 as RegisteredMul blocks: their operand registers load
            # what ``held`` loads, their product registers are stage 0's (on an ECP5 both
            # inside the DSP blocks, no route to or from a multiplier in the cycle it computes)
            m.d.comb += [prod[i].eq(registered_product(m, picked[5][i], picked[6][i],
                                                       ce_in=self.load, ce_out=1,
                                                       name=f"prod_lines{i}"))
                         for i in range(3)]
        else:
            m.d.comb += [prod[i].eq(pa[i] * pb[i]) for i in range(3)]

        def stage(sig, n, name):
            """``sig`` registered in stage ``n`` (0 or 1); itself without stages."""
            if not piped:
                return sig
            r = Signal.like(sig, name=f"s{n}_{name}")
            m.d.sync += r.eq(sig)
            return r

        # A range's end (one past its last line) is start + lines = field + offset + other +
        # span + prod: all but the product summed in stage 0 (from the held word, offset and
        # span), so that the multipliers feed their stage-0 registers without logic, and a
        # single adder, of that sum and the registered product, lies ahead of the bank masks
        # and the address check in stage 1 (lines: other + span, then + prod).
        start = [Signal(WIDE, name=f"start{i}") for i in range(PORTS)]
        other_span = [Signal(WIDE, name=f"other_span{i}") for i in range(PORTS)]
        end_np = [Signal(WIDE, name=f"end_noprod{i}") for i in range(PORTS)]
        for i in range(PORTS):
            m.d.comb += [start[i].eq(field[i] + Mux(flag[i], self.offset, 0)),
                         other_span[i].eq(other[i] + Mux(flag[i], self.span, 0)),
                         end_np[i].eq(start[i] + other_span[i])]

        # ---- stage 0 -> 1: starts, line counts, kinds, loop flags -----------------------------
        # The start outputs (registers with stages) take the start from the held inputs at
        # every cycle, so after one cycle they hold it: stage 1 reads them (no stage-0 copy).
        out = m.d.sync if piped else m.d.comb
        out += [self.ranges[i].start.eq(start[i]) for i in range(PORTS)]
        start = [self.ranges[i].start for i in range(PORTS)]
        end_np = [stage(x, 0, f"end_noprod{i}") for i, x in enumerate(end_np)]
        other_span = [stage(x, 0, f"other_span{i}") for i, x in enumerate(other_span)]
        rd0 = [stage(r, 0, f"rd{i}") for i, r in enumerate(rd)]
        wr0 = [stage(w, 0, f"wr{i}") for i, w in enumerate(wr)]
        flag0 = [stage(f, 0, f"flag{i}") for i, f in enumerate(flag)]
        span_nz0 = stage(self.span != 0, 0, "span_nonzero")

        # ---- ranges and bank masks (stage 1) ---------------------------------------------------
        present = [Signal(name=f"present{i}") for i in range(PORTS)]
        lines = [Signal(WIDE, name=f"lines{i}") for i in range(PORTS)]
        end = [Signal(WIDE, name=f"end{i}") for i in range(PORTS)]
        banks = [Signal(cfg.banks, name=f"banks{i}") for i in range(PORTS)]
        oor = []
        bank_bits = cfg.bank_bits
        # The compares of ``end`` with constants up to the scratchpad's end L = 2**k (a power
        # of two) on k + 1 bits: with both summands x (end_noprod) and n (the product) at most
        # L (each tested on its own, from its register), end = x + n is their (k+2)-bit sum.
        k = cfg.line_bits
        assert cfg.lines == 1 << k
        L = cfg.lines
        for i in range(PORTS):
            x, n = end_np[i], (prod[i] if i < len(prod) else 0)
            m.d.comb += [
                present[i].eq(rd0[i] | wr0[i]),
                lines[i].eq(n + other_span[i]),
                end[i].eq(x + n),                        # one past the last line
            ]
            end_lo = Signal(k + 2, name=f"end_low{i}")
            m.d.comb += end_lo.eq(x[:k + 1] + (n[:k + 1] if i < len(prod) else 0))
            n_gt = (n > L) if i < len(prod) else 0
            n_ge = (n[k:] != 0) if i < len(prod) else 0
            # end > L: one summand above L, else their narrow sum above it
            oor.append(present[i] & ((x > L) | n_gt | (end_lo > L)))
            first = Signal(WIDE, name=f"first_bank{i}")
            m.d.comb += first.eq(start[i] >> bank_bits)
            # lines != 0 without the adder (both summands >= 0)
            nonempty = ((n != 0) if i < len(prod) else 0) | (other_span[i] != 0)
            # bank b is touched when first <= b <= last, the last line's bank: last >= b is
            # end - 1 >= b * bank_depth, i.e. end > b * bank_depth (< L): true when a summand
            # is L or more, else the narrow sum's compare with the constant
            x_ge = x[k:] != 0
            m.d.comb += banks[i].eq(Cat(*[
                present[i] & nonempty
                & ((first == 0) if b == 0 else
                   ((first <= b) & (x_ge | n_ge | (end_lo > (b << bank_bits)))))
                for b in range(cfg.banks)]))

        # ---- stage 1 -> 2 ------------------------------------------------------------------------
        out_of_range = stage(Cat(*oor).any(), 1, "out_of_range")
        # The overlap checks (stage 2) compare only the low `nb_lines` bits: their ERR_ADDR
        # matters only when every range lies inside the scratchpad (an end past it is ERR_ADDR
        # already, and takes precedence over ERR_BANK), and then every start and end is
        # < 2**nb_lines.
        nb_lines = cfg.lines.bit_length()
        # one past the first iteration's lines (a loop's ranges are checked per iteration)
        # For each pair of ranges, stage 2's "loop ranges" choice (both loop flags and a
        # non-zero span) is a register of its own, from stage-0 registers. The two ends it
        # chooses between differ exactly when the whole ends do (both first-iteration ends
        # are the whole ends less the same span, modulo 2**nb_lines), so stage 2 compares
        # the registered ends with no select in front (flag -> select -> 13-bit compare ->
        # overlap -> d_status was the S = 4 FPGA core's routed critical path at b10d6b2,
        # 12.37 ns; registering the compares here instead put stage 1's two adders in front
        # of them: 15.03 ns routed at d35a271)
        pair_both = {}
        for i in range(PORTS):
            for j in range(i + 1, PORTS):
                both = stage(flag0[i] & flag0[j] & span_nz0, 1, f"ov_both{i}{j}")
                pair_both[i, j] = pair_both[j, i] = both
        first_end = [stage((end[i][:nb_lines] - Mux(flag0[i], self.span, 0)[:nb_lines])
                           [:nb_lines], 1, f"first_end{i}") for i in range(PORTS)]
        end = [stage(e[:nb_lines], 1, f"end{i}") for i, e in enumerate(end)]
        rd = [stage(r, 1, f"rd{i}") for i, r in enumerate(rd0)]
        wr = [stage(w, 1, f"wr{i}") for i, w in enumerate(wr0)]
        for i in range(PORTS):
            r = self.ranges[i]
            out += [r.lines.eq(lines[i]), r.read.eq(rd0[i]),
                    r.write.eq(wr0[i]), r.banks.eq(banks[i])]
        out += self.banks.eq(banks[0] | banks[1] | banks[2] | banks[3])

        # ---- bank conflicts and overlaps (stage 2) ---------------------------------------------
        sendrecv0 = stage(op == Op.SENDRECV, 0, "sendrecv")     # also the deep shape check's
        sendrecv = stage(sendrecv0, 1, "sendrecv")

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
                both = pair_both[i, j]           # flag[i] & flag[j] & span_nz, registered
                ri, rj = self.ranges[i], self.ranges[j]
                r1 = Signal(nb_lines, name=f"ov_r1_{i}{j}")
                s1 = Signal(nb_lines, name=f"ov_s1_{i}{j}")
                m.d.comb += [r1.eq(Mux(both, first_end[i], end[i])),
                             s1.eq(Mux(both, first_end[j], end[j]))]
                si, sj = ri.start[:nb_lines], rj.start[:nb_lines]
                # a SENDRECV's ranges may not overlap at all (hdl.core.isa.check_instruction).
                # The two compares as the sign of a subtract: a carry chain (the synthesis
                # maps compares to LUTs: four levels of them began the sequencer's d_status
                # path, 14.5 ns, at 827b689's S = 4 FPGA core)
                lt_ij = Signal(signed(nb_lines + 1), name=f"ov_lt_si_s1_{i}{j}")
                lt_ji = Signal(signed(nb_lines + 1), name=f"ov_lt_sj_r1_{i}{j}")
                m.d.comb += [lt_ij.eq(si - s1), lt_ji.eq(sj - r1)]
                # (si != sj from the starts' stage-0 registers, registered in stage 1: the
                # 12-bit compare is not in series with the stage-2 logic)
                ne = stage(si != sj, 1, f"ov_start_ne{i}{j}")
                # r1 != s1 is end[i] != end[j] (above)
                hit = lt_ij[-1] & lt_ji[-1] & (ne | (end[i] != end[j]) | sendrecv)
                overlap.append(ro & wo & hit)

        # ---- field and shape checks ----------------------------------------------------------
        dmax = (1 << cfg.dim_bits) - 1
        known = Signal(name="known_op")
        coll = cfg.collective        # None: no collective engine, ALLREDUCE is unknown
        m.d.comb += known.eq(Cat(*[op == o for o in Op.ALL
                                   if o not in Op.COLLECTIVE or coll is not None]).any())
        bad_field = Signal(name="bad_field")
        bad_shape = Signal(name="bad_shape")
        if coll is not None:
            words = Signal(16 + lg + 1, name="ar_words")        # an ALLREDUCE's words
            m.d.comb += words.eq(ar.lines * S)
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
                    bad_timeout = (ar.timeout == 0) | (ar.timeout >= (1 << coll.timeout_bits))
                    with m.If(ar.comp == 2):
                        # top-k (hdl.core.isa.check_allreduce): seg and width unchecked; the
                        # span and message-size checks are `deep_shape` below
                        if coll.topk is None:
                            m.d.comb += bad_field.eq(1)
                        else:
                            m.d.comb += [
                                bad_field.eq(bad_timeout | (ar.b < ar.a) | (ar.g < ar.a)),
                                bad_shape.eq(ar.lines == 0),
                            ]
                    with m.Else():
                        m.d.comb += [
                            bad_field.eq((ar.comp > 1) | (bfp & ~width_ok)
                                         | (bfp & (ar.rounding == 3)) | bad_timeout
                                         | (ar.seg * coll.ranks < ar.lines)),
                            bad_shape.eq((ar.lines == 0) | (ar.seg == 0)
                                         | (words > coll.depth)),
                        ]
                with m.Case(Op.SENDRECV):    # hdl.core.isa.check_sendrecv (span: deep_shape)
                    m.d.comb += [
                        bad_field.eq((sr.timeout == 0)
                                     | (sr.timeout >= (1 << coll.timeout_bits))
                                     | ((sr.sdir | sr.rdir) & (0 if coll.reverse else 1))),
                        bad_shape.eq((sr.lines == 0) & (sr.rlines == 0)),
                    ]

        # The collective ops' deep shape checks (a hull of three ranges, the top-k message's
        # size; two ranges' hull for a SENDRECV): their sums, hulls and spans in stage 0,
        # registered, and only the compares against the memory's depth and the message size
        # in stage 1, beside the range checks. (In one stage they were the ring core's slowest
        # routed path: the held instruction through the hull into `s0_bad_shape`.)
        deep_shape = Const(0, 1)
        if coll is not None:
            tk_kind = Const(0, 1)
            if coll.topk is not None:
                tk_m = message_words(m, words, coll.topk, name="ar_tk_m")
                ends = [Signal(WIDE, name=f"ar_tk_end{i}") for i in range(3)]
                m.d.comb += [ends[0].eq(ar.a + ar.lines), ends[1].eq(ar.b + ar.lines),
                             ends[2].eq(ar.g + ar.glines)]
                hi01 = Mux(ends[1] > ends[0], ends[1], ends[0])
                hull_span = Signal(WIDE, name="ar_tk_span")       # hull - a
                m.d.comb += hull_span.eq(Mux(ends[2] > hi01, ends[2], hi01) - ar.a)
                gwords = Signal(16 + lg + 1, name="ar_tk_gwords")
                m.d.comb += gwords.eq(ar.glines * S)
                tk_kind = stage((op == Op.ALLREDUCE) & (ar.comp == 2), 0, "ar_topk")
                hull_span = stage(hull_span, 0, "ar_tk_span")
                gwords = stage(gwords, 0, "ar_tk_gwords")
                tk_m = stage(tk_m, 0, "ar_tk_m")
                tk_bad = ((hull_span << lg) > coll.depth) | (gwords < coll.ranks * tk_m)
            else:
                tk_bad = Const(0, 1)
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
            sr_span = Signal(WIDE, name="sr_span")
            m.d.comb += sr_span.eq(hi - lo)
            sr_span = stage(sr_span, 0, "sr_span")
            deep_shape = Mux(tk_kind, tk_bad, sendrecv0 & ((sr_span << lg) > coll.depth))

        # the field and shape checks (stage 0), registered twice to meet the range checks
        known, bad_field = (stage(stage(v, 0, n), 1, n) for v, n in
                            ((known, "known_op"), (bad_field, "bad_field")))
        bad_shape = stage(stage(bad_shape, 0, "bad_shape") | deep_shape, 1, "bad_shape")
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
