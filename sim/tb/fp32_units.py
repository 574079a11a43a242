"""cocotb testbench of the pipelined FP32 units under Verilator (any one of them).

The unit comes from ``TESSERA_BLOCK`` (``fp32_add``, ``fp32_mul``, ``fp32_compare``,
``int_to_fp32``, ``fp32_to_int``) and the config from ``TESSERA_PRESET``; the golden model is
the matching numpy model of :mod:`sim.model.fp32`. Payloads are packed with the model's
``IN_FIELDS``/``OUT_FIELDS``, which are read from the units' Amaranth layouts.

Tests (the pytest tier runs all but ``bench_throughput``):

* ``specials``: every pair of :data:`sim.model.fp32.SPECIALS` (58 x 58; both operations for add) or
  every named int/float special, at full rate.
* ``random_full_rate``: ``TESSERA_FP32_N`` (default 100,000) random operands from the
  class-covering generators, back to back, ``ready`` always high.
* ``random_backpressure``: 20,000 random operands with 25 % idle input cycles and 40 %
  ``ready = 0`` cycles.
* ``reset_mid_stream``: reset while operations are in flight and the output is stalled, then
  a correct run.
* ``latency_throughput``: a lone operation takes exactly the published ``latency``; a
  back-to-back burst gives one result per cycle.
* ``bench_throughput``: runs only when ``TESSERA_BENCH_OUT`` is set (``make bench-datapaths``):
  measures latency and results per cycle from the DUT and simulated operations per second;
  writes JSON there.
"""
import json
import os
import random
import time

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from hdl.fp32.config import FP32Config
from sim.model import fp32 as gold
from sim.tb.cocotb_stream import StreamDriver, StreamMonitor, reset, start_clock

BLOCK = os.environ.get("TESSERA_BLOCK", "fp32_add")
PRESET = os.environ.get("TESSERA_PRESET", "default")
CONFIG = FP32Config.preset(PRESET)
N_RANDOM = int(os.environ.get("TESSERA_FP32_N", "100000"))
BENCH_OUT = os.environ.get("TESSERA_BENCH_OUT")
#: per-unit seed offset, so the units see different operands
SEED = 0xF32 + ["fp32_add", "fp32_mul", "fp32_compare", "int_to_fp32",
                "fp32_to_int"].index(BLOCK)


def random_inputs(model, rng: np.random.Generator, n: int) -> list[int]:
    """``n`` random input payloads for the unit under test."""
    if BLOCK in ("fp32_add", "fp32_mul", "fp32_compare"):
        a, b = gold.random_pairs(rng, n, {"fp32_add": "add", "fp32_mul": "mul",
                                          "fp32_compare": "cmp"}[BLOCK])
        if BLOCK == "fp32_add":
            return model.pack_in(a=a, b=b, sub=rng.integers(0, 2, n))
        return model.pack_in(a=a, b=b)
    if BLOCK == "int_to_fp32":
        return model.pack_in(i=gold.random_int32(rng, n))
    return model.pack_in(a=gold.random_ftoi(rng, n), rne=rng.integers(0, 2, n))


def special_inputs(model) -> list[int]:
    """All pairs of the special-value set (add: for ``+`` and ``-``), or the named specials."""
    if BLOCK in ("fp32_add", "fp32_mul", "fp32_compare"):
        sp = np.array(gold.SPECIALS, dtype=np.int64)
        a, b = np.repeat(sp, len(sp)), np.tile(sp, len(sp))
        if BLOCK == "fp32_add":
            return model.pack_in(a=np.tile(a, 2), b=np.tile(b, 2),
                                 sub=np.repeat([0, 1], len(a)))
        return model.pack_in(a=a, b=b)
    if BLOCK == "int_to_fp32":
        # named ints, and every power of two +-0..3 (all rounding positions)
        extra = [s * ((1 << k) + d) for k in range(31) for d in range(-3, 4) for s in (1, -1)]
        vals = [v for v in list(gold.INT_SPECIALS) + extra if -(1 << 31) <= v < (1 << 31)]
        return model.pack_in(i=np.array(vals, dtype=np.int64))
    sp = np.array(gold.FTOI_SPECIALS, dtype=np.int64)
    return model.pack_in(a=np.tile(sp, 2), rne=np.repeat([0, 1], len(sp)))


