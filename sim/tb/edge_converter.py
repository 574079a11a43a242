"""cocotb testbench of the array-edge converter (:class:`hdl.edge_converter.EdgeConverter`).

Config from ``TESSERA_PRESET``; golden model :func:`sim.model.edge.edge_to_fp32`. Vectors come
from :func:`sim.model.edge.random_vectors` (normal, subnormal, underflowing and overflowing
results, exact ties, uniform exponents) and :func:`sim.model.edge.named_edge_cases`.
"""
from __future__ import annotations

import os
import random

import cocotb
from cocotb.triggers import ClockCycles

from sim.model.edge import edge_to_fp32, is_tie, named_edge_cases, random_vectors
from sim.tb.cocotb_stream import StreamTB, reset
from sim.tb.payload import pack

PRESET = os.environ.get("TESSERA_PRESET", "default")


def _config():
    from hdl.edge_converter import EdgeConfig, EdgeConverter, edge_input_layout
    config = EdgeConfig.preset(PRESET)
    return config, EdgeConverter.LATENCY, edge_input_layout(config)


CONFIG, LATENCY, IN_LAYOUT = _config()


class TB(StreamTB):
    """Driver, monitor, golden model and scoreboard of one EdgeConverter."""

    def __init__(self, dut, *, seed: int, idle_prob: float = 0.0, stall_prob: float = 0.0):
        super().__init__(dut, seed=seed, idle_prob=idle_prob, stall_prob=stall_prob)
        self.rng = random.Random(seed)
        self.expected: list[tuple[int, int, int]] = []    # (value, exp, fp32 bits)

    @staticmethod
    def pack(value: int, exp: int) -> int:
        return pack(IN_LAYOUT, {"value": value, "exp": exp})

    async def send(self, value: int, exp: int):
        self.expected.append((value, exp, edge_to_fp32(value, exp, CONFIG)))
        await self.driver.send(self.pack(value, exp))

    async def check(self):
        words = await self.monitor.wait_for(len(self.expected), 1_000_000)
        for w, (v, e, bits) in zip(words, self.expected):
            assert w == bits, f"value={v} exp={e}: DUT {w:#010x} != model {bits:#010x}"
        n = len(self.expected)
        self.expected = []
        return n


def _classify(bits: int) -> str:
    mag = bits & 0x7FFFFFFF
    if mag == 0x7F800000:
        return "inf"
    if mag == 0:
        return "zero"
    if mag < 0x00800000:
        return "subnormal"
    return "normal"


@cocotb.test()
async def random_vectors_with_backpressure(dut):
    """>= 10,000 random (value, exp) vectors with random idle cycles and backpressure."""
    tb = TB(dut, seed=11, idle_prob=0.2, stall_prob=0.3)
    await tb.start()
    vecs = random_vectors(tb.rng, 10_500, CONFIG)
    kinds = {"inf": 0, "zero": 0, "subnormal": 0, "normal": 0}
    neg = ties = extreme = 0
    emin, emax = -(1 << (CONFIG.exp_bits - 1)), (1 << (CONFIG.exp_bits - 1)) - 1
    for k, (v, e) in enumerate(vecs):
        await tb.send(v, e)
        kinds[_classify(tb.expected[-1][2])] += 1
        neg += v < 0
        ties += is_tie(v, e)
        extreme += e in (emin, emax)
        if len(tb.expected) >= 256:
            await tb.check()
    await tb.check()
    dut._log.info(f"{len(vecs)} vectors: {kinds}, {neg} negative, {ties} exact ties, "
                  f"{extreme} at an exponent extreme")
    assert min(kinds.values()) >= 500 and neg >= 3000 and ties >= 300 and extreme >= 50


@cocotb.test()
async def named_edge_cases_and_extremes(dut):
    """Zero, ±1, extreme values and exponents, min/max subnormal, ties (to zero, up, down,
    to Inf), overflow to ±Inf; each also surrounded by random neighbours."""
    tb = TB(dut, seed=22, idle_prob=0.3, stall_prob=0.5)
    await tb.start()
    cases = named_edge_cases(CONFIG)
    vb, eb = CONFIG.int_bits, CONFIG.exp_bits
    for name, v, e in cases:
        await tb.send(v, e)
    # every exponent extreme with every value extreme and a sweep of exponents across the
    # FP32 range boundaries for a few magnitudes
    vmax, vmin = (1 << (vb - 1)) - 1, -(1 << (vb - 1))
    emax, emin = (1 << (eb - 1)) - 1, -(1 << (eb - 1))
    for v in (vmax, vmin, 1, -1, 3, (1 << 24) + 1 if vb >= 26 else 5):
        for e in [emin, emin + 1, emax - 1, emax] + list(range(-160 - vb, -140)) + \
                list(range(120 - vb, 132)):
            if emin <= e <= emax:
                await tb.send(v, e)
    n = await tb.check()
    assert n > 2 * len(cases)


@cocotb.test()
async def latency_and_throughput(dut):
    """Always valid, always ready: one result per cycle, `latency` cycles after its input."""
    tb = TB(dut, seed=33)
    await tb.start()
    vecs = random_vectors(tb.rng, 200, CONFIG)
    first = len(tb.accepts)
    for v, e in vecs:
        await tb.send(v, e)
    await tb.check()
    ins = tb.accepts[first:]
    outs = tb.outputs[-len(vecs):]
    assert ins == list(range(ins[0], ins[0] + len(vecs))), "input not accepted every cycle"
    assert [o - i for i, o in zip(ins, outs)] == [LATENCY] * len(vecs)


@cocotb.test()
async def reset_mid_stream(dut):
    """Reset with the pipeline full and results waiting, then a correct run."""
    tb = TB(dut, seed=44, idle_prob=0.1)
    await tb.start()
    tb.monitor.stop()                              # o.ready = 0: the pipeline fills and stalls
    vecs = random_vectors(tb.rng, 30, CONFIG)
    task = cocotb.start_soon(tb.driver.send_all([tb.pack(v, e) for v, e in vecs]))
    await ClockCycles(dut.clk, 12)
    task.cancel()
    dut.i__valid.value = 0
    assert dut.o__valid.value == 1                 # something really was in flight
    await reset(dut)
    tb.monitor.start()
    await ClockCycles(dut.clk, LATENCY + 5)
    assert len(tb.monitor.queue) == 0, "a result survived reset"
    tb.driver.idle_prob, tb.monitor.stall_prob = 0.2, 0.3
    for v, e in random_vectors(tb.rng, 500, CONFIG):
        await tb.send(v, e)
    await tb.check()
    await ClockCycles(dut.clk, LATENCY + 5)
    assert len(tb.monitor.queue) == 0
