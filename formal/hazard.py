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

import dataclasses

from amaranth.hdl import Array, Assert, Assume, Cat, Const, Cover, Module, ResetSignal, Signal
from amaranth.lib import data

from hdl.core.config import CoreConfig
from hdl.core.isa import INSTR, INSTR_BITS, Op, Status, check_program_for, encode
from hdl.core.sequencer import Sequencer
from hdl.optim.config import Op as OptOp

from hdl.lib.mustuse import mark_used

from .common import FormalWrapper, Proof, free_inputs, internal_signals, small_core_config

__all__ = ["HazardRule", "internal_signals", "PROOFS"]


class HazardRule(FormalWrapper):
    """Wrapper of :class:`Sequencer`: the scoreboard against a record of running work."""

    def __init__(self, config: CoreConfig, *, program=None, scoreboard_covers: bool = True,
                 coll_stall_cover: bool = False):
        self.config = self._check_config(config, CoreConfig)
        if program is not None and check_program_for(program, config)[0] != Status.OK:
            mark_used(self)
            raise ValueError(f"HazardRule.program fails the program check "
                             f"(status, pc) = {check_program_for(program, config)}")
        self.program = program
        #: the covers of the bank stall and the run to HALT (they need about 20 cycles:
        #: hazard_sequencer_witness reaches them); off, only the collective one remains
        self.scoreboard_covers = scoreboard_covers
        #: cover a collective instruction issuing after a hazard stall (a witness program's)
        self.coll_stall_cover = coll_stall_cover
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
        # a core with ranks >= 2 has a fourth unit, the collective engine (ALLREDUCE, SENDRECV)
        coll = self.config.collective is not None
        names = ("matmul", "vector", "optim") + (("coll",) if coll else ())
        U = len(names)
        run = [Signal(name=f"rec_run_{u}") for u in names]
        owns = [Signal(nb, name=f"rec_banks_{u}") for u in names]
        opt_step = Signal(name="rec_opt_stepping")

        if self.program is not None:
            # witness environment (a special case of the free one): the host writes this
            # program in cycles 0.., starts it once, writes no precision entry
            n = len(self.program)
            cyc = Signal(range(n + 2), name="env_cycle")
            with m.If(cyc != n + 1):
                m.d.sync += cyc.eq(cyc + 1)
            words = Array(Const(w, INSTR_BITS) for w in self.program)
            m.d.comb += [Assume(dut.prog_we == (cyc < n)), Assume(dut.start == (cyc == n)),
                         Assume(~dut.prec_we)]
            with m.If(cyc < n):
                m.d.comb += [Assume(dut.prog_waddr == cyc),
                             Assume(dut.prog_wdata == words[cyc])]
        # a unit reports completion only of a command it was given
        m.d.comb += [Assume(~dut.mm_rsp.valid | run[0]), Assume(~dut.vec_done | run[1])]

        mm_issue = dut.mm_cmd.valid & dut.mm_cmd.ready
        vec_issue = dut.vec_cmd.valid & dut.vec_cmd.ready
        opt_xfer = dut.opt_cmd.valid & dut.opt_cmd.ready
        opt_setreg = opt_xfer & (dut.opt_cmd.payload.op == OptOp.SETREG)
        opt_stepcmd = opt_xfer & (dut.opt_cmd.payload.op != OptOp.SETREG)
        fins = [dut.mm_rsp.valid, dut.vec_done, opt_step & ~dut.opt_busy]
        issues = [mm_issue, vec_issue, opt_setreg]
        if coll:
            m.d.comb += Assume(~dut.coll_rsp.valid | run[3])
            issues.append(dut.coll_cmd.valid & dut.coll_cmd.ready)
            fins.append(dut.coll_rsp.valid)
        for u in range(U):
            with m.If(issues[u]):
                m.d.sync += [run[u].eq(1), owns[u].eq(d_banks)]
            with m.Elif(fins[u]):
                m.d.sync += [run[u].eq(0), owns[u].eq(0)]
        with m.If(opt_stepcmd):
            m.d.sync += opt_step.eq(1)
        with m.Elif(opt_step & ~dut.opt_busy):
            m.d.sync += opt_step.eq(0)

        ir = data.View(INSTR, self.internal["ir"])
        ir_op = ir.op
        for u in range(U):
            with m.If(issues[u]):
                m.d.comb += Assert(~run[u], f"{names[u]}: issued while its unit runs")
                for v in range(U):
                    if v != u:
                        with m.If(run[v] & ~fins[v]):
                            m.d.comb += Assert((d_banks & owns[v]) == 0,
                                               f"{names[u]} issued on banks {names[v]} owns")
        with m.If(vec_issue & (ir_op == Op.SOFTMAX_XENT)):
            m.d.comb += Assert(~run[2], "SOFTMAX_XENT issued while an OPT runs")
        with m.If(opt_setreg):
            m.d.comb += Assert(~run[0], "OPT issued while a MATMUL runs")
        with m.If(dut.done & (dut.status == Status.OK)):
            m.d.comb += Assert(~Cat(*run).any(), "HALT before every unit finished")
        if coll:
            # (the args are a union: only an ALLREDUCE has a poison bit)
            with m.If(issues[3] & (ir_op == Op.ALLREDUCE) & ir.args.allreduce.poison):
                m.d.comb += Assert(~run[0] & ~run[1],
                                   "a poisoning ALLREDUCE issued while a MATMUL or VEC runs")
            with m.If(dut.done & (dut.status == Status.ERR_LINK)):
                m.d.comb += Assert(~Cat(*run).any(), "ERR_LINK before every unit finished")
            # nothing issues once an ALLREDUCE or a SENDRECV answered other than OK
            failed = Signal(name="rec_coll_failed")
            with m.If(dut.start):
                m.d.sync += failed.eq(0)
            with m.Elif(dut.coll_rsp.valid & (dut.coll_rsp.payload.status != 0)):
                m.d.sync += failed.eq(1)
            with m.If(failed):
                m.d.comb += Assert(~Cat(*issues).any(), "an instruction issued after ERR_LINK")
            m.d.comb += Cover(dut.done & (dut.status == Status.ERR_LINK),
                              "a run stops with ERR_LINK")

        stalled = Signal(name="rec_bank_stall_seen")
        with m.If(dut.counters.stall_bank != 0):
            m.d.sync += stalled.eq(1)
        issued = Signal(name="rec_issued_seen")
        with m.If(mm_issue | vec_issue | opt_setreg):
            m.d.sync += issued.eq(1)
        if coll and self.coll_stall_cover:
            m.d.comb += Cover(stalled & issues[3],
                              "a collective instruction issues after a hazard stall")
        if not self.scoreboard_covers:
            return
        m.d.comb += [
            Cover(dut.counters.stall_bank != 0, "an instruction waits for banks (hazard stall)"),
            Cover(stalled & (mm_issue | vec_issue | opt_setreg),
                  "an instruction issues after a hazard stall"),
            Cover(dut.done & (dut.status == Status.OK) & issued,
                  "a program with a unit instruction runs to HALT"),
        ]


