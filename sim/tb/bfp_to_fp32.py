"""cocotb testbench of :class:`hdl.bfp.BFPToFP32` (BFP -> FP32) under Verilator.

Preset from ``TESSERA_PRESET`` (the cocotb tier uses ``default``). Golden model:
:class:`sim.model.bfp.BFPToFP32Model`; round-trip inputs come from
:class:`sim.model.bfp.BFPConverterModel`, and every result is also checked against an
independent computation (float64 for the exact round trip,
:func:`sim.model.fp32_round.round_to_fp32` per element for arbitrary payloads).
"""
from __future__ import annotations

import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from hdl.config import BFPConfig
from sim.model import bfp
from sim.model.fp32_round import round_to_fp32
from sim.tb.cocotb_stream import StreamTB

PRESET = os.environ.get("TESSERA_PRESET", "default")
CFG = BFPConfig.preset(PRESET)
MODES = bfp.ROUNDING_MODES
COMBOS = [(w, r) for w in CFG.widths for r in MODES]


def block_params() -> dict:
    from hdl.bfp.to_fp32 import TESSERA_BLOCKS
    return TESSERA_BLOCKS[0].params(PRESET)


PARAMS = block_params()
LATENCY = PARAMS["latency"]


def independent(word: int) -> np.ndarray:
    """Expected FP32 bits of a BFP payload from sim.model.fp32_round, element by element."""
    g = bfp.unpack_bfp_group(word, CFG)
    m = bfp.decode_width(g["width"], CFG)
    return np.array([round_to_fp32(int(s), g["exp"] - (m - 1), int(M))
                     for s, M in zip(g["sign"], g["mag"])], np.uint32)


class TB(StreamTB):
    """Driver, monitor, golden model and scoreboard of one BFPToFP32 DUT."""

    def __init__(self, dut, *, seed: int, idle_prob: float = 0.0, stall_prob: float = 0.0):
        super().__init__(dut, seed=seed, idle_prob=idle_prob, stall_prob=stall_prob)
        self.rng = np.random.default_rng(seed)
        self.model = bfp.BFPToFP32Model(CFG)
        self.expected: list[tuple[int, int, object]] = []    # (input, expected output, label)
        self.checked = 0

    async def send_all(self, words, labels=None, *, check_every: int = 256) -> None:
        for k, w in enumerate(words):
            self.expected.append((w, self.model.accept(w), labels[k] if labels else None))
            await self.driver.send(w)
            if len(self.expected) >= check_every:
                await self.check()

    async def check(self, *, exact: bool = False) -> None:
        """Compare with the model and the independent rounding; with ``exact`` also require
        the FP32 values to equal the BFP values (the round-trip property)."""
        got = await self.monitor.wait_for(len(self.expected), 200_000)
        for k, (g, (word, want, label)) in enumerate(zip(got, self.expected)):
            where = f"group {self.checked + k} {label}"
            assert g == want, f"{where}: DUT {g:#x} != model {want:#x}"
            bits, inv, ovf = bfp.unpack_fp32_group(g, CFG, with_flags=True)
            fields = bfp.unpack_bfp_group(word, CFG)
            assert (inv, ovf) == (fields["invalid"], fields["overflow"]), where
            assert (bits == independent(word)).all(), where
            if exact:
                m = fields["width"]
                value = np.where(fields["sign"] == 1, -1.0, 1.0) * fields["mag"] \
                    * 2.0 ** (fields["exp"] - (m - 1))
                assert (bits.view(np.float32).astype(np.float64) == value).all(), where
        self.checked += len(self.expected)
        self.expected = []

    # ---- stimulus ----------------------------------------------------------------------------
    def converted(self, n_per_combo: int):
        """BFP payloads the converter (model) makes from random FP32 groups, every width x
        mode, shuffled, with the converter's LFSR running across them."""
        conv = bfp.BFPConverterModel(CFG)
        combos = COMBOS * n_per_combo
        order = self.rng.permutation(len(combos))
        vals = bfp.random_fp32_groups(self.rng, len(combos), CFG.group_size, special_prob=0.02)
        words, labels = [], []
        for v, k in zip(vals, order):
            w, r = combos[k]
            words.append(conv.accept(bfp.pack_fp32_group(v, CFG, w, r)))
            labels.append(("round trip", w, r))
        return words, labels

    def arbitrary(self, n: int):
        """Random payloads: exponent anywhere in the signed field (biased towards the subnormal
        floor and the overflow threshold), random magnitudes, width and rounding codes, flags."""
        G, eb, mm = CFG.group_size, CFG.exp_bits, CFG.max_mantissa
        words = []
        for k in range(n):
            if k % 3 == 0:
                exp = int(self.rng.integers(-165, -135))
            elif k % 3 == 1:
                exp = int(self.rng.integers(115, 140))
            else:
                exp = int(self.rng.integers(-(1 << (eb - 1)), 1 << (eb - 1)))
            words.append(bfp.pack_bfp_group(
                exp, self.rng.integers(0, 2, G), self.rng.integers(0, 1 << mm, G), CFG,
                width=int(self.rng.integers(0, 1 << PARAMS["width_bits"])),
                rounding=int(self.rng.integers(0, 4)),
                invalid=bool(self.rng.integers(2)), overflow=bool(self.rng.integers(2))))
        return words


