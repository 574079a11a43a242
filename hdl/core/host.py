"""The host port of the training core: one command stream, one response stream (docs/core.md).

Commands (``host_cmd_layout``: ``op`` | ``addr`` | ``data``), one response each, in order:

=========  ===================================================  ===============================
op         effect                                               response ``data``
=========  ===================================================  ===============================
WRITE      scratchpad line ``addr`` := ``data`` (S words)       -
READ       -                                                    line ``addr``
PROG       program word ``addr`` := ``data[:128]``              -
PREC       precision entry ``addr = layer * 4 + mode`` :=       -
           ``data`` (``PREC_ENTRY``)
SETREG     optimizer register ``addr`` := ``data[:32]`` (a      -
           value the optimizer refuses -- update rule 3 in
           ``MODE``, ``N`` outside 1..depth -- answers
           ``BAD_VALUE``); passed on from a register,
           answered when the optimizer takes it
START      check and run the program; answers when it stops     ``err_pc`` (status: the
                                                                program's :class:`Status`)
REG        -                                                    register ``addr`` (``REGS``, or
                                                                a FAST statistic word from
                                                                ``STAT_REG_BASE``)
THRESH     FAST threshold ``addr = stat_slot(layer, mode,       -
           operand)`` := ``data[:32]`` (Q16.16)
=========  ===================================================  ===============================

Response ``status``: a program :class:`~hdl.core.isa.Status` for START, else :class:`HostStatus`.
A rejected command changes nothing. WRITE and READ stream at one line per cycle (a response per
cycle while ``rsp.ready`` is high). While a program runs no command is accepted (``cmd.ready``
is low) until START's response.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib.memport import LinePort
from ..lib.mustuse import used_if_rejected
from ..optim.config import Reg
from ..optim.engine import cmd_layout as opt_cmd_layout
from .config import CoreConfig
from .isa import INSTR_BITS, PREC_ENTRY

__all__ = ["HostOp", "HostStatus", "host_cmd_layout", "host_rsp_layout", "HostPort",
           "host_data_bits"]


class HostOp:
    WRITE, READ, PROG, PREC, SETREG, START, REG, THRESH = range(8)
    ALL = (WRITE, READ, PROG, PREC, SETREG, START, REG, THRESH)


class HostStatus:
    """Response status of a non-START command (START answers with a program ``Status``)."""
    OK = 0
    BAD_ADDR = 8    #: line, program word, precision entry or register index out of range
    BAD_VALUE = 9   #: invalid precision entry, or an optimizer register value the optimizer
                    #: refuses (update rule 3 in ``Reg.MODE``, ``Reg.N`` outside 1..depth)
    BAD_OP = 10     #: unknown opcode


def host_data_bits(config: CoreConfig) -> int:
    return max(32 * config.size, INSTR_BITS)


def host_cmd_layout(config: CoreConfig) -> data.StructLayout:
    return data.StructLayout({"op": 4, "addr": 16, "data": host_data_bits(config)})


def host_rsp_layout(config: CoreConfig) -> data.StructLayout:
    return data.StructLayout({"op": 4, "status": 4, "data": host_data_bits(config)})


class HostPort(wiring.Component):
    """Host command decoding for :class:`hdl.core.core.TrainingCore`.

    Members
    -------
    cmd : In(stream.Signature(host_cmd_layout(config)))
    rsp : Out(stream.Signature(host_rsp_layout(config)))
    mem : Out(LinePort)
        The host's scratchpad port. With ``config.spad_reg`` (a registered crossbar client:
        read data two cycles after ``r_en``) a ``READ``'s response comes a cycle later and
        holds the next command for that cycle, with ``config.spad_out_reg`` too (three
        cycles) two cycles later; a register's and a statistic word's (``reg_index`` and
        ``stat_en`` below) a cycle later too; every other answer comes the cycle after the
        command's acceptance.
    prog_we, prog_waddr, prog_wdata; prec_we, prec_waddr, prec_wdata; prec_bad (In) :
        to the sequencer.
    start : Out(1), running : In(1), done : In(1), status : In(4), err_pc : In(16)
    opt_cmd : Out(stream)
        SETREG to the optimizer (only while no program runs).
    reg_index : Out(16), reg_data : In(64), reg_count : int
        Register file read, indices ``0 .. reg_count - 1``: ``reg_index`` is the accepted
        command's address from a register (from the cycle after acceptance until the next
        command's), ``reg_data`` the core's answer ``reg_latency - 1`` cycles after that,
        taken into the response's register: a ``REG`` is answered ``reg_latency + 1`` cycles
        after acceptance with the register's value of the cycle after acceptance (the next
        command waits for it).
    stat_en : Out(1), stat_slot : Out(16), stat_rdata : In(128), stat_base, stat_count : int
        FAST statistic words ``stat_base .. stat_base + stat_count - 1`` (two per slot): a
        ``REG`` of one raises ``stat_en`` with the slot on ``stat_slot``; the statistic memory
        answers on ``stat_rdata`` ``stat_latency`` cycles later (held until the next
        ``stat_en``), and the response carries its low or high 64 bits from a register: the
        answer comes ``stat_latency + 1`` cycles after acceptance (the next command waits for
        it).
    thr_we, thr_waddr, thr_wdata : Out
        THRESH to the sequencer (``addr`` must be a slot of a layer below ``config.layers``
        and a mode below 3).
    opt_depth : int
        Words of the optimizer engine's range: ``SETREG N`` must be in ``1..opt_depth``.
    stat_latency : int
        Cycles from ``stat_en`` to the word on ``stat_rdata`` (1 or more).
    reg_latency : int
        1 (default): ``reg_data`` is a combinational mux of ``reg_index``; ``L > 1``: it
        shows the registers as of ``L - 1`` cycles before (a mux in ``L`` register steps).
    """

    def __init__(self, *, config: CoreConfig, reg_count: int, stat_base: int = 0,
                 stat_count: int = 0, opt_depth: int = 65536, stat_latency: int = 1,
                 reg_latency: int = 1):
        with used_if_rejected(self):
            for name, value in (("stat_latency", stat_latency), ("reg_latency", reg_latency)):
                if not isinstance(value, int) or isinstance(value, bool):
                    raise TypeError(f"HostPort.{name} must be an int, not {value!r}")
                if value < 1:
                    raise ValueError(f"HostPort.{name} must be >= 1, not {value}")
        self.stat_latency, self.reg_latency = stat_latency, reg_latency
        self.config, self.reg_count = config, reg_count
        self.stat_base, self.stat_count = stat_base, stat_count
        self.opt_depth = opt_depth
        db = host_data_bits(config)
        super().__init__({
            "cmd": In(stream.Signature(host_cmd_layout(config))),
            "rsp": Out(stream.Signature(host_rsp_layout(config))),
            "mem": Out(LinePort(addr_bits=config.line_bits, words=config.size)),
            "prog_we": Out(1), "prog_waddr": Out(range(config.prog_depth)),
            "prog_wdata": Out(INSTR_BITS),
            "prec_we": Out(1), "prec_waddr": Out(8), "prec_wdata": Out(PREC_ENTRY),
            "prec_bad": In(1),
            "start": Out(1), "running": In(1), "done": In(1), "status": In(4),
            "err_pc": In(16),
            "opt_cmd": Out(stream.Signature(opt_cmd_layout())),
            "reg_index": Out(16), "reg_data": In(64),
            "stat_en": Out(1), "stat_slot": Out(16), "stat_rdata": In(128),
            "thr_we": Out(1), "thr_waddr": Out(range(config.layers * 8)), "thr_wdata": Out(32),
        })
        self._db = db

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S = cfg.size
        c = self.cmd.payload
        r = self.rsp.payload

        rsp_valid = Signal(name="rsp_valid")
        rsp_read = Signal(name="rsp_is_read")      # data comes from the memory port
        rsp_data = Signal(self._db, name="rsp_data")
        rsp_stat = Signal(name="rsp_is_stat")      # data comes from the statistic memory
        rsp_word = Signal(name="rsp_stat_word")
        rsp_reg = Signal(name="rsp_is_reg")        # data comes from the register file
        waiting = Signal(name="waiting_run")
        # config.spad_reg (spad_out_reg): the memory port's read data comes two (three)
        # cycles after its r_en, so a READ's response waits one cycle (two) in read_wait
        # first (and holds the next command)
        extra = cfg.spad_latency - 1
        read_wait = Signal(name="read_wait")
        wait_left = Signal(range(max(extra, self.stat_latency - 1, self.reg_latency - 1) + 1),
                           name="read_wait_left")
        m.d.comb += [self.rsp.valid.eq(rsp_valid),
                     r.data.eq(Mux(rsp_read, self.mem.r_data, rsp_data))]
        with m.If(self.rsp.valid & self.rsp.ready):
            m.d.sync += rsp_valid.eq(0)

        op = c.op
        # A SETREG the host accepts waits in a register for the optimizer (`opt_pend`, its
        # response when the optimizer takes it): the optimizer's ready stays off the host's
        # command handshake, and the command's decode off the optimizer's register enables
        # (of the S = 8 FPGA build's end points over 10 ns by the estimate); no command is
        # taken while one waits there
        opt_pend = Signal(name="setreg_pending")
        can = Signal(name="can_accept")
        m.d.comb += can.eq(~waiting & ~read_wait & ~self.running & ~opt_pend
                           & (~rsp_valid | self.rsp.ready))
        m.d.comb += self.cmd.ready.eq(can)
        take = Signal(name="take")
        m.d.comb += take.eq(self.cmd.valid & can)
        opt_a = Signal.like(self.opt_cmd.payload.addr, name="setreg_addr")
        opt_d = Signal.like(self.opt_cmd.payload.data, name="setreg_data")
        m.d.comb += [self.opt_cmd.valid.eq(opt_pend), self.opt_cmd.payload.op.eq(0),
                     self.opt_cmd.payload.addr.eq(opt_a), self.opt_cmd.payload.data.eq(opt_d)]
        with m.If(opt_pend & self.opt_cmd.ready):
            m.d.sync += [opt_pend.eq(0), rsp_valid.eq(1)]

        line_ok = c.addr < cfg.lines
        m.d.comb += self.mem.r_en.eq(take & (op == HostOp.READ) & line_ok)
        m.d.comb += [
            self.mem.r_addr.eq(c.addr), self.mem.w_addr.eq(c.addr),
            self.mem.w_data.eq(c.data[:32 * S]),
            self.prog_waddr.eq(c.addr), self.prog_wdata.eq(c.data[:INSTR_BITS]),
            self.prec_waddr.eq(c.addr), self.prec_wdata.eq(c.data[:PREC_ENTRY.size]),
            self.thr_waddr.eq(c.addr), self.thr_wdata.eq(c.data[:32]),
        ]
        is_stat = Signal(name="reg_is_stat")
        m.d.comb += is_stat.eq((c.addr >= self.stat_base)
                               & (c.addr < self.stat_base + self.stat_count))
        stat_off = Signal(16, name="stat_offset")
        m.d.comb += [stat_off.eq(c.addr - self.stat_base), self.stat_slot.eq(stat_off[1:])]
        reg_ok = Signal(name="reg_ok")
        m.d.comb += reg_ok.eq((c.addr < self.reg_count) | is_stat)
        # a REG's index from a register: the command's decode and the register file's mux
        # into the response were one path (the host's rsp_data, 59 end points at 14.31 ns in
        # the S = 4 FPGA core at cca0f07); the response takes the mux's output a cycle later
        reg_q = Signal(16, name="reg_index_q")
        m.d.comb += self.reg_index.eq(reg_q)
        with m.If(take):
            # (a SETREG's address and data too, whatever the command: they reach the
            # optimizer only with setreg_pending, which only a SETREG sets, and no command is
            # taken while it is set; the decode and value checks stay off their enables,
            # 48 routed end points at 12.0 ns at 4d67e27)
            m.d.sync += [rsp_valid.eq(1), r.op.eq(op), rsp_read.eq(0), rsp_stat.eq(0),
                         rsp_reg.eq(0), rsp_data.eq(0), r.status.eq(HostStatus.OK),
                         reg_q.eq(c.addr), opt_a.eq(c.addr), opt_d.eq(c.data[:32])]
            with m.Switch(op):
                with m.Case(HostOp.WRITE):
                    with m.If(line_ok):
                        m.d.comb += self.mem.w_en.eq((1 << S) - 1)
                    with m.Else():
                        m.d.sync += r.status.eq(HostStatus.BAD_ADDR)
                with m.Case(HostOp.READ):
                    with m.If(line_ok):
                        m.d.sync += rsp_read.eq(1)
                        if extra:
                            m.d.sync += [rsp_valid.eq(0), read_wait.eq(1),
                                         wait_left.eq(extra - 1)]
                    with m.Else():
                        m.d.sync += r.status.eq(HostStatus.BAD_ADDR)
                with m.Case(HostOp.PROG):
                    with m.If(c.addr < cfg.prog_depth):
                        m.d.comb += self.prog_we.eq(1)
                    with m.Else():
                        m.d.sync += r.status.eq(HostStatus.BAD_ADDR)
                with m.Case(HostOp.PREC):
                    with m.If(c.addr >= cfg.layers * 4):
                        m.d.sync += r.status.eq(HostStatus.BAD_ADDR)
                    with m.Elif(self.prec_bad):
                        m.d.sync += r.status.eq(HostStatus.BAD_VALUE)
                    with m.Else():
                        m.d.comb += self.prec_we.eq(1)
                with m.Case(HostOp.SETREG):
                    # what the optimizer engine would ignore (setting its sticky error bit)
                    # is refused here, so that a rejected SETREG changes nothing
                    v = c.data[:32]
                    bad_value = (((c.addr == Reg.MODE) & (v[:2] == 3))
                                 | ((c.addr == Reg.N) & ((v == 0) | (v > self.opt_depth))))
                    with m.If(c.addr > max(Reg.ALL)):
                        m.d.sync += r.status.eq(HostStatus.BAD_ADDR)
                    with m.Elif(bad_value):
                        m.d.sync += r.status.eq(HostStatus.BAD_VALUE)
                    with m.Else():      # to the optimizer; answered when it takes it
                        m.d.sync += [opt_pend.eq(1), rsp_valid.eq(0)]
                with m.Case(HostOp.START):
                    m.d.comb += self.start.eq(1)
                    m.d.sync += [rsp_valid.eq(0), waiting.eq(1)]
                with m.Case(HostOp.THRESH):
                    with m.If((c.addr >= cfg.layers * 8) | (c.addr[1:3] == 3)):
                        m.d.sync += r.status.eq(HostStatus.BAD_ADDR)
                    with m.Else():
                        m.d.comb += self.thr_we.eq(1)
                with m.Case(HostOp.REG):
                    with m.If(is_stat):
                        # the statistic memory's word answers the next cycle; it waits a cycle
                        # in read_wait and the response carries it from rsp_data (a register:
                        # the block RAM's read data through the word selects into the
                        # response was the S = 4 FPGA core's routed critical path at
                        # 41e6f6d, 15.53 ns)
                        m.d.comb += self.stat_en.eq(1)
                        m.d.sync += [rsp_stat.eq(1), rsp_word.eq(stat_off[0]), rsp_valid.eq(0),
                                     read_wait.eq(1), wait_left.eq(self.stat_latency - 1)]
                    with m.Elif(reg_ok):
                        m.d.sync += [rsp_reg.eq(1), rsp_valid.eq(0), read_wait.eq(1),
                                     wait_left.eq(self.reg_latency - 1)]
                    with m.Else():
                        m.d.sync += r.status.eq(HostStatus.BAD_ADDR)
                with m.Default():
                    m.d.sync += r.status.eq(HostStatus.BAD_OP)
        with m.If(read_wait):
            with m.If(wait_left == 0):
                m.d.sync += [read_wait.eq(0), rsp_valid.eq(1)]
                with m.If(rsp_stat):
                    m.d.sync += [rsp_stat.eq(0),
                                 rsp_data.eq(Mux(rsp_word, self.stat_rdata[64:],
                                                 self.stat_rdata[:64]))]
                with m.If(rsp_reg):
                    m.d.sync += [rsp_reg.eq(0), rsp_data.eq(self.reg_data)]
            with m.Else():
                m.d.sync += wait_left.eq(wait_left - 1)
        with m.If(waiting & self.done):
            m.d.sync += [waiting.eq(0), rsp_valid.eq(1), r.op.eq(HostOp.START),
                         r.status.eq(self.status), rsp_read.eq(0), rsp_stat.eq(0),
                         rsp_data.eq(self.err_pc)]
        return m