#: the witness program: a MATMUL on banks 0-2, a VEC reading bank 2 (the MATMUL's output: it
#: must wait), HALT
WITNESS_PROGRAM = (
    encode(Op.MATMUL, mode=0, M=4, K=4, N=4, a=0, b=16, c=32, layer=0),
    encode(Op.VEC, vop=2, rows=1, cols=4, a=32, b=48, d=32),
    encode(Op.HALT),
)

#: the collective witness program: a MATMUL on banks 0-2, a poisoning ALLREDUCE of bank 3 (no
#: shared bank: only the poison rule makes it wait), HALT
COLL_WITNESS_PROGRAM = (
    encode(Op.MATMUL, mode=0, M=4, K=4, N=4, a=0, b=16, c=32, layer=0),
    encode(Op.ALLREDUCE, a=48, lines=2, seg=1, timeout=5, poison=1),
    encode(Op.HALT),
)

#: the SENDRECV witness program: a MATMUL writing bank 2, a SENDRECV sending those lines and
#: receiving into bank 3 (a read-after-write hazard on bank 2: it must wait), HALT
SENDRECV_WITNESS_PROGRAM = (
    encode(Op.MATMUL, mode=0, M=4, K=4, N=4, a=0, b=16, c=32, layer=0),
    encode(Op.SENDRECV, a=32, lines=2, b=48, rlines=2, timeout=5),
    encode(Op.HALT),
)

PROOFS = [
    Proof(name="hazard_sequencer", block="Sequencer (small_core_config: 4 banks x 16 lines, "
                                         "prog_depth 16)",
          prop="no issue on banks a running instruction owns, one instruction per unit, "
               "SOFTMAX_XENT/OPT ordering, HALT only when all units finished; any program, "
               "units abstracted (free ready/completion)",
          build=lambda: HazardRule(small_core_config()), depth=22, modes=("bmc",),
          covered_by="hazard_sequencer_witness"),
    # the covers of the free proof did not all finish in 600 s over any program (only the
    # run to HALT, at step 14): the same wrapper with one program written by the environment
    # (a special case of the free environment: assumptions added, none removed) reaches them
    Proof(name="hazard_sequencer_witness",
          block="Sequencer (small_core_config), the witness program",
          prop="covers of hazard_sequencer (hazard stall, issue after it, HALT) "
               "reached under a fixed program; its assertions hold as well",
          build=lambda: HazardRule(small_core_config(), program=WITNESS_PROGRAM), depth=28,
          modes=("bmc", "cover")),
    Proof(name="hazard_sequencer_coll_witness",
          block="Sequencer (small_core_config with ranks = 2), the collective witness program",
          prop="hazard_sequencer_coll's assertions under a MATMUL on banks 0-2 then a "
               "poisoning ALLREDUCE on bank 3 (it must wait for the MATMUL although its banks "
               "are free), HALT; cover: the run stops with ERR_LINK",
          build=lambda: HazardRule(dataclasses.replace(small_core_config(), ranks=2),
                                   program=COLL_WITNESS_PROGRAM, scoreboard_covers=False),
          depth=26, modes=("bmc", "cover")),
    Proof(name="hazard_sequencer_sendrecv_witness",
          block="Sequencer (small_core_config with ranks = 2), the SENDRECV witness program",
          prop="hazard_sequencer_coll's assertions under a MATMUL writing bank 2 then a "
               "SENDRECV sending bank 2's lines (it must wait for the MATMUL), HALT; covers: "
               "the SENDRECV issues after the hazard stall, the run stops with ERR_LINK",
          build=lambda: HazardRule(dataclasses.replace(small_core_config(), ranks=2),
                                   program=SENDRECV_WITNESS_PROGRAM, scoreboard_covers=False,
                                   coll_stall_cover=True),
          depth=26, modes=("bmc", "cover")),
    Proof(name="hazard_sequencer_coll",
          block="Sequencer (small_core_config with ranks = 2: the collective engine as a "
                "fourth unit)",
          prop="hazard_sequencer's properties over four units (ALLREDUCE and SENDRECV on the "
               "collective engine), a poisoning ALLREDUCE never issues while a MATMUL or VEC "
               "runs, ERR_LINK only when every unit finished, nothing issues after a "
               "collective instruction answered other than OK; any program",
          build=lambda: HazardRule(dataclasses.replace(small_core_config(), ranks=2),
                                   scoreboard_covers=False),
          depth=19, modes=("bmc", "cover")),
]