@cocotb.test()
async def round_trip_every_width_and_mode(dut):
    """640 converted groups (10,240 values at G = 16) for EVERY width x mode, random idle and
    backpressure: output == model == independent rounding, and exactly the BFP value."""
    tb = TB(dut, seed=71, idle_prob=0.2, stall_prob=0.3)
    await tb.start()
    words, labels = tb.converted(640)
    for k in range(0, len(words), 256):
        await tb.send_all(words[k:k + 256], labels[k:k + 256], check_every=10 ** 9)
        await tb.check(exact=True)
    assert tb.checked == 640 * len(COMBOS)
    dut._log.info(f"{tb.checked} groups in {tb.cycle} cycles")


@cocotb.test()
async def arbitrary_payloads(dut):
    """1,500 arbitrary payloads (RNE below the normal range, overflow to Inf, illegal width
    and rounding codes, flags passed through) and named cases, with idle and backpressure."""
    tb = TB(dut, seed=72, idle_prob=0.2, stall_prob=0.3)
    await tb.start()
    G, mm = CFG.group_size, CFG.max_mantissa
    named = {
        # {0.5, 1.5, 2.5, 0.75} * 2**-149: ties to even at the subnormal floor
        "subnormal_ties": (-150, [0, 1, 0, 1], [2, 6, 10, 3], 2),
        "negative_zero_and_smallest": (-149 + mm - 1, [1, 0, 1, 0], [0, 1, 2 ** mm - 1, 1], mm),
        "largest_exponent": (127, [0, 1, 0, 0], [2 ** mm - 1, 2 ** mm - 1, 1, 0], mm),
        "overflow": (128, [0, 1, 0, 0], [1, 3, 0, 2], 2),
        "most_negative_exponent": (-(1 << (CFG.exp_bits - 1)), [0, 1, 0, 1], [2 ** mm - 1] * 4,
                                   mm),
        "e_zero_group": (bfp.E_ZERO, [0, 1, 0, 1], [0, 0, 0, 0], mm),
    }
    words, labels = [], []
    for name, (exp, s, mg, w) in named.items():
        words.append(bfp.pack_bfp_group(exp, np.resize(s, G), np.resize(mg, G), CFG, width=w,
                                        rounding=0))
        labels.append(name)
    arb = tb.arbitrary(1500)
    await tb.send_all(words + arb, labels + ["arbitrary"] * len(arb))
    await tb.check()
    assert tb.checked == len(words) + 1500


@cocotb.test()
async def latency_and_full_throughput(dut):
    """No idle or backpressure: a group accepted every cycle, outputs ``latency`` later."""
    tb = TB(dut, seed=73)
    await tb.start()
    words, labels = tb.converted(8)
    a0, o0 = len(tb.accepts), len(tb.outputs)
    await tb.send_all(words, labels)
    await tb.check(exact=True)
    acc = tb.accepts[a0:a0 + len(words)]
    out = tb.outputs[o0:o0 + len(words)]
    assert acc == list(range(acc[0], acc[0] + len(words)))
    assert [o - i for i, o in zip(acc, out)] == [LATENCY] * len(words)


@cocotb.test()
async def reset_mid_stream(dut):
    """Groups in flight under backpressure, reset, then a correct round-trip run."""
    tb = TB(dut, seed=74, idle_prob=0.1, stall_prob=0.3)
    await tb.start()
    tb.monitor.stop()
    words, _ = tb.converted(1)
    pending = cocotb.start_soon(tb.driver.send_all(words))
    # long enough for the first group to reach the output (idle cycles included)
    await ClockCycles(dut.clk, LATENCY + 4)
    assert dut.o__valid.value == 1
    dut.rst.value = 1
    pending.cancel()
    dut.i__valid.value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await ReadOnly()
    assert dut.o__valid.value == 0
    await RisingEdge(dut.clk)
    tb.make_ports()
    tb.monitor.start()
    words, labels = tb.converted(20)
    await tb.send_all(words, labels)
    await tb.check(exact=True)
