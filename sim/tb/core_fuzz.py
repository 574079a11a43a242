"""cocotb testbench: the training core's host protocol fuzzed on the generated Verilog
(docs/testing.md, "Fuzzing"): :func:`sim.tb.fuzz.fuzz_core` (seeded random raw host commands
and malformed programs, every response against :class:`sim.tb.fuzz.HostModel`, the whole
scratchpad compared at the end) over the cocotb transport of :mod:`sim.tb.core`, after every
named host-command edge case and program mutation once. The Amaranth-simulator tier runs the same on a small core
(tests/test_fuzz_core.py). ``directed_program`` sends :func:`sim.tb.directed.directed_commands`
(every FAST slot, precision entry and ``(layer, mode)``; the vector unit on FP32 special values)
the same way (tests/test_coverage_cocotb.py).

Environment (tests/test_fuzz_core_cocotb.py, ``make fuzz``): ``TB_FUZZ_SEEDS`` (comma-separated
seeds, one stream each, the core reset between them), ``TB_FUZZ_N`` (commands per stream),
``TB_IDLE`` / ``TB_STALL`` (host-stream idle / backpressure).
"""
from __future__ import annotations

import os
import random

import cocotb

from hdl.core.config import CoreConfig
from hdl.core.host import HostOp
from sim.tb.cocotb_stream import reset, start_clock
from sim.tb.core import CocotbTransport
from sim.tb.directed import directed_commands
from sim.tb.fuzz import clear_commands, edge_commands, fuzz_core, program_commands


@cocotb.test()
async def random_host_commands(dut):
    env = os.environ.get
    cfg = CoreConfig.preset(env("TESSERA_PRESET", "tiny"))
    seeds = [int(s) for s in env("TB_FUZZ_SEEDS", "1").split(",")]
    n = int(env("TB_FUZZ_N", "300"))
    start_clock(dut)
    dut.cmd__valid.value = 0
    totals = {}
    for seed in seeds:
        await reset(dut)
        tr = CocotbTransport(dut, seed=seed, idle_prob=float(env("TB_IDLE", "0")),
                             stall_prob=float(env("TB_STALL", "0")))
        tr.start()
        clear = clear_commands(cfg)
        stats = await fuzz_core(cfg, tr, seed=seed, n=n,
                                cmds=edge_commands(cfg) + program_commands(random.Random(seed),
                                                                           cfg),
                                pre=clear)
        tr.stop()
        for k, v in stats["statuses"].items():
            totals[k] = totals.get(k, 0) + v
        dut._log.info(f"seed {seed}: {stats['sent']} commands ({len(clear)} clearing, {n} "
                      f"random, then the mutations and the read-back), {stats['runs_ok']} runs, "
                      f"{stats['runs_rejected']} rejected programs, {stats['rejected']} "
                      f"rejected commands")
    dut._log.info(f"responses by (kind, status): {dict(sorted(totals.items()))}")
    assert totals.get(("START", 0), 0) >= 1 and totals.get(("host", 10), 0) >= 1, totals


@cocotb.test()
async def directed_program(dut):
    """:func:`sim.tb.directed.directed_commands` after a reset and a clear, every response
    and the whole scratchpad against the model (:func:`sim.tb.fuzz.fuzz_core`); every program
    must end ``OK``."""
    env = os.environ.get
    cfg = CoreConfig.preset(env("TESSERA_PRESET", "tiny"))
    start_clock(dut)
    dut.cmd__valid.value = 0
    await reset(dut)
    tr = CocotbTransport(dut, seed=5, idle_prob=float(env("TB_IDLE", "0")),
                         stall_prob=float(env("TB_STALL", "0")))
    tr.start()
    cmds = directed_commands(cfg)
    runs = sum(op == HostOp.START for op, _, _ in cmds)
    stats = await fuzz_core(cfg, tr, seed=0, n=0, cmds=cmds, pre=clear_commands(cfg),
                            run_deadline=200_000)
    tr.stop()
    dut._log.info(f"{stats['sent']} commands, {stats['runs_ok']} runs, {tr.cycles} cycles")
    assert stats["runs_ok"] == runs and stats["runs_rejected"] == 0 and stats["rejected"] == 0, \
        stats
