"""cocotb testbenches: the matmul engine's and the optimizer engine's command streams fuzzed on
their generated Verilog (docs/testing.md, "Fuzzing"), the same generators and references as
the Amaranth-simulator tier (tests/test_fuzz_engines.py, :mod:`sim.tb.fuzz`) with more
commands and random idle cycles / backpressure on the streams. Environment: ``TB_FUZZ_SEED``,
``TB_FUZZ_N`` (commands).
"""
from __future__ import annotations

import os
import random

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge, with_timeout

from hdl.array.config import ArrayConfig
from hdl.optim.config import OptimConfig, unpack_status
from sim.tb.cocotb_stream import StreamDriver, StreamMonitor, reset, start_clock
from sim.tb.core import CLOCK_NS, CocotbTransport
from sim.tb.fuzz import fuzz_matmul_engine, fuzz_optim_engine


def _env():
    env = os.environ.get
    return (env("TESSERA_PRESET", "tiny"), int(env("TB_FUZZ_SEED", "1")),
            int(env("TB_FUZZ_N", "500")))


@cocotb.test()
async def matmul_engine_random_commands(dut):
    preset, seed, n = _env()
    cfg = ArrayConfig.preset(preset)
    start_clock(dut)
    dut.cmd__valid.value = 0
    await reset(dut)
    tr = CocotbTransport(dut, seed=seed, idle_prob=0.2, stall_prob=0.2)
    tr.start()
    stats = await fuzz_matmul_engine(cfg, tr, seed=seed, n=n, deadline=5_000_000)
    dut._log.info(f"responses by (op, status): {dict(sorted(stats.items()))}")
    assert stats.get((2, 0), 0) >= 1, stats


class CocotbOptimPort:
    """The optimizer engine's streams under cocotb (the ``port`` of
    :func:`sim.tb.fuzz.fuzz_optim_engine`), every wait with a deadline of ``deadline`` cycles."""

    def __init__(self, dut, seed: int, deadline: int = 100_000):
        self.dut, self.deadline = dut, deadline
        self.cmd = StreamDriver(dut, "cmd", rng=random.Random(seed))
        self.wdata = StreamDriver(dut, "wdata", idle_prob=0.2, rng=random.Random(seed + 1))
        self.rdata = StreamMonitor(dut, "rdata", stall_prob=0.3, rng=random.Random(seed + 2))

    async def send(self, payload):
        await with_timeout(self.cmd.send(payload), self.deadline * CLOCK_NS, "ns")

    async def send_words(self, words):
        await with_timeout(self.wdata.send_all(words), self.deadline * CLOCK_NS, "ns")

    async def get_words(self, count):
        return await self.rdata.wait_for(count, timeout_cycles=self.deadline)

    async def wait_idle(self):
        await ReadOnly()
        if self.dut.busy.value == 1:
            await with_timeout(FallingEdge(self.dut.busy), self.deadline * CLOCK_NS, "ns")
        await RisingEdge(self.dut.clk)

    def status(self) -> dict:
        return unpack_status(self.dut.status.value.to_unsigned())


@cocotb.test()
async def optim_engine_random_commands(dut):
    preset, seed, n = _env()
    cfg = OptimConfig.preset(preset)
    start_clock(dut)
    await reset(dut)
    port = CocotbOptimPort(dut, seed)
    port.rdata.start()
    seen = await fuzz_optim_engine(cfg, port, seed=seed, n=n)
    dut._log.info(f"{n} commands: {seen}")
    assert seen["refused"] >= 1 and seen["steps"] >= 1, seen
