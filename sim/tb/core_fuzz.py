"""cocotb testbench: the training core's host protocol fuzzed on the generated Verilog
(docs/testing.md, "Fuzzing"): :func:`sim.tb.fuzz.fuzz_core` (seeded random raw host commands
and malformed programs, every response against :class:`sim.tb.fuzz.HostModel`, the whole
scratchpad compared at the end) over the cocotb transport of :mod:`sim.tb.core`, after every
named host-command edge case and program mutation once. The Amaranth-simulator tier runs the same on a small core
(tests/test_fuzz_core.py).

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
from sim.tb.fuzz import edge_commands, fuzz_core, program_commands


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
        # a fresh model assumes a zero scratchpad and program memory, which a reset does
        # not give: zero both first (through the stream itself, checked like any command)
        clear = ([(HostOp.WRITE, line, 0) for line in range(cfg.lines)]
                 + [(HostOp.PROG, pc, 0) for pc in range(cfg.prog_depth)])
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
