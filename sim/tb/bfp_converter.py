"""cocotb testbench of :class:`hdl.bfp.BFPConverter` (FP32 -> BFP) under Verilator.

The preset comes from the runner's ``TESSERA_PRESET`` (the cocotb tier uses ``default``,
group_size 16). Golden model: :class:`sim.model.bfp.BFPConverterModel` (bit-exact, LFSR included);
payloads are packed by :mod:`sim.model.bfp`'s packers, whose offsets are read from the hardware's
Amaranth layouts.

``bench_throughput`` runs only when ``TESSERA_BENCH_OUT`` is set (``make bench-blocks``).
"""
from __future__ import annotations

import json
import os
import time

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from hdl.config import BFPConfig
from hdl.formats import BFPFlags
from sim.model import bfp
from sim.tb.cocotb_stream import StreamTB
from sim.tb.payload import unpack

PRESET = os.environ.get("TESSERA_PRESET", "default")
BENCH_OUT = os.environ.get("TESSERA_BENCH_OUT")
CFG = BFPConfig.preset(PRESET)
MODES = bfp.ROUNDING_MODES
COMBOS = [(w, r) for w in CFG.widths for r in MODES]


def block_params() -> dict:
    from hdl.bfp.converter import TESSERA_BLOCKS
    return TESSERA_BLOCKS[0].params(PRESET)


PARAMS = block_params()
LATENCY = PARAMS["latency"]


class TB(StreamTB):
    """Driver, monitor, golden model and scoreboard of one BFPConverter DUT."""

    def __init__(self, dut, *, seed: int, idle_prob: float = 0.0, stall_prob: float = 0.0):
        super().__init__(dut, seed=seed, idle_prob=idle_prob, stall_prob=stall_prob)
        self.rng = np.random.default_rng(seed)
        self.model = bfp.BFPConverterModel(CFG)
        self.expected: list[tuple[int, object]] = []
        self.checked = 0

    async def start(self):
        self.dut.clear_flags.value = 0
        await super().start()

    def expect(self, word: int, label=None) -> None:
        """Record the model's output for input ``word`` (call in send order)."""
        self.expected.append((self.model.accept(word), label))

    async def send(self, word: int, label=None) -> None:
        self.expect(word, label)
        await self.driver.send(word)

    async def send_all(self, words, labels=None) -> None:
        for k, w in enumerate(words):
            await self.send(w, labels[k] if labels else None)
            if len(self.expected) >= 256:
                await self.check()

    async def check(self, timeout_cycles: int = 200_000) -> int:
        """Wait for every expected output and compare bit for bit."""
        got = await self.monitor.wait_for(len(self.expected), timeout_cycles)
        for k, (g, (w, label)) in enumerate(zip(got, self.expected)):
            if g != w:
                raise AssertionError(
                    f"group {self.checked + k} {label}: DUT {bfp.unpack_bfp_group(g, CFG)} "
                    f"!= model {bfp.unpack_bfp_group(w, CFG)}")
        n = len(self.expected)
        self.checked += n
        self.expected = []
        return n

    def flags(self) -> tuple[bool, bool]:
        f = unpack(BFPFlags, self.dut.flags.value.to_unsigned())
        return bool(f["invalid"]), bool(f["overflow"])

    # ---- stimulus ----------------------------------------------------------------------------
    def random_words(self, n_per_combo: int, *, special_prob: float = 0.02):
        """``n_per_combo`` random groups for every (width, mode), shuffled together."""
        combos = COMBOS * n_per_combo
        order = self.rng.permutation(len(combos))
        vals = bfp.random_fp32_groups(self.rng, len(combos), CFG.group_size,
                                      special_prob=special_prob)
        words, labels = [], []
        for v, k in zip(vals, order):
            w, r = combos[k]
            words.append(bfp.pack_fp32_group(v, CFG, w, r))
            labels.append(("random", w, r))
        return words, labels


@cocotb.test()
async def random_every_width_and_mode(dut):
    """640 random groups (10,240 values at G = 16) for EVERY width x rounding mode, shuffled
    (width and mode change group by group), random idle cycles and backpressure; values span
    all exponents (raw random bits incl. subnormals, narrow-range, normal-distributed,
    subnormal boundary), 2 % of groups hold a NaN or Inf. Bit-exact vs the model."""
    tb = TB(dut, seed=11, idle_prob=0.2, stall_prob=0.3)
    await tb.start()
    words, labels = tb.random_words(640)
    await tb.send_all(words, labels)
    await tb.check()
    assert tb.checked == 640 * len(COMBOS)
    values = tb.checked * CFG.group_size
    assert values >= 10_000 * len(COMBOS)
    assert tb.flags() == tb.model.flags
    dut._log.info(f"{tb.checked} groups ({values} values) in {tb.cycle} cycles")


