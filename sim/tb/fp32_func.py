"""cocotb testbench of the FP32 function units: divide, square root, exp and log (``fp32_div``,
``fp32_sqrt``, ``fp32_exp``, ``fp32_log``) and the log on one shared multiplier
(``fp32_log_serial``), one module for all five: the runner sets ``TESSERA_BLOCK`` and
``TESSERA_PRESET``, and every test works on the unit being simulated.

:class:`TB` holds the driver (:class:`~sim.tb.cocotb_stream.StreamDriver` on ``i``), the monitor
(:class:`~sim.tb.cocotb_stream.StreamMonitor` on ``o``), the golden model
(:mod:`sim.model.fp32_exp`: numpy float32 for div/sqrt, the bit-exact exp algorithm;
:mod:`sim.model.fp32_log`: the bit-exact log algorithm) and the scoreboard (:meth:`TB.check`).
Bulk random runs use :meth:`TB.stream_fast`, a combined driver+monitor that handles one transfer
per cycle with a single trigger per cycle (no idle, no backpressure) so 100,000 vectors take
seconds; the backpressure/idle and reset tests use the shared driver and monitor.

Timing is checked against the block's published parameters (:data:`PARAMS`, from
:mod:`hdl.registry`): ``latency`` and the initiation interval ``ii`` (1 unless the block
publishes one). ``fp32_log_serial`` (``ii`` = 7) computes the words of ``fp32_log``
(:data:`SAME_WORDS`): it uses that block's config, operands and golden model, with its own seed
and its own latency and ``ii``.

Environment: ``TESSERA_VECTORS`` (random vectors, default 100000; :data:`DEFAULT_VECTORS` for
the blocks that take one operation every few cycles), ``TESSERA_BENCH_OUT`` (JSON path; enables
:func:`bench_throughput`, skipped otherwise).
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from hdl.fp32.divsqrt_config import FP32DivSqrtConfig
from hdl.fp32.log_config import FP32LogConfig
from hdl.registry import get_block
from sim.model import fp32_exp, fp32_log
from sim.model.fp32 import SPECIALS, random_fp32
from sim.tb.cocotb_stream import StreamDriver, StreamMonitor, reset, start_clock

BLOCK = os.environ.get("TESSERA_BLOCK", "fp32_div")
PRESET = os.environ.get("TESSERA_PRESET", "default")
#: blocks that compute the words of another block on other hardware: the key's config,
#: operands and golden model are the value's (its timing and seed are its own)
SAME_WORDS = {"fp32_log_serial": "fp32_log"}
#: the block whose config, operands and golden model BLOCK uses
WORDS = SAME_WORDS.get(BLOCK, BLOCK)
#: the published parameters of BLOCK (``latency``; ``ii`` if it takes one operation every
#: ``ii`` cycles)
PARAMS = get_block(BLOCK).params(PRESET)
#: random vectors of :func:`test_random` for the blocks not taking one per cycle (20,000 at
#: ``ii`` = 7: 140,000 cycles, a few seconds, where 100,000 would be 700,000)
DEFAULT_VECTORS = {"fp32_log_serial": 20_000}
VECTORS = int(os.environ.get("TESSERA_VECTORS", str(DEFAULT_VECTORS.get(BLOCK, 100_000))))
BENCH_OUT = os.environ.get("TESSERA_BENCH_OUT", "")
SEEDS = {"fp32_div": 11, "fp32_sqrt": 22, "fp32_exp": 33, "fp32_log": 44, "fp32_log_serial": 55}
#: the unit's approximation error against float64, reported by ``bench_throughput``
ACCURACY = {"fp32_exp": ("exp", fp32_exp.measure_exp_accuracy),
            "fp32_log": ("log", fp32_log.measure_log_accuracy)}


def _config():
    return (FP32LogConfig if WORDS == "fp32_log" else FP32DivSqrtConfig).preset(PRESET)


def _operands(rng=None, n: int = 0) -> dict:
    """Random (``rng``, ``n``) or, without ``rng``, the named special operands of BLOCK."""
    if WORDS == "fp32_log":
        if rng is None:
            return fp32_log.special_operands(SPECIALS)
        return fp32_log.random_operands(rng, n, base=random_fp32)
    if rng is None:
        return fp32_exp.special_operands(BLOCK, SPECIALS)
    return fp32_exp.random_operands(BLOCK, rng, n, base=random_fp32)


class TB:
    """Driver, monitor, golden model and scoreboard for one of the five units.

    ``latency`` and ``ii`` are the block's published ones (:data:`PARAMS`); ``accepts`` and
    ``results`` are the cycles (counted from 0) of the input and output transfers of the last
    :meth:`stream_fast`.
    """

    def __init__(self, dut, *, idle_prob: float = 0.0, stall_prob: float = 0.0, seed: int = 0):
        self.dut = dut
        self.config = _config()
        self.model = (fp32_log.FP32Log(self.config) if WORDS == "fp32_log"
                      else fp32_exp.model_for(BLOCK, self.config))
        self.latency = PARAMS["latency"]
        self.ii = PARAMS.get("ii", 1)
        # the model mirrors the pipelined unit: its latency is BLOCK's unless BLOCK shares words
        assert BLOCK in SAME_WORDS or self.latency == self.model.latency, (BLOCK, PARAMS)
        self.accepts: list[int] = []
        self.results: list[int] = []
        self.rng = np.random.default_rng(SEEDS[BLOCK] * 1000 + seed)
        prng = random.Random(SEEDS[BLOCK] * 1000 + seed)
        self.driver = StreamDriver(dut, "i", idle_prob=idle_prob, rng=prng)
        self.monitor = StreamMonitor(dut, "o", stall_prob=stall_prob, rng=prng)
        self.checked = 0

    async def start(self):
        start_clock(self.dut)
        await reset(self.dut)

    # ------------------------------------------------------------------ stimulus
    def random_payloads(self, n: int) -> list[int]:
        return self.model.pack_in(**_operands(self.rng, n))

    def special_payloads(self) -> list[int]:
        return self.model.pack_in(**_operands())

    # ------------------------------------------------------------------ scoreboard
    def check(self, inputs: list[int], outputs: list[int], what: str) -> None:
        expected = self.model.expected_payloads(inputs)
        assert len(outputs) == len(expected), f"{what}: {len(outputs)} results for {len(inputs)}"
        bad = [i for i, (g, e) in enumerate(zip(outputs, expected)) if g != e]
        if bad:
            lines = [f"  #{i}: {self.model.describe(inputs[i])}: got {outputs[i]:#010x}, "
                     f"expected {expected[i]:#010x}" for i in bad[:10]]
            raise AssertionError(f"{BLOCK} {what}: {len(bad)} of {len(inputs)} mismatches\n"
                                 + "\n".join(lines))
        self.checked += len(inputs)

    def cycles_for(self, n: int) -> int:
        """Cycles :meth:`stream_fast` takes for ``n`` operations on the idle unit: the first
        result is ready ``latency`` cycles after the first transfer in, one more leaves every
        ``ii`` cycles, and the count includes the edge of the last transfer out."""
        return self.latency + self.ii * (n - 1) + 1

    # ------------------------------------------------------------------ runs
    async def stream(self, payloads: list[int], what: str) -> None:
        """Send with the shared driver (random idle), receive with the monitor (random
        backpressure), check everything."""
        self.monitor.start()
        await self.driver.send_all(payloads)
        outputs = await self.monitor.wait_for(len(payloads),
                                              timeout_cycles=50 * len(payloads) + 1000)
        self.monitor.stop()
        await ClockCycles(self.dut.clk, self.latency + 3)
        assert not self.monitor.queue, f"{BLOCK} {what}: extra results {list(self.monitor.queue)}"
        self.check(payloads, outputs, what)

    async def stream_fast(self, payloads: list[int], what: str) -> int:
        """Operands back to back (``i.valid = 1`` until all are taken, ``o.ready = 1``): one
        transfer per cycle in and out, or as often as ``i.ready`` allows; returns the cycles
        used, and records the transfer cycles in ``accepts`` and ``results``. The handshake is
        sampled in ReadOnly before each rising edge."""
        dut = self.dut
        dut.o__ready.value = 1
        outputs: list[int] = []
        self.accepts, self.results = [], []
        k, cycles = 0, 0
        n = len(payloads)
        limit = self.cycles_for(n) + 20
        while len(outputs) < n:
            if k < n:
                dut.i__valid.value = 1
                dut.i__payload.value = payloads[k]
            else:
                dut.i__valid.value = 0
            await ReadOnly()
            if k < n and dut.i__ready.value == 1:
                k += 1
                self.accepts.append(cycles)
            if dut.o__valid.value == 1:
                outputs.append(dut.o__payload.value.to_unsigned())
                self.results.append(cycles)
            await RisingEdge(dut.clk)
            cycles += 1
            assert cycles <= limit, f"{BLOCK} {what}: {len(outputs)} of {n} after {cycles} cycles"
        dut.i__valid.value = 0
        self.check(payloads, outputs, what)
        return cycles


@cocotb.test()
async def test_specials(dut):
    """Every named special case (all pairs of the special set for divide), twice: back to back,
    then with random idle cycles and backpressure."""
    tb = TB(dut)
    await tb.start()
    payloads = tb.special_payloads()
    await tb.stream_fast(payloads, "specials")
    tb2 = TB(dut, idle_prob=0.3, stall_prob=0.3, seed=1)
    await tb2.stream(payloads[:1500], "specials with idle/backpressure")
    dut._log.info(f"{BLOCK}: {len(payloads)} + {min(len(payloads), 1500)} special vectors ok")


@cocotb.test()
async def test_random(dut):
    """``TESSERA_VECTORS`` random operands (100,000 by default, :data:`DEFAULT_VECTORS`),
    back to back (one per cycle, or one every ``ii`` cycles), bit-exact, in exactly
    :meth:`TB.cycles_for` cycles."""
    tb = TB(dut, seed=2)
    await tb.start()
    payloads = tb.random_payloads(VECTORS)
    cycles = await tb.stream_fast(payloads, "random")
    assert cycles == tb.cycles_for(VECTORS), f"throughput: {cycles} cycles for {VECTORS}"
    dut._log.info(f"{BLOCK}: {VECTORS} random vectors in {cycles} cycles ok")


@cocotb.test()
async def test_backpressure(dut):
    """Random vectors with random idle (input) and backpressure (output) at several rates."""
    for seed, (idle, stall) in enumerate([(0.0, 0.5), (0.5, 0.0), (0.3, 0.3), (0.1, 0.8)]):
        tb = TB(dut, idle_prob=idle, stall_prob=stall, seed=10 + seed)
        if seed == 0:
            await tb.start()
        await tb.stream(tb.random_payloads(1500), f"idle {idle} stall {stall}")


@cocotb.test()
async def test_latency_and_throughput(dut):
    """One operation alone takes exactly ``latency`` cycles (input transfer edge to output
    transfer edge); a full stream delivers one result every ``ii`` cycles (1: every cycle)
    after the fill, in exactly :meth:`TB.cycles_for` cycles, the first ``latency`` cycles after
    the first operand; no operand waits more than ``ii`` cycles for the previous one, and in
    steady state (the second half) every one waits exactly ``ii``."""
    tb = TB(dut, seed=3)
    await tb.start()
    lat = await measure_latency(dut, tb.random_payloads(1)[0])
    assert lat == tb.latency, f"{BLOCK}: latency {lat}, published {tb.latency}"
    n = 500
    cycles = await tb.stream_fast(tb.random_payloads(n), "throughput")
    assert cycles == tb.cycles_for(n), f"{BLOCK}: {n} results took {cycles} cycles"
    acc, res = tb.accepts, tb.results
    assert len(acc) == len(res) == n and acc[0] == 0 and res[0] == tb.latency, (acc[:3], res[:3])
    res_gaps = set(np.diff(res).tolist())
    assert res_gaps == {tb.ii}, f"{BLOCK}: results {sorted(res_gaps)} cycles apart, ii {tb.ii}"
    acc_gaps = np.diff(acc)
    assert acc_gaps.max() <= tb.ii, f"{BLOCK}: an operand waited {acc_gaps.max()} cycles"
    assert set(acc_gaps[n // 2:].tolist()) == {tb.ii}, f"{BLOCK}: steady state not every ii"


@cocotb.test()
async def test_reset_midstream(dut):
    """Reset while a stream is in flight under backpressure, then a clean, correct run: no
    stale result may appear after the reset."""
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


async def measure_latency(dut, payload: int) -> int:
    """Edges from the input transfer to the output transfer of a single operation."""
    dut.o__ready.value = 1
    dut.i__valid.value = 0
    await ClockCycles(dut.clk, 30)            # drain
    dut.i__valid.value = 1
    dut.i__payload.value = payload
    await ReadOnly()
    assert dut.i__ready.value == 1
    await RisingEdge(dut.clk)                 # input transfer
    dut.i__valid.value = 0
    edges = 0
    while True:
        await ReadOnly()
        if dut.o__valid.value == 1:
            break
        await RisingEdge(dut.clk)
        edges += 1
        assert edges < 200, "no output"
    await RisingEdge(dut.clk)                 # output transfer
    return edges + 1


@cocotb.test(skip=not BENCH_OUT)
async def bench_throughput(dut):
    """Benchmark hook (``make bench-datapaths``): latency and results per cycle measured on the
    DUT, plus (exp, log) the model's worst ulp error against float64; merged into
    ``TESSERA_BENCH_OUT`` (JSON, ``{block: {...}}``)."""
    tb = TB(dut, seed=6)
    await tb.start()
    lat = await measure_latency(dut, tb.random_payloads(1)[0])
    n = 4000
    cycles = await tb.stream_fast(tb.random_payloads(n), "bench")
    entry = {
        "preset": PRESET, "config": tb.config.to_dict(), "latency_cycles": lat,
        "published_latency": tb.latency, "ops": n, "cycles": cycles,
        "results_per_cycle": n / (cycles - lat),
    }
    if "ii" in PARAMS:
        entry["published_ii"] = tb.ii
    if WORDS in ACCURACY:
        fn, measure = ACCURACY[WORDS]
        acc = measure(tb.config)
        entry[f"{fn}_max_ulp"] = acc["max_ulp"]
        entry[f"{fn}_accuracy"] = acc
    path = Path(BENCH_OUT)
    data = json.loads(path.read_text()) if path.exists() and path.stat().st_size else {}
    data[BLOCK] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    dut._log.info(f"{BLOCK}: {entry}")
