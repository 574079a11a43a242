"""cocotb testbench of the FP32 natural-log unit (``fp32_log``).

:class:`TB` holds the driver (:class:`~sim.cocotb_stream.StreamDriver` on ``i``), the monitor
(:class:`~sim.cocotb_stream.StreamMonitor` on ``o``), the golden model
(:class:`sim.fp32_log.FP32Log`, bit-exact) and the scoreboard (:meth:`TB.check`). Bulk random
runs use :meth:`TB.stream_fast` (one transfer per cycle, one trigger per cycle, so 100,000
vectors take seconds); the backpressure/idle and reset tests use the shared driver and monitor.

Environment: ``TESSERA_PRESET``, ``TESSERA_VECTORS`` (random vectors, default 100000),
``TESSERA_BENCH_OUT`` (JSON path; enables :func:`bench_throughput`, skipped otherwise).
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from hdl.fp32.log_config import FP32LogConfig
from sim.cocotb_stream import StreamDriver, StreamMonitor, reset, start_clock
from sim.fp32 import SPECIALS, random_fp32
from sim.fp32_log import FP32Log, measure_log_accuracy, random_operands, special_operands

PRESET = os.environ.get("TESSERA_PRESET", "default")
VECTORS = int(os.environ.get("TESSERA_VECTORS", "100000"))
BENCH_OUT = os.environ.get("TESSERA_BENCH_OUT", "")
SEED = 44


class TB:
    """Driver, monitor, golden model and scoreboard."""

    def __init__(self, dut, *, idle_prob: float = 0.0, stall_prob: float = 0.0, seed: int = 0):
        self.dut = dut
        self.config = FP32LogConfig.preset(PRESET)
        self.model = FP32Log(self.config)
        self.latency = self.model.latency
        self.rng = np.random.default_rng(SEED * 1000 + seed)
        prng = random.Random(SEED * 1000 + seed)
        self.driver = StreamDriver(dut, "i", idle_prob=idle_prob, rng=prng)
        self.monitor = StreamMonitor(dut, "o", stall_prob=stall_prob, rng=prng)
        self.checked = 0

    async def start(self):
        start_clock(self.dut)
        await reset(self.dut)

    def random_payloads(self, n: int) -> list[int]:
        return [int(a) for a in random_operands(self.rng, n, base=random_fp32)["a"]]

    def special_payloads(self) -> list[int]:
        return [int(a) for a in special_operands(SPECIALS)["a"]]

    def check(self, inputs: list[int], outputs: list[int], what: str) -> None:
        expected = self.model.expected_payloads(inputs)
        assert len(outputs) == len(expected), f"{what}: {len(outputs)} results for {len(inputs)}"
        bad = [k for k, (g, e) in enumerate(zip(outputs, expected)) if g != e]
        if bad:
            lines = [f"  #{k}: {self.model.describe(inputs[k])}: got {outputs[k]:#010x}, "
                     f"expected {expected[k]:#010x}" for k in bad[:10]]
            raise AssertionError(f"fp32_log {what}: {len(bad)} of {len(inputs)} mismatches\n"
                                 + "\n".join(lines))
        self.checked += len(inputs)

    async def stream(self, payloads: list[int], what: str) -> None:
        """Shared driver (random idle) and monitor (random backpressure); check everything."""
        self.monitor.start()
        await self.driver.send_all(payloads)
        outputs = await self.monitor.wait_for(len(payloads),
                                              timeout_cycles=50 * len(payloads) + 1000)
        self.monitor.stop()
        await ClockCycles(self.dut.clk, self.latency + 3)
        assert not self.monitor.queue, f"{what}: extra results {list(self.monitor.queue)}"
        self.check(payloads, outputs, what)

    async def stream_fast(self, payloads: list[int], what: str) -> int:
        """One transfer per cycle in and out; returns the cycles used."""
        dut = self.dut
        dut.o__ready.value = 1
        outputs: list[int] = []
        k, cycles, n = 0, 0, len(payloads)
        limit = n + self.latency + 20
        while len(outputs) < n:
            if k < n:
                dut.i__valid.value = 1
                dut.i__payload.value = payloads[k]
            else:
                dut.i__valid.value = 0
            await ReadOnly()
            if k < n and dut.i__ready.value == 1:
                k += 1
            if dut.o__valid.value == 1:
                outputs.append(dut.o__payload.value.to_unsigned())
            await RisingEdge(dut.clk)
            cycles += 1
            assert cycles <= limit, f"{what}: {len(outputs)} of {n} after {cycles} cycles"
        dut.i__valid.value = 0
        self.check(payloads, outputs, what)
        return cycles


async def measure_latency(dut, payload: int) -> int:
    """Edges from the input transfer to the output transfer of a single operation."""
    dut.o__ready.value = 1
    dut.i__valid.value = 0
    await ClockCycles(dut.clk, 30)
    dut.i__valid.value = 1
    dut.i__payload.value = payload
    await ReadOnly()
    assert dut.i__ready.value == 1
    await RisingEdge(dut.clk)
    dut.i__valid.value = 0
    edges = 0
    while True:
        await ReadOnly()
        if dut.o__valid.value == 1:
            break
        await RisingEdge(dut.clk)
        edges += 1
        assert edges < 200, "no output"
    await RisingEdge(dut.clk)
    return edges + 1


@cocotb.test()
async def test_specials(dut):
    """Every named special (the shared FP32 specials + the log specials: zeros, subnormals,
    1 and its neighbours, table ends, ±Inf, NaNs), back to back, then with idle/backpressure."""
    tb = TB(dut)
    await tb.start()
    payloads = tb.special_payloads()
    await tb.stream_fast(payloads, "specials")
    tb2 = TB(dut, idle_prob=0.3, stall_prob=0.3, seed=1)
    await tb2.stream(payloads, "specials with idle/backpressure")
    dut._log.info(f"fp32_log: 2 x {len(payloads)} special vectors ok")


@cocotb.test()
async def test_random(dut):
    """``TESSERA_VECTORS`` random operands (100,000 by default), one per cycle, bit-exact."""
    tb = TB(dut, seed=2)
    await tb.start()
    payloads = tb.random_payloads(VECTORS)
    cycles = await tb.stream_fast(payloads, "random")
    assert cycles == VECTORS + tb.latency, f"throughput: {cycles} cycles for {VECTORS}"
    dut._log.info(f"fp32_log: {VECTORS} random vectors in {cycles} cycles ok")


@cocotb.test()
async def test_backpressure(dut):
    """Random operands with random idle (input) and backpressure (output) at four rates."""
    for k, (idle, stall) in enumerate([(0.0, 0.5), (0.5, 0.0), (0.3, 0.3), (0.1, 0.8)]):
        tb = TB(dut, idle_prob=idle, stall_prob=stall, seed=10 + k)
        if k == 0:
            await tb.start()
        await tb.stream(tb.random_payloads(1500), f"idle {idle} stall {stall}")


@cocotb.test()
async def test_latency_and_throughput(dut):
    """One operation alone takes exactly ``latency`` cycles; 500 back to back take
    ``500 + latency``."""
    tb = TB(dut, seed=3)
    await tb.start()
    lat = await measure_latency(dut, tb.random_payloads(1)[0])
    assert lat == tb.latency, f"latency {lat}, published {tb.latency}"
    cycles = await tb.stream_fast(tb.random_payloads(500), "throughput")
    assert cycles == 500 + tb.latency


@cocotb.test()
async def test_reset_midstream(dut):
    """Reset while a stream is in flight under backpressure, then a clean, correct run."""
    tb = TB(dut, idle_prob=0.2, stall_prob=0.3, seed=4)
    await tb.start()
    tb.monitor.start()
    sender = cocotb.start_soon(tb.driver.send_all(tb.random_payloads(400)))
    await ClockCycles(dut.clk, 150)
    dut.rst.value = 1
    sender.cancel()
    tb.monitor.stop()
    dut.i__valid.value = 0
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    await ReadOnly()
    assert dut.o__valid.value == 0, "output valid right after reset"
    await RisingEdge(dut.clk)
    tb.monitor.queue.clear()
    tb2 = TB(dut, idle_prob=0.2, stall_prob=0.3, seed=5)
    await tb2.stream(tb2.random_payloads(1000), "after reset")


@cocotb.test(skip=not BENCH_OUT)
async def bench_throughput(dut):
    """Benchmark hook: latency and results per cycle measured on the DUT, plus the model's
    worst ulp error against float64 (:func:`sim.fp32_log.measure_log_accuracy`); merged into
    ``TESSERA_BENCH_OUT`` as ``{"fp32_log": {...}}`` (the format of ``sim.tb_fp32_divsqrt``)."""
    tb = TB(dut, seed=6)
    await tb.start()
    lat = await measure_latency(dut, tb.random_payloads(1)[0])
    n = 4000
    cycles = await tb.stream_fast(tb.random_payloads(n), "bench")
    acc = measure_log_accuracy(tb.config)
    entry = {
        "preset": PRESET, "config": tb.config.to_dict(), "latency_cycles": lat,
        "published_latency": tb.latency, "ops": n, "cycles": cycles,
        "results_per_cycle": n / (cycles - lat), "log_max_ulp": acc["max_ulp"],
        "log_accuracy": acc,
    }
    path = Path(BENCH_OUT)
    data = json.loads(path.read_text()) if path.exists() and path.stat().st_size else {}
    data["fp32_log"] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    dut._log.info(f"fp32_log: {entry}")