class TB:
    """Driver (input stream), monitor (output stream), golden model and scoreboard.

    Parameters
    ----------
    dut : the cocotb DUT handle
    idle_prob, stall_prob : random idle input cycles / ``ready = 0`` output cycles
    seed : seed of the idle/stall random choices
    """

    def __init__(self, dut, *, idle_prob=0.0, stall_prob=0.0, seed=1):
        self.dut = dut
        self.model = gold.model_for(BLOCK, CONFIG)
        self.latency = CONFIG.latency(BLOCK)
        self.driver = StreamDriver(dut, "i", idle_prob=idle_prob, rng=random.Random(seed))
        self.monitor = StreamMonitor(dut, "o", stall_prob=stall_prob,
                                     rng=random.Random(seed + 1))
        self.checked = 0

    async def start(self, *, monitor: bool = True):
        start_clock(self.dut)
        await reset(self.dut)
        if monitor:
            self.monitor.start()

    async def run(self, payloads: list[int], what: str) -> None:
        """Send ``payloads``, collect as many results, check them against the golden model."""
        sender = cocotb.start_soon(self.driver.send_all(payloads))
        got = await self.monitor.wait_for(len(payloads),
                                          timeout_cycles=20 * len(payloads) + 1000)
        await sender
        self.scoreboard(payloads, got, what)

    def scoreboard(self, payloads, got, what: str) -> None:
        expected = self.model.expected_payloads(payloads)
        got = self.model.canon_out(got)
        bad = [k for k, (g, e) in enumerate(zip(got, expected)) if g != e]
        self.checked += len(payloads)
        if bad:
            lines = [f"  {self.model.describe(payloads[k])}: got {got[k]:#x}, "
                     f"expected {expected[k]:#x}" for k in bad[:10]]
            raise AssertionError(f"{BLOCK}/{PRESET} {what}: {len(bad)} of {len(payloads)} "
                                 f"results wrong\n" + "\n".join(lines))
        self.dut._log.info(f"{what}: {len(payloads)} results match the golden model")


async def measure(dut, payloads: list[int]) -> dict:
    """Drive ``payloads`` back to back with ``ready`` high, cycle by cycle; return the cycle
    of every input acceptance and output transfer."""
    dut.i__valid.value = 0
    dut.o__ready.value = 1
    ins, outs, results = [], [], []
    cycle, k = 0, 0
    while len(outs) < len(payloads):
        if k < len(payloads):
            dut.i__valid.value = 1
            dut.i__payload.value = payloads[k]
        else:
            dut.i__valid.value = 0
        await ReadOnly()
        if k < len(payloads) and dut.i__ready.value == 1:
            ins.append(cycle)
            k += 1
        if dut.o__valid.value == 1:
            outs.append(cycle)
            results.append(dut.o__payload.value.to_unsigned())
        await RisingEdge(dut.clk)
        cycle += 1
        assert cycle < 10 * len(payloads) + 100, "pipeline stuck"
    dut.i__valid.value = 0
    return {"in": ins, "out": outs, "results": results}


@cocotb.test()
async def specials(dut):
    """All pairs of the special-value set against numpy, at full rate."""
    tb = TB(dut)
    await tb.start()
    await tb.run(special_inputs(tb.model), "special values")


@cocotb.test()
async def random_full_rate(dut):
    """N_RANDOM class-covering random operands back to back, no backpressure."""
    tb = TB(dut)
    await tb.start()
    rng = np.random.default_rng(SEED)
    chunk = 20_000
    for start in range(0, N_RANDOM, chunk):
        n = min(chunk, N_RANDOM - start)
        await tb.run(random_inputs(tb.model, rng, n), f"random {start}..{start + n}")
    assert tb.checked == N_RANDOM


