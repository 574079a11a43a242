"""Proof 4: the sequencer's hazard rule (``hdl.core.sequencer.Sequencer``; docs/core.md).

Rule: an instruction is issued to its unit only when that unit is free and no instruction
still running on another unit touches one of its scratchpad banks (so no region is read or
written before an earlier instruction that writes or reads it has completed); a
``SOFTMAX_XENT`` never issues while an ``OPT`` runs, an ``OPT`` never while a ``MATMUL``
runs; ``HALT`` ends the run only when every unit has finished.

The units are abstracted: their command ``ready`` and completion signals (``mm_rsp.valid``,
``vec_done``, ``opt_busy``) are free every cycle (``AnySeq``), except that a unit reports a
completion only while it runs a command it was given. The program and the precision table are
whatever the host writes while the core is idle (free ``prog_*``/``prec_*`` inputs), so every
program of up to 16 instructions is covered within the depth.

The wrapper keeps its **own** record of the running instructions, from the observable
handshakes only: an instruction starts on a unit when its command transfers (for ``OPT``, the
``SETREG``; it runs until ``opt_busy`` is low after its ``STEP``) and ends with that unit's
completion; with each it records the banks the instruction touches. Those banks are read from
the sequencer's decoded instruction (``d_banks``, the :class:`hdl.core.decoder.Decoder`'s
bank set, which ``tests/test_core_decoder.py`` checks against the ISA model): the proof is of
the scoreboard (issue gating, ownership, release), not of the address decoding.
"""
from __future__ import annotations

from amaranth.hdl import Assert, Assume, Cover, Module, ResetSignal, Signal
from amaranth.hdl._ast import Assign, Switch
from amaranth.lib import data

from hdl.core.config import CoreConfig
from hdl.core.isa import INSTR, Op, Status
from hdl.core.sequencer import Sequencer
from hdl.optim.config import Op as OptOp

from hdl.lib.mustuse import mark_used

from .common import FormalWrapper, Proof, free_inputs, small_core_config

__all__ = ["HazardRule", "internal_signals", "PROOFS"]


def internal_signals(module: Module, names) -> dict:
    """``{name: Signal}`` of the named signals used in an elaborated ``module``'s statements.

    Lets a wrapper observe state the DUT keeps inside its ``elaborate`` (read only; the DUT is
    unchanged). Raises ``KeyError`` naming what is missing, so a rename cannot pass silently.
    """
    module._flush()
    found = {}

    def walk(stmts):
        for stmt in stmts:
            if isinstance(stmt, Assign):
                for sig in stmt.lhs._lhs_signals():
                    if sig.name in names:
                        found.setdefault(sig.name, sig)
            elif isinstance(stmt, Switch):
                for _patterns, body, _src_loc in stmt.cases:
                    walk(body)

    for stmts in module._statements.values():
        walk(stmts)
    missing = set(names) - set(found)
    if missing:
        raise KeyError(f"internal_signals: {sorted(missing)} not found in the module")
    return found


class HazardRule(FormalWrapper):
    """Wrapper of :class:`Sequencer`: the scoreboard against a record of running work."""

    def __init__(self, config: CoreConfig):
        self.config = self._check_config(config, CoreConfig)
        super().__init__(Sequencer(config=config))

    def elaborate(self, platform):
        m = Module()
        inner = mark_used(self.dut).elaborate(platform)
        self.internal = internal_signals(inner, ("d_banks", "ir"))
        m.submodules.dut = inner
        m.d.comb += Assume(~ResetSignal("sync"))
        self.properties(m)
        return m

    def properties(self, m: Module):
        dut, nb = self.dut, self.config.banks
        free_inputs(m, dut)
        d_banks = self.internal["d_banks"]
        run = [Signal(name=f"rec_run_{u}") for u in ("matmul", "vector", "optim")]
        owns = [Signal(nb, name=f"rec_banks_{u}") for u in ("matmul", "vector", "optim")]
        opt_step = Signal(name="rec_opt_stepping")

        # a unit reports completion only of a command it was given
        m.d.comb += [Assume(~dut.mm_rsp.valid | run[0]), Assume(~dut.vec_done | run[1])]

        mm_issue = dut.mm_cmd.valid & dut.mm_cmd.ready
        vec_issue = dut.vec_cmd.valid & dut.vec_cmd.ready
        opt_xfer = dut.opt_cmd.valid & dut.opt_cmd.ready
        opt_setreg = opt_xfer & (dut.opt_cmd.payload.op == OptOp.SETREG)
        opt_stepcmd = opt_xfer & (dut.opt_cmd.payload.op != OptOp.SETREG)
        fins = [dut.mm_rsp.valid, dut.vec_done, opt_step & ~dut.opt_busy]
        issues = [mm_issue, vec_issue, opt_setreg]
        for u in range(3):
            with m.If(issues[u]):
                m.d.sync += [run[u].eq(1), owns[u].eq(d_banks)]
            with m.Elif(fins[u]):
                m.d.sync += [run[u].eq(0), owns[u].eq(0)]
        with m.If(opt_stepcmd):
            m.d.sync += opt_step.eq(1)
        with m.Elif(opt_step & ~dut.opt_busy):
            m.d.sync += opt_step.eq(0)

        ir_op = data.View(INSTR, self.internal["ir"]).op
        names = ("matmul", "vector", "optim")
        for u in range(3):
            with m.If(issues[u]):
                m.d.comb += Assert(~run[u], f"{names[u]}: issued while its unit runs")
                for v in range(3):
                    if v != u:
                        with m.If(run[v] & ~fins[v]):
                            m.d.comb += Assert((d_banks & owns[v]) == 0,
                                               f"{names[u]} issued on banks {names[v]} owns")
        with m.If(vec_issue & (ir_op == Op.SOFTMAX_XENT)):
            m.d.comb += Assert(~run[2], "SOFTMAX_XENT issued while an OPT runs")
        with m.If(opt_setreg):
            m.d.comb += Assert(~run[0], "OPT issued while a MATMUL runs")
        with m.If(dut.done & (dut.status == Status.OK)):
            m.d.comb += Assert(~(run[0] | run[1] | run[2]), "HALT before every unit finished")

        stalled = Signal(name="rec_bank_stall_seen")
        with m.If(dut.counters.stall_bank != 0):
            m.d.sync += stalled.eq(1)
        issued = Signal(name="rec_issued_seen")
        with m.If(mm_issue | vec_issue | opt_setreg):
            m.d.sync += issued.eq(1)
        m.d.comb += [
            Cover(dut.counters.stall_bank != 0, "an instruction waits for banks (hazard stall)"),
            Cover(stalled & (mm_issue | vec_issue | opt_setreg),
                  "an instruction issues after a hazard stall"),
            Cover(mm_issue & run[1], "MATMUL overlaps a running vector instruction"),
            Cover(vec_issue & run[0], "a vector instruction overlaps a running MATMUL"),
            Cover(dut.done & (dut.status == Status.OK) & issued,
                  "a program with a unit instruction runs to HALT"),
        ]


PROOFS = [
    Proof(name="hazard_sequencer", block="Sequencer (small_core_config: 4 banks x 16 lines, "
                                         "prog_depth 16)",
          prop="no issue on banks a running instruction owns, one instruction per unit, "
               "SOFTMAX_XENT/OPT ordering, HALT only when all units finished; any program, "
               "units abstracted (free ready/completion)",
          build=lambda: HazardRule(small_core_config()), depth=22),
]