@cocotb.test()
async def edge_cases(dut):
    """Every named edge case of :func:`sim.model.bfp.edge_case_groups` (all-zero group, -0.0, one
    huge value with tiny ones, largest/smallest normal exponent, subnormals, NaN, ±Inf, ties, ties
    with sticky bits, saturation, ...) at every width and mode, plus every illegal width code
    and the reserved rounding code 3; with idle cycles and backpressure."""
    tb = TB(dut, seed=22, idle_prob=0.1, stall_prob=0.3)
    await tb.start()
    words, labels = [], []
    for w in CFG.widths:
        for name, groups in bfp.edge_case_groups(CFG, w).items():
            for g in groups:
                for r in MODES:
                    words.append(bfp.pack_fp32_group(g, CFG, w, r))
                    labels.append((name, w, r))
    v = bfp.random_fp32_groups(tb.rng, 1, CFG.group_size)[0]
    for code in range(1 << PARAMS["width_bits"]):
        for r in range(4):
            words.append(bfp.pack_fp32_group(v, CFG, code, r))
            labels.append(("codes", code, r))
    expected_len = len(words)
    outs = []
    for k, w in enumerate(words):
        await tb.send(w, labels[k])
        if len(tb.expected) >= 256:
            outs += [e for e, _ in tb.expected]
            await tb.check()
    outs += [e for e, _ in tb.expected]
    await tb.check()
    assert tb.checked == expected_len
    by = {lab: bfp.unpack_bfp_group(o, CFG) for lab, o in zip(labels, outs)}
    # the cases reach the corners they are named for (checked on the verified outputs)
    assert by[("all_zero", 8, 0)]["exp"] == bfp.E_ZERO
    assert by[("nan", 4, 1)]["invalid"] and not by[("nan", 4, 1)]["mag"].any()
    assert by[("positive_inf", 2, 2)]["overflow"]
    assert by[("largest_normal", 6, 0)]["exp"] == 127
    assert by[("smallest_subnormal", 8, 0)]["exp"] == -149
    assert by[("saturation", 8, 0)]["mag"][0] == 255
    assert by[("codes", 15, 3)]["width"] == CFG.max_mantissa
    assert by[("codes", 15, 3)]["rounding"] == bfp.ROUND_TRUNCATE
    assert tb.flags() == (True, True)


@cocotb.test()
async def latency_and_full_throughput(dut):
    """No idle, no backpressure: one group accepted every cycle, each output exactly
    ``latency`` cycles after its input."""
    tb = TB(dut, seed=33)
    await tb.start()
    words, labels = tb.random_words(10)
    first_in, first_out = len(tb.accepts), len(tb.outputs)
    await tb.send_all(words, labels)
    await tb.check()
    acc = tb.accepts[first_in:first_in + len(words)]
    out = tb.outputs[first_out:first_out + len(words)]
    assert acc == list(range(acc[0], acc[0] + len(words))), "input stalled"
    assert [o - i for i, o in zip(acc, out)] == [LATENCY] * len(words)


@cocotb.test()
async def reset_mid_stream(dut):
    """Stochastic groups in flight under backpressure, reset for 2 cycles, then a random run of
    every width and mode must match a freshly reset model (LFSR back at its seed); no stale
    output and cleared flags after reset."""
    tb = TB(dut, seed=44, idle_prob=0.1, stall_prob=0.3)
    await tb.start()
    # a NaN group sets the sticky flag
    nan = np.full(CFG.group_size, 1.0, np.float32)
    nan[0] = np.nan
    await tb.send(bfp.pack_fp32_group(nan, CFG, 8, 0))
    await tb.check()
    await ClockCycles(dut.clk, 2)
    assert tb.flags()[0]
    # fill the pipeline with stochastic groups and stall the output
    tb.monitor.stop()
    # (more groups than the pipeline holds, and enough cycles to fill it despite idle cycles)
    vals = bfp.random_fp32_groups(tb.rng, LATENCY + 6, CFG.group_size)
    pending = cocotb.start_soon(tb.driver.send_all(
        [bfp.pack_fp32_group(v, CFG, 6, bfp.ROUND_STOCHASTIC) for v in vals]))
    await ClockCycles(dut.clk, LATENCY + 4)
    assert dut.o__valid.value == 1 and dut.i__ready.value == 0
    dut.rst.value = 1
    pending.cancel()
    dut.i__valid.value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await ReadOnly()
    assert dut.o__valid.value == 0 and dut.flags.value.to_unsigned() == 0
    await RisingEdge(dut.clk)
    tb.model.reset()
    tb.expected = []
    tb.make_ports()
    tb.monitor.start()
    words, labels = tb.random_words(20)
    await tb.send_all(words, labels)
    await tb.check()
    assert tb.flags() == tb.model.flags


