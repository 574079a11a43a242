"""The sequencer: program memory, whole-program check, issue with a bank scoreboard, the
counted loop, the precision table and the core's counters (docs/core.md)."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..array.engine import OP_START, counters_layout, rsp_layout
from ..bfp.stat import stat_layout
from ..array.engine import cmd_layout as mm_cmd_layout
from ..optim.config import Op as OptOp
from ..optim.config import Reg
from ..optim.engine import cmd_layout as opt_cmd_layout
from ..multi.collective import cmd_layout as coll_cmd_layout
from ..multi.collective import rsp_layout as coll_rsp_layout
from ..multi.config import CollOp, CollStatus
from .config import CoreConfig
from ..lib.dspmul import registered_product
from .adapt import AdaptRule
from .decoder import Decoder
from ..lib.memport import BLOCK_RAM
from .isa import (ADDR_BITS, INSTR, INSTR_BITS, PREC_ENTRY,
                  VECTOR_CMD, Op, Status, stat_slots)

__all__ = ["Sequencer", "COUNTERS", "counters_layout_core", "UNITS", "ADAPT_STEPS"]

#: Register steps of ADAPT's rule: a slot's width is decided this many cycles after the walk
#: reads its statistic and threshold; ``ADAPT`` takes ``stat_slots + ADAPT_STEPS`` cycles.
ADAPT_STEPS = AdaptRule.latency

#: The unit an instruction issues to (0 matmul, 1 vector, 2 optimizer, 3 collective; any other
#: opcode 4: none).
_UNIT_OF = {Op.MATMUL: 0, Op.VEC: 1, Op.REDUCE: 1, Op.SOFTMAX_XENT: 1, Op.OPT: 2,
            Op.ALLREDUCE: 3, Op.SENDRECV: 3}

#: Units the scoreboard tracks (index = bit of ``unit_busy``).
UNITS = ("matmul", "vector", "optim", "coll")

#: Counters the host can read (``REG`` index = position), ``(name, width, meaning)``.
COUNTERS = (
    ("cycles", 48, "cycles from START to the response (check included)"),
    ("check_cycles", 32, "cycles of the whole-program check"),
    ("instructions", 32, "instructions executed (loop bodies counted per iteration)"),
    ("matmul_busy", 48, "cycles the matmul engine runs an instruction"),
    ("vector_busy", 48, "cycles the vector unit runs an instruction"),
    ("optim_busy", 48, "cycles the optimizer engine runs an instruction"),
    ("overlap", 48, "cycles two or more units run at once"),
    ("idle", 48, "cycles after the check with no unit running (fetch, decode, loop control)"),
    ("array_beats", 48, "valid array beats of all MATMUL passes"),
    ("array_stalls", 48, "matmul pass cycles minus beats x beat cycles (fill, drain, stalls)"),
    ("macs", 48, "useful multiply-accumulates of all MATMUL passes"),
    ("stall_unit", 32, "cycles an instruction waited for its own unit"),
    ("stall_bank", 32, "cycles an instruction waited for banks owned by another unit"),
    ("stall_fence", 32, "cycles FENCE, ADAPT and HALT waited for the units"),
    ("stall_order", 32, "cycles SOFTMAX_XENT waited for the optimizer (loss scale) or OPT for "
                        "the matmul engine (converter flags) and, one-pass, the vector unit "
                        "(gradient-write snoop); with shared optimizer units, OPT and a "
                        "vector instruction for each other"),
    ("flags", 3, "sticky: bit 0 a NaN, bit 1 an Inf reached a BFP converter; bit 2 the matmul "
                 "engine or the vector unit wrote a NaN / Inf into a one-pass OPT's gradient "
                 "lines"),
    ("coll_busy", 48, "cycles the collective engine runs an ALLREDUCE or a SENDRECV (0 without "
                      "one)"),
    ("coll_hidden", 48, "cycles the collective engine runs while another unit runs (all-reduce "
                        "hidden behind compute)"),
)


def counters_layout_core() -> data.StructLayout:
    return data.StructLayout({name: width for name, width, _ in COUNTERS})


class Sequencer(wiring.Component):
    """Runs a program from its program memory.

    ``start`` (one cycle, while idle) first checks the whole program (instructions from pc 0 to
    the first ``HALT`` outside a loop, :func:`hdl.core.isa.check_program`,
    ``config.instr_cycles`` per instruction: 3, or 7 with the decoder's register stages). A program that fails runs nothing: ``done`` pulses with ``status`` and
    ``err_pc``. Otherwise it runs from pc 0: each instruction is fetched, decoded (loop offset
    added) and issued to its unit when

    * its unit is free (one instruction per unit at a time), and
    * none of the banks its ranges touch is owned by a running instruction (the instruction
      then owns them until its unit reports completion), and
    * for ``SOFTMAX_XENT``, the optimizer is idle (the gradient scale uses its loss scale);
      for ``OPT``, the matmul engine is idle (a NaN / Inf flagged by a BFP converter earlier
      in the run skips the step: the optimizer's ``skip_in``), and for a one-pass ``OPT``
      the vector unit too (every gradient write has been snooped: ``flags`` bit 2), and
    * with ``config.optim_shared_units`` (the FPGA build: the two share FP32 units), ``OPT``
      waits for the vector unit to be idle and a vector instruction for the optimizer.

    The program check also collects the **gradient window** ``gwin_lo .. gwin_hi - 1``: the
    lines of the ``g`` ranges of the one-pass ``OPT`` instructions (their hull; empty when
    there is none). The core snoops the matmul engine's and the vector unit's writes into it
    (``gwin_nonfinite``).

    So units overlap whenever the program's bank placement allows, and the result equals
    executing the instructions one after another. ``FENCE`` waits until every unit is idle;
    ``HALT`` waits too, then ``done`` pulses with ``status = OK``.

    Members
    -------
    start : In(1)
        A pulse starts the program one cycle later (the pulse is registered first); the
        precision and threshold writes below also land a cycle after their strobe.
    running : Out(1)
    done : Out(1)
        One-cycle pulse at the end of a run (or a rejected program).
    status : Out(4), err_pc : Out(range(prog_depth))
        Of the last run.
    prog_we, prog_waddr, prog_wdata : In
        Program memory write port (host; only while idle).
    prec_we, prec_waddr, prec_wdata : In
        Precision-table write (``prec_waddr = layer * 4 + mode``, ``PREC_ENTRY`` data).
    prec_bad : Out(1)
        The entry on ``prec_w*`` is invalid (width not in 2..max_mantissa even, rounding > 2,
        layer or mode out of range); such a write is ignored.
    mm_cmd, mm_rsp, mm_counters : the matmul engine's START commands, responses and counters.
    vec_cmd, vec_done : the vector unit.
    opt_cmd, opt_busy, scale_exp, opt_base : the optimizer engine (``SETREG N`` + ``STEP``),
        its busy, its loss-scale exponent, and the four region base lines (w, m, v, g) for
        its word-to-line adapters.
    unit_busy : Out(3)
        Matmul, vector, optimizer running (for tests and the host).
    gwin_lo, gwin_hi : Out(range(config.lines + 1))
        The gradient window of the running program (lines; empty when ``lo >= hi``).
    gwin_nonfinite : In(1)
        A NaN / Inf was written into the window (sets ``flags`` bit 2).
    counters : Out(counters_layout_core())
        ``COUNTERS``. ``flags`` is current; every other counter takes a cycle's events
        ``COUNTERS_LAG`` cycles later (from registers), so a run's counts are final
        ``COUNTERS_LAG`` cycles after its ``done`` pulse.
    thr_we, thr_waddr, thr_wdata : In
        Threshold-table write (``thr_waddr = stat_slot(layer, mode, operand)``, Q16.16);
        only while idle; the host rejects mode 3 and layers past ``config.layers``.
    mm_stat_load : Out(1), mm_stat_in : Out(stat_layout).array(2), mm_stat : In(stat_layout).array(2)
        The matmul engine's FAST statistics (docs/fast.md): when a ``MATMUL`` issues, the
        engine's two accumulators are loaded with the statistics of its ``(layer, mode)`` (from
        registers: ``mm_stat_load`` pulses the cycle after the issue, with the statistics read
        in the issue cycle; the pass's first group reaches a converter's output many cycles
        later, and no group of an earlier pass is left: the engine was idle); when its
        response arrives they are saved back. So each ``(layer, mode, operand)`` statistic
        covers every group its converter quantized since reset or the last ``ADAPT`` (runs do
        not clear them: an ``ADAPT`` at the top of a step's program decides from the previous
        step's statistics, and the host reads a step's statistics after its run).
    coll_cmd, coll_rsp, coll_base, coll_poison, coll_last : only with ``config.ranks >= 2``
        The collective engine (:class:`hdl.multi.collective.CollectiveEngine`): the
        ``ALLREDUCE`` command (``base`` 0, ``length = lines * S``, ``seg = seg * S`` words:
        word addresses relative to ``coll_base``, the first line, for the engine's
        word-to-line adapter), its response, ``coll_poison`` (held for the command: the
        ``ALLREDUCE`` has ``poison`` and this run's ``flags`` were set when it issued or the
        cycle after, which covers every write of the earlier instructions) and the
        last response (``coll_last``). A ``SENDRECV`` is the engine's ``SENDRECV`` command
        with ``coll_base`` the first line of its two ranges' hull and ``base`` / ``rbase``
        the ranges' word offsets from it. A response other than ``OK`` (a ``TIMEOUT``) stops
        the run with ``ERR_LINK`` at that instruction's pc once every unit is idle: what was
        issued before the response completes, nothing issues after it.
    stat_raddr : In(range(stat_slots(config))), stat_ren : In(1), stat_rdata : Out(stat_layout)
        The host's read of a saved statistic (``REG``): ``stat_rdata`` is slot ``stat_raddr``
        of the cycle ``stat_ren`` was high, ``STAT_READ_LATENCY`` cycles later (from a
        register), and held until the next ``stat_ren``.

    The statistics and the thresholds live in memories (per operand one statistic memory of
    ``layers * 4`` entries, one threshold memory of ``stat_slots`` entries; marked
    ``BLOCK_RAM``, so block RAM on an FPGA) with a *written* bit per slot in flip-flops: reset and ``ADAPT`` clear the bits,
    so an unwritten statistic reads as zero and an unwritten threshold as ``THRESH_NEVER``
    without a walk over the memories. Reads are synchronous: the sequencer addresses its read
    port ahead (from the instruction being decoded, and ``ADAPT``'s next slot), so
    no instruction takes a cycle more than with the slots in flip-flops.
    """

    #: Cycles after ``done`` until the counters other than ``flags`` hold the run's totals.
    COUNTERS_LAG = 1
    #: Cycles from ``stat_ren`` to the statistic on ``stat_rdata``.
    STAT_READ_LATENCY = 2

    def __init__(self, *, config: CoreConfig):
        if not isinstance(config, CoreConfig):
            raise TypeError(f"Sequencer.config must be a CoreConfig, not {config!r}")
        self.config = config
        acfg = config.array
        lb = config.line_bits
        super().__init__({
            "start": In(1),
            "running": Out(1),
            "done": Out(1),
            "status": Out(4),
            "err_pc": Out(range(config.prog_depth)),
            "prog_we": In(1),
            "prog_waddr": In(range(config.prog_depth)),
            "prog_wdata": In(INSTR_BITS),
            "prec_we": In(1),
            "prec_waddr": In(8),
            "prec_wdata": In(PREC_ENTRY),
            "prec_bad": Out(1),
            "mm_cmd": Out(stream.Signature(mm_cmd_layout(acfg))),
            "mm_rsp": In(stream.Signature(rsp_layout(acfg))),
            "mm_counters": In(counters_layout()),
            "vec_cmd": Out(stream.Signature(VECTOR_CMD)),
            "vec_done": In(1),
            "opt_cmd": Out(stream.Signature(opt_cmd_layout())),
            "opt_busy": In(1),
            "scale_exp": In(8),
            "opt_base": Out(lb).array(4),
            "unit_busy": Out(len(UNITS)),
            "gwin_lo": Out(range(config.lines + 1)),
            "gwin_hi": Out(range(config.lines + 1)),
            "gwin_nonfinite": In(1),
            "counters": Out(counters_layout_core()),
            "thr_we": In(1), "thr_waddr": In(range(stat_slots(config))), "thr_wdata": In(32),
            "mm_stat_load": Out(1),
            "mm_stat_in": Out(stat_layout(acfg.bfp(0))).array(2),
            "mm_stat": In(stat_layout(acfg.bfp(0))).array(2),
            "stat_raddr": In(range(stat_slots(config))), "stat_ren": In(1),
            "stat_rdata": Out(stat_layout(acfg.bfp(0))),
            **({} if config.collective is None else {
                "coll_cmd": Out(stream.Signature(coll_cmd_layout(config.collective))),
                "coll_rsp": In(stream.Signature(coll_rsp_layout(config.collective))),
                "coll_base": Out(lb), "coll_poison": Out(1),
                "coll_last": Out(coll_rsp_layout(config.collective)),
            }),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        nb = cfg.banks
        ctr = self.counters

        # ---- program memory -------------------------------------------------------------------
        prog = Memory(shape=INSTR_BITS, depth=cfg.prog_depth, init=[])
        m.submodules.prog = prog
        pw = prog.write_port()
        pr = prog.read_port()
        m.d.comb += [pw.addr.eq(self.prog_waddr), pw.data.eq(self.prog_wdata),
                     pw.en.eq(self.prog_we & ~self.running)]

        # ---- precision table ------------------------------------------------------------------
        n_prec = cfg.layers * 4
        prec = Array(Signal(PREC_ENTRY, name=f"prec_{i // 4}_{i % 4}",
                            init={"width_a": 8 if cfg.max_mantissa >= 8 else cfg.max_mantissa,
                                  "width_b": 8 if cfg.max_mantissa >= 8 else cfg.max_mantissa,
                                  "rounding": 0})
                     for i in range(n_prec))
        pwd = self.prec_wdata

        def width_ok(w):
            return (w >= 2) & (w <= cfg.max_mantissa) & ~w[0]

        m.d.comb += self.prec_bad.eq(~width_ok(pwd.width_a) | ~width_ok(pwd.width_b)
                                     | (pwd.rounding > 2) | (self.prec_waddr[:2] > 2)
                                     | (self.prec_waddr >= n_prec))
        # The host's writes (precision and threshold tables) and its START reach the tables
        # and the sequencer's state through registers, a cycle after the command is taken:
        # the host's command decode ends there instead of continuing into the table entries'
        # enables, the counters' clears and the state (of the S = 8 FPGA build's end points
        # over 10 ns by the estimate). No command can see the difference: the host takes one
        # command per cycle, a table is read only by a running program and a START's
        # response comes when the program stops.
        prec_w = Signal(name="prec_write")
        prec_wa = Signal.like(self.prec_waddr, name="prec_write_addr")
        prec_wd = Signal(PREC_ENTRY, name="prec_write_data")
        m.d.sync += [prec_w.eq(self.prec_we & ~self.prec_bad & ~self.running),
                     prec_wa.eq(self.prec_waddr), prec_wd.eq(pwd)]
        with m.If(prec_w):
            for i in range(n_prec):           # one compare per entry, not an Array write
                with m.If(prec_wa == i):
                    m.d.sync += prec[i].eq(prec_wd)

        # ---- FAST: threshold table and statistics (docs/fast.md) --------------------------------
        # Memories plus a written bit per slot (reset and ADAPT clear only the bits). The
        # sequencer's read ports are addressed one cycle ahead (`s_pair`, `t_slot` below) and are
        # transparent for the statistic saves, so the value read in a cycle is the slot's value
        # in that cycle.
        n_slots = stat_slots(cfg)
        n_pairs = n_slots // 2                       # (layer, mode) entries
        st_shape = self.mm_stat[0].shape()
        zero_stat = st_shape.const({})
        mm_layer = Signal(4, name="mm_layer")       # (layer, mode) of the running MATMUL
        mm_mode = Signal(2, name="mm_mode")
        s_pair = Signal(range(n_pairs), name="stat_rd_pair")   # sequencer read address (comb)
        # which of s_pair's sources addresses the read (RdSrc): the written bits are looked up
        # for each source beside the state's decode, not behind the address's select
        s_src = Signal(2, name="stat_rd_source")
        t_slot = Signal(range(n_slots), name="thr_rd_slot")
        save_pair = Signal(range(n_pairs), name="stat_save_pair")
        m.d.comb += save_pair.eq(Cat(mm_mode, mm_layer))
        save = Signal(name="stat_save")
        m.d.comb += save.eq(self.mm_rsp.valid)       # the pass is complete: save its statistics
        # ADAPT walks the slots one per cycle and decides each one ADAPT_STEPS cycles later
        adapt_k = Signal(range(n_slots + ADAPT_STEPS), name="adapt_slot")
        adapt_clear = Signal(name="adapt_clear")     # ADAPT clears slot adapt_k this cycle
        # adapt_k + 1 in a register of its own: the next slot addresses the statistic and
        # threshold memories' read ports, and the adder before their address mux was on the
        # S = 4 FPGA core's routed critical path at 2b7086d (13.97 ns, 43 end points)
        adapt_next = Signal(range(n_slots + ADAPT_STEPS + 1), name="adapt_next_slot")
        host_pair = Signal(range(n_pairs), name="stat_host_pair")
        m.d.comb += host_pair.eq(self.stat_raddr[1:])
        st_seq = []       # per operand: the sequencer's view of slot (s_pair of last cycle, op)
        st_raw = []       # per operand: the read port's data (AdaptRule selects after a register)
        ws_regs = []      # per operand: (its written bit as read, the written bits, cleared)
        st_host = []
        for op in range(2):
            mem = Memory(shape=st_shape, depth=n_pairs, init=[], attrs=BLOCK_RAM)
            m.submodules[f"stat_mem{op}"] = mem
            wp = mem.write_port()
            rs = mem.read_port(transparent_for=(wp,))
            rh = mem.read_port()
            m.d.comb += [wp.addr.eq(save_pair), wp.data.eq(self.mm_stat[op]), wp.en.eq(save),
                         rs.addr.eq(s_pair), rs.en.eq(1),
                         rh.addr.eq(host_pair), rh.en.eq(self.stat_ren)]
            written = Signal(n_pairs, name=f"stat_written{op}")
            cleared = Signal(name=f"stat_cleared{op}")
            m.d.comb += cleared.eq(adapt_clear & (adapt_k[0] == op))
            with m.If(save):
                m.d.sync += written.bit_select(save_pair, 1).eq(1)
            with m.If(cleared):
                m.d.sync += written.bit_select(adapt_k[1:], 1).eq(0)
            # the written bit as the read port sees it: this cycle's save or clear included
            # (registered below, once s_pair's sources are known)
            ws_q = Signal(name=f"stat_rd_written{op}")
            ws_regs.append((ws_q, written, cleared))
            # the host's pick of this operand and its written bit in one register: the
            # word is then one AND-OR of the two read ports
            wh_q = Signal(name=f"stat_host_pick{op}")
            with m.If(self.stat_ren):
                m.d.sync += wh_q.eq(written.bit_select(host_pair, 1)
                                    & (self.stat_raddr[0] == op))
            v = Signal(st_shape, name=f"stat_rd{op}")
            m.d.comb += v.eq(Mux(ws_q, rs.data, zero_stat))
            st_seq.append(v)
            st_raw.append(rs.data)
            vh = Signal(st_shape, name=f"stat_host{op}")
            m.d.comb += vh.eq(Mux(wh_q, rh.data, zero_stat))
            st_host.append(vh)
        # the host's word from a register a cycle after the memory's read data: the block
        # RAM's clock-to-out (5.83 ns in nextpnr's model) through the written-bit and operand
        # selects into the host's response was the S = 4 FPGA core's routed critical path at
        # 4d67e27 (14.42 ns); the two selects are one AND-OR now (39 end points at 11.37 ns
        # at 5204923, routed)
        host_read = Signal(name="stat_host_read")
        m.d.sync += host_read.eq(self.stat_ren)
        with m.If(host_read):
            m.d.sync += self.stat_rdata.eq(st_host[0].as_value() | st_host[1].as_value())

        thr_mem = Memory(shape=32, depth=n_slots, init=[], attrs=BLOCK_RAM)
        m.submodules.thr_mem = thr_mem
        thr_wp = thr_mem.write_port()
        thr_rp = thr_mem.read_port()
        thr_we = Signal(name="thr_write")
        thr_wa = Signal.like(self.thr_waddr, name="thr_write_addr")
        thr_wd = Signal.like(self.thr_wdata, name="thr_write_data")
        m.d.sync += [thr_we.eq(self.thr_we & ~self.running), thr_wa.eq(self.thr_waddr),
                     thr_wd.eq(self.thr_wdata)]          # registered, as the PREC write above
        m.d.comb += [thr_wp.addr.eq(thr_wa), thr_wp.data.eq(thr_wd),
                     thr_wp.en.eq(thr_we), thr_rp.addr.eq(t_slot), thr_rp.en.eq(1)]
        thr_written = Signal(n_slots, name="thr_written")
        with m.If(thr_we):
            m.d.sync += thr_written.bit_select(thr_wa, 1).eq(1)
        thr_wq = Signal(name="thr_rd_written")
        m.d.sync += thr_wq.eq(thr_written.bit_select(t_slot, 1))
        # the rule in ADAPT_STEPS register steps (AdaptRule: the product and the compare
        # were the FPGA build's slowest paths), then each precision entry's own raise (the
        # compare, the slot decode and a 32-entry read-modify-write in one cycle were 13.5 ns
        # by the estimate at S = 8, into all of the table's registers)
        a_walk = Signal(name="adapt_walk")           # ADAPT reads slot adapt_k this cycle
        rule = m.submodules.adapt_rule = AdaptRule(config=cfg)
        m.d.comb += [rule.valid.eq(a_walk), rule.slot.eq(adapt_k), rule.stat.eq(Cat(*st_raw)),
                     rule.present.eq(Cat(*(ws_q for ws_q, _, _ in ws_regs))),
                     rule.threshold.eq(thr_rp.data), rule.thr_present.eq(thr_wq)]
        raise_oh = rule.raise_slots
        for i in range(n_prec):      # raise the slot's width (by 2, up to max_mantissa)
            for op, field in ((0, "width_a"), (1, "width_b")):   # slot 2 * i + op
                w = prec[i][field]
                with m.If(raise_oh[2 * i + op] & (w < cfg.max_mantissa)):
                    m.d.sync += w.eq(w + 2)

        start_q = Signal(name="start_q")           # the host's START, registered (above)
        m.d.sync += start_q.eq(self.start)

        # ---- decoder ----------------------------------------------------------------------------
        dec = m.submodules.decoder = Decoder(config=cfg)

        # ---- state ------------------------------------------------------------------------------
        pc = Signal(range(cfg.prog_depth), name="pc")
        ir = Signal(INSTR, name="ir")
        checking = Signal(name="checking")
        in_loop = Signal(name="in_loop")
        loop_count = Signal(16, name="loop_count")
        loop_iter = Signal(16, name="loop_iter")
        loop_stride = Signal(ADDR_BITS, name="loop_stride")
        loop_offset = Signal(ADDR_BITS + 16, name="loop_offset")
        loop_start = Signal(range(cfg.prog_depth), name="loop_start")
        check_span = Signal(ADDR_BITS + 16, name="check_span")
        # ENDLOOP's decision and next values from registers: the loop registers change only
        # at START and in EXEC (LOOP, ENDLOOP), and an ENDLOOP's EXEC comes at least a FETCH
        # and a DECODE after that, so the values of the cycle before are the current ones (the
        # compare and adders were ahead of the loop registers' enables and resets, the S = 4
        # FPGA core's slowest routed group at cca0f07: 96 end points, 15.2 ns)
        loop_more = Signal(name="loop_more")
        loop_iter_next = Signal.like(loop_iter, name="loop_iter_next")
        loop_offset_next = Signal.like(loop_offset, name="loop_offset_next")
        m.d.sync += [loop_more.eq(loop_iter + 1 < loop_count),
                     loop_iter_next.eq(loop_iter + 1),
                     loop_offset_next.eq(loop_offset + loop_stride)]
        # decoded instruction (registered)
        d_status = Signal(4, name="d_status")
        d_banks = Signal(nb, name="d_banks")
        d_acc = Signal(name="d_acc")
        d_start = [Signal(ADDR_BITS + 1, name=f"d_start{i}") for i in range(4)]
        d_end3 = Signal(ADDR_BITS + 2, name="d_end3")      # one past the last line of slot 3
        piped = dec.latency > 0
        dec_wait = Signal(range(dec.latency + 1), name="decode_wait")

        # With decoder stages the program memory's read data is registered in the fabric
        # (READ) before LOAD: its block RAM's clock-to-out (4.3 ns in nextpnr's ECP5 model)
        # was ahead of the decoder's picks, the S = 4 build's routed critical path (15.95 ns
        # at d4e64b0, docs/core.md)
        word = Signal(INSTR_BITS, name="prog_word")
        if piped:
            m.d.sync += word.eq(pr.data)
        m.d.comb += [
            dec.instr.eq(ir if piped else pr.data),
            dec.instr_next.eq(word),            # LOAD: the decoder's picks of the next word
            dec.iter0.eq(loop_iter == 0),
        ]
        # the decoder's offset and span from registers: what they select from changes at
        # START, in CHECK and in EXEC, each followed by a FETCH before the next DECODE, so the
        # selection of the cycle before is the current one (the select was ahead of the
        # decoder's range-end adders, 92 end points at 11.2 ns routed at 4d67e27)
        m.d.sync += [dec.offset.eq(Mux(checking, 0, loop_offset)),
                     dec.span.eq(Mux(checking & in_loop, check_span, 0))]

        # scoreboard
        busy = [Signal(name=f"busy_{u}") for u in UNITS]
        owned = [Signal(nb, name=f"owned_{u}") for u in UNITS]
        m.d.comb += self.unit_busy.eq(Cat(*busy))
        owned_any = Signal(nb, name="owned_any")
        m.d.comb += owned_any.eq(owned[0] | owned[1] | owned[2] | owned[3])
        all_idle = Signal(name="all_idle")
        m.d.comb += all_idle.eq(~Cat(*busy).any())

        def finish(status, at_pc):
            return [self.done.eq(1), self.running.eq(0), self.status.eq(status),
                    self.err_pc.eq(at_pc)]

        m.d.sync += self.done.eq(0)

        # The counters (all but the sticky ``flags``) add what the logic below sets in
        # ``count`` a cycle later, from registers: the decode of a cycle's events (stalls,
        # issue, busy) ends in a register instead of continuing into the carry chains and
        # clears of 700+ counter bits (the S = 4 FPGA core's largest routed group over 10 ns,
        # 755 end points at 14.31 ns at cca0f07). A run's last increments land the cycle after
        # ``done`` (``COUNTERS_LAG``); the host reads a counter no earlier than that.
        mm_adds = {"array_beats": "beats", "array_stalls": "stalls", "macs": "macs"}
        counted = [name for name, _, _ in COUNTERS if name != "flags"]
        count = {name: Signal(len(self.mm_counters[mm_adds[name]]) if name in mm_adds else 1,
                              name=f"count_{name}") for name in counted}
        count_clear = Signal(name="count_clear")
        count_q = {name: Signal.like(s, name=f"count_{name}_q") for name, s in count.items()}
        count_clear_q = Signal(name="count_clear_q")
        m.d.sync += [count_clear_q.eq(count_clear),
                     *(count_q[name].eq(count[name]) for name in counted)]
        for name in counted:
            m.d.sync += ctr[name].eq(Mux(count_clear_q, 0, ctr[name] + count_q[name]))

        # unit completions
        m.d.comb += self.mm_rsp.ready.eq(1)
        mm_fin = self.mm_rsp.valid
        opt_wait = Signal(name="opt_wait")      # STEP accepted, waiting for busy to fall
        opt_fin = Signal(name="opt_fin")
        m.d.comb += opt_fin.eq(opt_wait & ~self.opt_busy)
        with m.If(opt_fin):
            m.d.sync += opt_wait.eq(0)
        coll = cfg.collective
        coll_fin = self.coll_rsp.valid if coll is not None else 0
        coll_err = Signal(name="coll_err")       # an ALLREDUCE answered TIMEOUT: stop the run
        coll_pc = Signal(range(cfg.prog_depth), name="coll_pc")
        # A poisoning ALLREDUCE samples `flags` as it is issued and again the cycle after (they
        # only grow: the same as the later sample). A snooped write shows in `flags`
        # SNOOP_LATENCY = 3 cycles after it (hdl.core.core), and the ALLREDUCE can issue 2
        # cycles after the vector unit's last write (its `busy` down); the engine's first read
        # of word 0 comes three or more cycles after it took the command.
        poison_arm = Signal(name="coll_poison_arm")
        if coll is not None:
            m.d.comb += self.coll_rsp.ready.eq(1)
            with m.If(poison_arm):
                m.d.sync += [poison_arm.eq(0),
                             self.coll_poison.eq(self.coll_poison | (ctr.flags != 0))]
            with m.If(coll_fin):
                m.d.sync += self.coll_last.eq(self.coll_rsp.payload)
                with m.If(self.coll_rsp.payload.status != CollStatus.OK):
                    m.d.sync += coll_err.eq(1)
        for u, fin in ((0, mm_fin), (1, self.vec_done), (2, opt_fin), (3, coll_fin)):
            with m.If(fin):
                m.d.sync += [busy[u].eq(0), owned[u].eq(0)]
        with m.If(mm_fin):
            c = self.mm_counters
            m.d.comb += [count["array_beats"].eq(c.beats), count["array_stalls"].eq(c.stalls),
                         count["macs"].eq(c.macs)]
        with m.If(self.running):
            m.d.sync += ctr.flags.eq(ctr.flags | Cat(mm_fin & self.mm_rsp.payload.invalid,
                                                     mm_fin & self.mm_rsp.payload.overflow,
                                                     self.gwin_nonfinite))

        # unit commands (payloads from the registered instruction + decoded starts)
        mmi = ir.args.matmul
        pe = prec[Cat(mmi.mode, mmi.layer)]
        if piped:
            # the precision entry from a register: the instruction is loaded (LOAD) at least
            # one DECODE cycle before it can issue, and the table changes only while no
            # program runs (host) or in ADAPT, which ends before the next fetch; so the lookup
            # of the cycle before is the entry, and the table's mux stays off the path into
            # the matmul engine's command checks
            pe_q = Signal(PREC_ENTRY, name="mm_prec_entry")
            m.d.sync += pe_q.eq(pe)
            pe = pe_q
        mp = self.mm_cmd.payload
        m.d.comb += [
            mp.op.eq(OP_START), mp.mode.eq(mmi.mode), mp.M.eq(mmi.M), mp.K.eq(mmi.K),
            mp.N.eq(mmi.N), mp.width_a.eq(pe.width_a), mp.width_b.eq(pe.width_b),
            mp.rounding.eq(pe.rounding), mp.accumulate.eq(d_acc),
            mp.base_a.eq(d_start[0]), mp.base_b.eq(d_start[1]), mp.base_c.eq(d_start[2]),
        ]
        # the load leaves from registers: the issue logic and the statistic memories' read
        # data stay off the path into the quantizers' accumulators (their exponent compare is
        # made as the load arrives, hdl.bfp.stat)
        stat_load_now = Signal(name="mm_stat_load_now")
        m.d.sync += self.mm_stat_load.eq(stat_load_now)
        for op in range(2):
            m.d.sync += self.mm_stat_in[op].eq(st_seq[op])
        # the statistic read port looks at the registered instruction's (layer, mode) by
        # default; DECODE addresses the instruction being decoded (without decoder stages: the
        # program memory's word; with them ir, loaded in LOAD), EXEC of ADAPT and the ADAPT
        # walk the next slot (below)
        m.d.comb += [s_pair.eq(Cat(mmi.mode, mmi.layer)), s_src.eq(0)]
        # s_pair's sources, in s_src's order: the registered instruction's (layer, mode), the
        # program memory's word's (DECODE without decoder stages), slot 0 (EXEC of ADAPT),
        # ADAPT's next slot. Each source's written bit is looked up on its own and s_src picks
        # one (the select of s_pair by the state, then a lookup by it, was the S = 4 FPGA
        # core's slowest estimated path, 16.6 ns at f46b7d2)
        dmm = INSTR(pr.data).args.matmul
        sources = [Value.cast(v)[:len(s_pair)] for v in (
            Cat(mmi.mode, mmi.layer), Cat(dmm.mode, dmm.layer), adapt_next[1:])]
        sources.insert(2, Const(0, len(s_pair)))

        def written_at(written, cleared, pair):
            return Mux(save & (save_pair == pair), 1,
                       Mux(cleared & (adapt_k[1:] == pair), 0, written.bit_select(pair, 1)))
        for ws_q, written, cleared in ws_regs:
            m.d.sync += ws_q.eq(Array(written_at(written, cleared, src)
                                      for src in sources)[s_src])
        vp = self.vec_cmd.payload
        m.d.comb += [vp.op.eq(ir.op), vp.acc.eq(d_acc),
                     vp.gscale.eq(ir.args.softmax.imm + (self.scale_exp << 23))]
        # the unit sees effective addresses: copy the args with the loop offset applied
        args_eff = Signal.like(ir.args, name="args_eff")
        m.d.comb += args_eff.eq(ir.args)
        with m.Switch(ir.op):
            with m.Case(Op.VEC):
                m.d.comb += [args_eff.vec.a.eq(d_start[0]), args_eff.vec.b.eq(d_start[1]),
                             args_eff.vec.d.eq(d_start[2])]
            with m.Case(Op.REDUCE):
                m.d.comb += [args_eff.reduce.a.eq(d_start[0]),
                             args_eff.reduce.d.eq(d_start[2])]
            with m.Case(Op.SOFTMAX_XENT):
                m.d.comb += [args_eff.softmax.a.eq(d_start[0]),
                             args_eff.softmax.b.eq(d_start[1]),
                             args_eff.softmax.d.eq(d_start[2]),
                             args_eff.softmax.e.eq(d_start[3])]
        m.d.comb += vp.args.eq(args_eff)
        op_cmd = self.opt_cmd.payload
        opt_phase = Signal(name="opt_phase")    # 0: SETREG N, 1: STEP (STEP1 when one_pass)
        m.d.comb += [
            op_cmd.op.eq(Mux(opt_phase, Mux(ir.args.opt.one_pass, OptOp.STEP1, OptOp.STEP),
                             OptOp.SETREG)),
            op_cmd.addr.eq(Reg.N), op_cmd.data.eq(ir.args.opt.count),
        ]

        coll_start = Signal.like(d_start[0], name="coll_start")   # the engine's word 0
        if coll is not None:
            ar = ir.args.allreduce
            sr = ir.args.sendrecv
            cp = self.coll_cmd.payload
            S = cfg.size
            lg = (S - 1).bit_length()
            with m.If(ir.op == Op.SENDRECV):
                # word addresses relative to the first line of the two ranges' hull
                # (hdl.core.isa.sendrecv_span); an empty range's base is 0
                with m.If(sr.lines == 0):
                    m.d.comb += coll_start.eq(d_start[1])
                with m.Elif((sr.rlines == 0) | (d_start[0] < d_start[1])):
                    m.d.comb += coll_start.eq(d_start[0])
                with m.Else():
                    m.d.comb += coll_start.eq(d_start[1])
                m.d.comb += [
                    cp.op.eq(CollOp.SENDRECV), cp.timeout.eq(sr.timeout),
                    cp.base.eq(Mux(sr.lines == 0, 0, (d_start[0] - coll_start) << lg)),
                    cp.length.eq(sr.lines * S),
                    cp.rbase.eq(Mux(sr.rlines == 0, 0, (d_start[1] - coll_start) << lg)),
                    cp.rlength.eq(sr.rlines * S), cp.sdir.eq(sr.sdir), cp.rdir.eq(sr.rdir),
                ]
            with m.Else():
                # top-k: the residual (b) and the gather buffer (g) at or after a
                m.d.comb += [cp.op.eq(CollOp.ALLREDUCE), cp.base.eq(0),
                             cp.length.eq(ar.lines * S), cp.seg.eq(ar.seg * S),
                             cp.timeout.eq(ar.timeout), cp.comp.eq(ar.comp),
                             cp.width.eq(ar.width), cp.rounding.eq(ar.rounding),
                             coll_start.eq(d_start[0]),
                             cp.rbase.eq((d_start[1] - d_start[0]) << lg),
                             cp.gbase.eq((d_start[2] - d_start[0]) << lg)]

        # ---- FSM ------------------------------------------------------------------------------
        # The issue's decode of ir (its unit, the ordering rules' op tests) is registered as
        # ir is loaded (ir_load): EXEC's issue condition starts at these registers and the
        # scoreboard's, not at ir's opcode compares (the sequencer's instruction register
        # through the decode, the optimizer ownership and the vector command's valid into the
        # vector unit's state and address registers was 13.0-13.6 ns routed at 41e6f6d)
        unit_of = Signal(3, name="unit_of", init=_UNIT_OF.get(0, 4))   # ir resets to 0
        ir_is_sx = Signal(name="ir_is_softmax")
        ir_is_opt = Signal(name="ir_is_opt")
        ir_opt_one_pass = Signal(name="ir_opt_one_pass")
        ir_ar_poison = Signal(name="ir_allreduce_poison")

        # The check pass's loop span, (count - 1) * stride: with decoder stages a
        # RegisteredMul loading the word as ir does (LOAD), its product ready a DECODE cycle
        # later, before EXEC (on an ECP5 both registers inside the DSP block: the product
        # between ir and check_span, through the subtraction, was one multiplier between
        # fabric registers)
        if piped:
            nxt = INSTR(word).args.loop
            loop_span = registered_product(m, nxt.count - 1, nxt.stride, ce_in=dec.load,
                                           ce_out=1, name="loop_span")
        else:
            loop_span = (ir.args.loop.count - 1) * ir.args.loop.stride

        def ir_load(src):
            """Load ``ir`` with the instruction word ``src`` and its issue decode."""
            v = INSTR(src)
            unit = Const(4, 3)
            for op, u in _UNIT_OF.items():
                unit = Mux(v.op == op, u, unit)
            return [ir.eq(src), unit_of.eq(unit), ir_is_sx.eq(v.op == Op.SOFTMAX_XENT),
                    ir_is_opt.eq(v.op == Op.OPT), ir_opt_one_pass.eq(v.args.opt.one_pass),
                    ir_ar_poison.eq((v.op == Op.ALLREDUCE) & v.args.allreduce.poison)]

        unit_free = Signal(name="unit_free")
        m.d.comb += unit_free.eq(~Array(busy)[unit_of])
        banks_free = Signal(name="banks_free")
        m.d.comb += banks_free.eq((d_banks & owned_any) == 0)
        # SOFTMAX_XENT reads the loss scale an OPT may change; OPT reads the converter flags
        # of every earlier MATMUL (skip_in), a one-pass OPT also the snooped gradient writes
        # of every earlier MATMUL and vector instruction
        order_ok = Signal(name="order_ok")
        m.d.comb += order_ok.eq((~ir_is_sx | ~busy[2])
                                & (~ir_is_opt | ~busy[0])
                                & (~ir_is_opt | ~ir_opt_one_pass | ~busy[1])
                                # a poisoning ALLREDUCE reads the run's final flags
                                & (~ir_ar_poison | ~(busy[0] | busy[1])))
        if self.config.optim_shared_units:
            # the optimizer and the vector unit share FP32 units: one runs at a time
            take_turns = Signal(name="units_take_turns")
            m.d.comb += take_turns.eq(((unit_of != 2) | ~busy[1])
                                      & ((unit_of != 1) | ~busy[2]))
            scale_ok = Signal(name="order_and_units_ok")
            m.d.comb += scale_ok.eq(order_ok & take_turns)
        else:
            scale_ok = order_ok
        can_issue = Signal(name="can_issue")
        m.d.comb += can_issue.eq(unit_free & banks_free & scale_ok)
        in_exec = Signal(name="in_exec")
        # the units' command valids (EXEC's issue below, where unit_of < 4 implies the
        # opcode switch's default case): from registers through the scoreboard only
        issue_ok = Signal(name="issue_ok")
        m.d.comb += [issue_ok.eq(in_exec & ~coll_err & can_issue),
                     self.mm_cmd.valid.eq(issue_ok & (unit_of == 0)),
                     self.vec_cmd.valid.eq(issue_ok & (unit_of == 1))]
        if coll is not None:
            m.d.comb += self.coll_cmd.valid.eq(issue_ok & (unit_of == 3))

        with m.If(self.running):
            m.d.comb += count["cycles"].eq(1)
            with m.If(checking):
                m.d.comb += count["check_cycles"].eq(1)
            with m.Elif(all_idle):
                m.d.comb += count["idle"].eq(1)
        for u, name in enumerate(UNITS):
            with m.If(busy[u]):
                m.d.comb += count[f"{name}_busy"].eq(1)
        with m.If(sum(b.as_unsigned() for b in busy) >= 2):
            m.d.comb += count["overlap"].eq(1)
        with m.If(busy[3] & (busy[0] | busy[1] | busy[2])):
            m.d.comb += count["coll_hidden"].eq(1)

        def next_pc():
            return [pc.eq(pc + 1)]

        with m.FSM(name="seq"):
            with m.State("IDLE"):
                with m.If(start_q):
                    m.d.sync += [self.running.eq(1), checking.eq(1), pc.eq(0), in_loop.eq(0),
                                 check_span.eq(0), loop_offset.eq(0), loop_iter.eq(0),
                                 self.status.eq(Status.OK), self.err_pc.eq(0),
                                 self.gwin_lo.eq(cfg.lines), self.gwin_hi.eq(0),
                                 coll_err.eq(0)]
                    m.d.comb += count_clear.eq(1)
                    m.d.sync += ctr.flags.eq(0)
                    m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += [pr.addr.eq(pc), pr.en.eq(1)]
                m.next = "READ" if piped else "DECODE"
            if piped:
                with m.State("READ"):     # the memory's word into prog_word (fabric)
                    m.next = "LOAD"
                with m.State("LOAD"):     # the word into ir, the decoder's held input
                    m.d.sync += [*ir_load(word), dec_wait.eq(0)]
                    m.d.comb += dec.load.eq(1)
                    m.next = "DECODE"
            with m.State("DECODE"):   # dec.latency cycles with its input held, then its outputs
                if piped:
                    m.d.sync += dec_wait.eq(dec_wait + 1)
                else:
                    m.d.comb += [s_pair.eq(Cat(dmm.mode, dmm.layer)), s_src.eq(1)]
                    m.d.sync += ir_load(pr.data)
                with m.If(dec_wait == dec.latency):
                    m.d.sync += [d_status.eq(dec.status), d_banks.eq(dec.banks),
                                 d_acc.eq(dec.acc)]
                    m.d.sync += [d_start[i].eq(dec.ranges[i].start) for i in range(4)]
                    m.d.sync += d_end3.eq(dec.ranges[3].start + dec.ranges[3].lines)
                    with m.If(checking):
                        m.next = "CHECK"
                    with m.Else():
                        m.next = "EXEC"
            with m.State("CHECK"):
                last_pc = pc == cfg.prog_depth - 1
                with m.If((d_status == Status.OK) & (ir.op == Op.OPT) & ir.args.opt.one_pass):
                    # the gradient window: hull of the one-pass OPTs' g lines
                    with m.If(d_start[3] < self.gwin_lo):
                        m.d.sync += self.gwin_lo.eq(d_start[3])
                    with m.If(d_end3 > self.gwin_hi):
                        m.d.sync += self.gwin_hi.eq(d_end3)
                with m.If(d_status != Status.OK):
                    m.d.sync += finish(d_status, pc)
                    m.next = "IDLE"
                with m.Elif(ir.op == Op.LOOP):
                    with m.If(in_loop):
                        m.d.sync += finish(Status.ERR_LOOP, pc)
                        m.next = "IDLE"
                    with m.Elif(last_pc):
                        m.d.sync += finish(Status.ERR_NO_HALT, pc)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [in_loop.eq(1), *next_pc(), check_span.eq(loop_span)]
                        m.next = "FETCH"
                with m.Elif(ir.op == Op.ENDLOOP):
                    with m.If(~in_loop):
                        m.d.sync += finish(Status.ERR_LOOP, pc)
                        m.next = "IDLE"
                    with m.Elif(last_pc):
                        m.d.sync += finish(Status.ERR_NO_HALT, pc)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [in_loop.eq(0), check_span.eq(0), *next_pc()]
                        m.next = "FETCH"
                with m.Elif(ir.op == Op.HALT):
                    with m.If(in_loop):
                        m.d.sync += finish(Status.ERR_LOOP, pc)
                        m.next = "IDLE"
                    with m.Else():       # checked: run from pc 0
                        m.d.sync += [checking.eq(0), pc.eq(0), in_loop.eq(0)]
                        m.next = "FETCH"
                with m.Elif(last_pc):
                    m.d.sync += finish(Status.ERR_NO_HALT, pc)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += next_pc()
                    m.next = "FETCH"
            with m.State("EXEC"):
                m.d.comb += in_exec.eq(1)
                with m.If(coll_err):     # an ALLREDUCE timed out: drain, then stop
                    with m.If(all_idle):
                        m.d.sync += finish(Status.ERR_LINK, coll_pc)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.comb += count["stall_fence"].eq(1)
                with m.Else():
                    with m.Switch(ir.op):
                        with m.Case(Op.HALT, Op.FENCE):
                            with m.If(all_idle):
                                m.d.comb += count["instructions"].eq(1)
                                with m.If(ir.op == Op.HALT):
                                    m.d.sync += finish(Status.OK, 0)
                                    m.next = "IDLE"
                                with m.Else():
                                    m.d.sync += next_pc()
                                    m.next = "FETCH"
                            with m.Else():
                                m.d.comb += count["stall_fence"].eq(1)
                        with m.Case(Op.ADAPT):
                            m.d.comb += [s_pair.eq(0), s_src.eq(2), t_slot.eq(0)]
                            with m.If(all_idle):
                                m.d.sync += [adapt_k.eq(0), adapt_next.eq(1)]
                                m.next = "ADAPT"
                            with m.Else():
                                m.d.comb += count["stall_fence"].eq(1)
                        with m.Case(Op.LOOP):
                            m.d.sync += [in_loop.eq(1), loop_count.eq(ir.args.loop.count),
                                         loop_stride.eq(ir.args.loop.stride), loop_iter.eq(0),
                                         loop_offset.eq(0), loop_start.eq(pc + 1), *next_pc()]
                            m.d.comb += count["instructions"].eq(1)
                            m.next = "FETCH"
                        with m.Case(Op.ENDLOOP):
                            m.d.comb += count["instructions"].eq(1)
                            with m.If(loop_more):
                                m.d.sync += [loop_iter.eq(loop_iter_next), pc.eq(loop_start),
                                             loop_offset.eq(loop_offset_next)]
                            with m.Else():
                                m.d.sync += [in_loop.eq(0), loop_iter.eq(0), loop_offset.eq(0),
                                             *next_pc()]
                            m.next = "FETCH"
                        with m.Default():
                            with m.If(~unit_free):
                                m.d.comb += count["stall_unit"].eq(1)
                            with m.Elif(~banks_free):
                                m.d.comb += count["stall_bank"].eq(1)
                            with m.Elif(~scale_ok):
                                m.d.comb += count["stall_order"].eq(1)
                            with m.Else():
                                with m.Switch(unit_of):
                                    with m.Case(0):
                                        with m.If(self.mm_cmd.ready):
                                            m.d.comb += stat_load_now.eq(1)
                                            m.d.sync += [busy[0].eq(1), owned[0].eq(d_banks),
                                                         mm_layer.eq(mmi.layer),
                                                         mm_mode.eq(mmi.mode)]
                                            m.next = "ISSUED"
                                    with m.Case(1):
                                        with m.If(self.vec_cmd.ready):
                                            m.d.sync += [busy[1].eq(1), owned[1].eq(d_banks)]
                                            m.next = "ISSUED"
                                    with m.Case(2):
                                        m.d.sync += [busy[2].eq(1), owned[2].eq(d_banks),
                                                     opt_phase.eq(0)]
                                        m.d.sync += [self.opt_base[i].eq(d_start[i])
                                                     for i in range(4)]
                                        m.next = "OPT"
                                    if coll is not None:
                                        with m.Case(3):
                                            with m.If(self.coll_cmd.ready):
                                                m.d.sync += [
                                                    busy[3].eq(1), owned[3].eq(d_banks),
                                                    coll_pc.eq(pc),
                                                    self.coll_base.eq(coll_start),
                                                    self.coll_poison.eq(
                                                        ir_ar_poison & (ctr.flags != 0)),
                                                    poison_arm.eq(ir_ar_poison)]
                                                m.next = "ISSUED"
            with m.State("ADAPT"):    # one slot per cycle (r > threshold raises its width,
                # decided ADAPT_STEPS cycles later, above), then ADAPT_STEPS cycles to finish
                with m.If(adapt_k < n_slots):
                    m.d.comb += [a_walk.eq(1), adapt_clear.eq(1)]
                m.d.comb += [s_pair.eq(adapt_next[1:]), s_src.eq(3),
                             t_slot.eq(adapt_next)]
                m.d.sync += [adapt_k.eq(adapt_next), adapt_next.eq(adapt_next + 1)]
                with m.If(adapt_k == n_slots - 1 + ADAPT_STEPS):
                    m.d.comb += count["instructions"].eq(1)
                    m.d.sync += next_pc()
                    m.next = "FETCH"
            with m.State("OPT"):      # SETREG N, then STEP; the unit stays busy until done
                m.d.comb += self.opt_cmd.valid.eq(1)
                with m.If(self.opt_cmd.ready):
                    with m.If(~opt_phase):
                        m.d.sync += opt_phase.eq(1)
                    with m.Else():
                        m.d.sync += opt_wait.eq(1)
                        m.next = "ISSUED"
            with m.State("ISSUED"):
                m.d.comb += count["instructions"].eq(1)
                m.d.sync += next_pc()
                m.next = "FETCH"
        return m