@cocotb.test()
async def random_backpressure(dut):
    """Random operands with random idle input cycles and output backpressure."""
    tb = TB(dut, idle_prob=0.25, stall_prob=0.4, seed=5)
    await tb.start()
    rng = np.random.default_rng(SEED + 100)
    await tb.run(random_inputs(tb.model, rng, 20_000), "random with idle/backpressure")


@cocotb.test()
async def reset_mid_stream(dut):
    """Reset while operations are in flight and the output is stalled, then a correct run."""
    tb = TB(dut, stall_prob=0.3, seed=9)
    await tb.start()
    rng = np.random.default_rng(SEED + 200)
    sender = cocotb.start_soon(tb.driver.send_all(random_inputs(tb.model, rng, 500)))
    await ClockCycles(dut.clk, 150)
    sender.cancel()
    tb.monitor.stop()                               # ready = 0: results pile up in the pipe
    dut.i__valid.value = 0
    await ClockCycles(dut.clk, tb.latency + 2)
    assert dut.o__valid.value == 1, "expected a stalled result before the reset"
    await reset(dut)
    await ReadOnly()
    assert dut.o__valid.value == 0, "o.valid must be 0 after reset"
    await RisingEdge(dut.clk)
    tb.monitor.queue.clear()
    tb.monitor.start()
    await tb.run(random_inputs(tb.model, rng, 2_000), "after reset mid-stream")
    await ClockCycles(dut.clk, 3 * tb.latency + 5)
    assert not tb.monitor.queue, f"{len(tb.monitor.queue)} unexpected results after the run"


@cocotb.test()
async def latency_throughput(dut):
    """A lone operation takes exactly `latency` cycles; a burst gives one result per cycle."""
    tb = TB(dut)
    await tb.start(monitor=False)                   # `measure` drives the streams itself
    rng = np.random.default_rng(SEED + 300)
    lone = await measure(dut, random_inputs(tb.model, rng, 1))
    assert lone["out"][0] - lone["in"][0] == tb.latency, (lone, tb.latency)
    burst_in = random_inputs(tb.model, rng, 500)
    burst = await measure(dut, burst_in)
    assert burst["in"] == list(range(500)), "input not accepted every cycle"
    assert [o - i for i, o in zip(burst["in"], burst["out"])] == [tb.latency] * 500
    tb.scoreboard(burst_in, burst["results"], "burst")


@cocotb.test(skip=BENCH_OUT is None)
async def bench_throughput(dut):
    """Benchmark hook: latency (cycles), results per cycle at full rate and simulated
    operations per second, measured from the DUT; JSON to TESSERA_BENCH_OUT."""
    tb = TB(dut)
    await tb.start(monitor=False)
    rng = np.random.default_rng(SEED + 400)
    lone = await measure(dut, random_inputs(tb.model, rng, 1))
    n = 5_000
    burst_in = random_inputs(tb.model, rng, n)
    t0 = time.perf_counter()
    burst = await measure(dut, burst_in)
    wall = time.perf_counter() - t0
    tb.scoreboard(burst_in, burst["results"], "bench burst")
    latency = lone["out"][0] - lone["in"][0]
    span = burst["out"][-1] - burst["out"][0] + 1
    result = {
        "block": BLOCK, "preset": PRESET, "config": CONFIG.to_dict(),
        "latency_cycles": latency, "published_latency": tb.latency,
        "operations": n, "cycles_first_to_last_result": span,
        "results_per_cycle": n / span,
        "cycles_total": burst["out"][-1] - burst["in"][0] + 1,
        "sim_operations_per_second": n / wall,
    }
    assert latency == tb.latency and result["results_per_cycle"] == 1.0, result
    with open(BENCH_OUT, "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)
    dut._log.info(f"bench: {result}")