@cocotb.test()
async def sticky_flags_set_and_clear(dut):
    """``flags`` ORs the flags of delivered groups; ``clear_flags`` clears them; clean groups
    leave them alone; a flagged group delivered in the clearing cycle still sets them."""
    tb = TB(dut, seed=55)
    await tb.start()
    clean = np.linspace(-3, 3, CFG.group_size).astype(np.float32)
    nan, inf = clean.copy(), clean.copy()
    nan[1] = np.nan
    inf[2] = -np.inf

    async def deliver(vals):
        await tb.send(bfp.pack_fp32_group(vals, CFG, 4, 0))
        await tb.check()
        await ClockCycles(dut.clk, 1)
        await ReadOnly()
        flags = tb.flags()
        await RisingEdge(dut.clk)
        return flags

    async def clear():
        await RisingEdge(dut.clk)
        dut.clear_flags.value = 1
        await RisingEdge(dut.clk)
        dut.clear_flags.value = 0
        await ReadOnly()
        flags = tb.flags()
        await RisingEdge(dut.clk)
        return flags

    assert await deliver(clean) == (False, False)
    assert await deliver(nan) == (True, False)
    assert await deliver(clean) == (True, False)
    assert await clear() == (False, False)
    assert await deliver(inf) == (False, True)
    assert await deliver(nan) == (True, True)
    assert await clear() == (False, False)
    # clear held while an Inf group travels, up to and including its delivery edge: set wins
    dut.clear_flags.value = 1
    word = bfp.pack_fp32_group(inf, CFG, 4, 0)
    tb.expect(word, "inf during clear")
    sender = cocotb.start_soon(tb.driver.send(word))
    for _ in range(1000):
        await ReadOnly()
        if dut.o__valid.value == 1 and dut.o__ready.value == 1:
            break
        assert tb.flags() == (False, False)
        await RisingEdge(dut.clk)
    else:
        raise TimeoutError("Inf group not delivered within 1000 cycles (deadline)")
    await RisingEdge(dut.clk)                  # the delivery edge, clear_flags still 1
    dut.clear_flags.value = 0
    await ReadOnly()
    assert tb.flags() == (False, True)
    await RisingEdge(dut.clk)
    await sender
    await tb.check()


@cocotb.test(skip=BENCH_OUT is None)
async def bench_throughput(dut):
    """Benchmark (only with TESSERA_BENCH_OUT): stream N groups with no idle/backpressure;
    groups per cycle between the first input and the last output (latency excluded) and
    simulated cycles per wall-clock second; results still checked bit-exact. JSON to
    $TESSERA_BENCH_OUT."""
    n = int(os.environ.get("TESSERA_BENCH_GROUPS", "3000"))
    tb = TB(dut, seed=66)
    await tb.start()
    words, labels = tb.random_words(-(-n // len(COMBOS)))
    words, labels = words[:n], labels[:n]
    for w, lab in zip(words, labels):          # model outside the timed region
        tb.expect(w, lab)
    first_in, first_out = len(tb.accepts), len(tb.outputs)
    c0, t0 = tb.cycle, time.perf_counter()
    await tb.driver.send_all(words)
    await tb.check(timeout_cycles=10 * n + 100)
    wall = time.perf_counter() - t0
    cycles_run = tb.cycle - c0
    acc = tb.accepts[first_in]
    last_out = tb.outputs[first_out + n - 1]
    span = last_out - acc + 1 - LATENCY
    result = {
        "block": "bfp_converter", "preset": PRESET, "group_size": CFG.group_size,
        "groups": n, "values": n * CFG.group_size, "latency": LATENCY,
        "cycles_first_in_to_last_out": last_out - acc + 1,
        "groups_per_cycle": n / span,
        "values_per_cycle": n * CFG.group_size / span,
        "sim_cycles": cycles_run, "wall_seconds": wall,
        "sim_cycles_per_second": cycles_run / wall,
        "note": "cocotb drives and samples every cycle; wall time includes Python per cycle",
    }
    assert result["groups_per_cycle"] == 1.0, result
    dut._log.info(json.dumps(result))
    with open(BENCH_OUT, "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)
