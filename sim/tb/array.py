"""cocotb testbench of the generated ``systolic_array`` (Verilator tier).

``TB`` drives the ``wload`` and ``inp`` streams (random idle cycles), takes ``out`` with random
backpressure and checks every output vector against :class:`sim.model.array.ArrayStreamModel`.
The preset comes from ``TESSERA_PRESET``.
"""
from __future__ import annotations

import functools
import os
import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, Timer

from hdl.array.array import array_out_layout, beat_layout, wload_layout
from hdl.array.config import BWD_DATA, BWD_WEIGHT, FWD, ArrayConfig
from sim.model.array import ArrayStreamModel
from sim.tb import cycles as doc
from sim.tb.cocotb_stream import WAIT_CYCLES, StreamDriver, StreamMonitor, reset, start_clock
from sim.tb.payload import pack, to_signed

MODES = (FWD, BWD_DATA, BWD_WEIGHT)


def config() -> ArrayConfig:
    return ArrayConfig.preset(os.environ.get("TESSERA_PRESET", "tiny"))


# ---- payload packing (the hardware's layouts: hdl.array.array) ----------------------------
@functools.cache
def _layouts(cfg: ArrayConfig):
    return beat_layout(cfg), wload_layout(cfg), array_out_layout(cfg)


def _elems(vals) -> list[dict]:
    """Signed integers as the sign/magnitude elements of :func:`hdl.array.pe.elem_layout`."""
    return [{"mag": abs(int(x)), "sign": int(x < 0)} for x in vals]


def pack_beat(cfg, h, v, bank, first, last) -> int:
    return pack(_layouts(cfg)[0], {"h": _elems(h), "v": _elems(v), "bank": bank,
                                   "first": first, "last": last})


def pack_wload(cfg, w_row, row, bank) -> int:
    return pack(_layouts(cfg)[1], {"w": _elems(w_row), "row": row, "bank": bank})


def unpack_out(cfg, word) -> list[int]:
    value = _layouts(cfg)[2]["value"]
    word = int(word) >> value.offset
    return [to_signed((word >> f.offset) & ((1 << f.width) - 1), f.width) for _, f in value.shape]


def make_tiles(rng, S, mode, wa, wb, n_tiles, lengths):
    ma, mb = (1 << wa) - 1, (1 << wb) - 1
    tiles = []
    for t in range(n_tiles):
        w = None if mode == BWD_WEIGHT else rng.integers(-mb, mb + 1, (S, S))
        nb = S if mode == BWD_WEIGHT else lengths[t % len(lengths)]
        beats = []
        for j in range(nb):
            h = rng.integers(-ma, ma + 1, S) if mode != BWD_DATA else np.zeros(S, int)
            if mode == BWD_DATA:
                v = rng.integers(-ma, ma + 1, S)
            elif mode == BWD_WEIGHT:
                v = rng.integers(-mb, mb + 1, S)
            else:
                v = np.zeros(S, int)
            beats.append((h, v, j == 0, j == nb - 1))
        tiles.append((w, beats))
    return tiles


class TB:
    """Driver (``wload`` + ``inp``), monitor (``out``), golden model and scoreboard."""

    def __init__(self, dut, *, seed=1, idle=0.0, stall=0.0):
        self.dut = dut
        self.cfg = config()
        self.rng = random.Random(seed)
        self.inp = StreamDriver(dut, "inp", idle_prob=idle, rng=random.Random(seed + 1))
        self.wload = StreamDriver(dut, "wload", idle_prob=idle, rng=random.Random(seed + 2))
        self.mon = StreamMonitor(dut, "out", stall_prob=stall, rng=random.Random(seed + 3))

    async def start(self):
        start_clock(self.dut)
        self.dut.mode.value = 0
        self.dut.width_a.value = 2
        self.dut.width_b.value = 2
        await reset(self.dut)
        self.mon.start()

    def abort(self):
        for t in getattr(self, "tasks", []):
            t.cancel()
        self.tasks = []
        self.inp.valid.value = 0
        self.wload.valid.value = 0

    async def run(self, mode, wa, wb, tiles):
        """Load/stream ``tiles``; return (got, expected) output vectors."""
        cfg, dut = self.cfg, self.dut
        S = cfg.size
        dut.mode.value = mode
        dut.width_a.value = wa
        dut.width_b.value = wb
        model = ArrayStreamModel(cfg)
        want = []
        for t, (w, beats) in enumerate(tiles):
            if w is not None:
                for r in range(S):
                    model.load(t % 2, r, (w[r] < 0).astype(int), np.abs(w[r]))
            for h, v, first, last in beats:
                want += [list(map(int, o)) for o in model.beat(mode, h=h, v=v, bank=t % 2,
                                                               first=first, last=last)]
        state = {"loaded": 0, "issued": 0}

        async def loader():
            for t, (w, _) in enumerate(tiles):
                if w is not None:
                    for _ in range(WAIT_CYCLES):
                        if state["issued"] >= t - 1:
                            break
                        await RisingEdge(dut.clk)
                    else:
                        raise TimeoutError(f"tile {t - 1} not issued (deadline)")
                    for r in range(S):
                        await self.wload.send(pack_wload(cfg, w[r], r, t % 2))
                state["loaded"] = t + 1

        async def streamer():
            for t, (_, beats) in enumerate(tiles):
                for _ in range(WAIT_CYCLES):
                    if state["loaded"] > t:
                        break
                    await RisingEdge(dut.clk)
                else:
                    raise TimeoutError(f"tile {t} not loaded (deadline)")
                for h, v, first, last in beats:
                    await self.inp.send(pack_beat(cfg, h, v, t % 2, first, last))
                state["issued"] = t + 1

        ld = cocotb.start_soon(loader())
        st = cocotb.start_soon(streamer())
        self.tasks = [ld, st]
        words = await self.mon.wait_for(len(want), timeout_cycles=200_000)
        await ld
        await st
        got = [unpack_out(cfg, w) for w in words]
        return got, want


def _check(got, want, what):
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"{what}: output {i}: got {g}, expected {w}"


def _width_pairs() -> list[tuple[int, int]]:
    """``TB_WIDTHS`` ("2x2,4x8,8x6,8x8" by default): the width pairs of the random run."""
    text = os.environ.get("TB_WIDTHS", "2x2,4x8,8x6,8x8")
    return [tuple(int(w) for w in pair.split("x")) for pair in text.split(",")]


async def _transfer_cycles(dut, accepts, outs):
    """Record the cycle of every ``inp`` and ``out`` transfer (cycles since the call)."""
    cycle = 0
    while True:
        await ReadOnly()
        if dut.inp__valid.value == 1 and dut.inp__ready.value == 1:
            accepts.append(cycle)
        if dut.out__valid.value == 1 and dut.out__ready.value == 1:
            outs.append(cycle)
        await RisingEdge(dut.clk)
        cycle += 1


@cocotb.test()
async def random_tiles_all_modes(dut):
    """Every mode x several width pairs (``TB_WIDTHS``), ``TB_TILES`` (8) tiles each, random
    idle cycles and backpressure."""
    tb = TB(dut, seed=11, idle=0.2, stall=0.3)
    await tb.start()
    S = tb.cfg.size
    rng = np.random.default_rng(5)
    n_tiles = int(os.environ.get("TB_TILES", "8"))
    for mode in MODES:
        for wa, wb in _width_pairs():
            tiles = make_tiles(rng, S, mode, wa, wb, n_tiles, [1, 3, 2 * S, 4 * S])
            got, want = await tb.run(mode, wa, wb, tiles)
            _check(got, want, f"mode {mode} widths {wa}x{wb}")
    for _ in range(40):              # the last bubble beat finishes within one beat
        if not dut.busy.value:
            break
        await RisingEdge(dut.clk)
    assert not dut.busy.value, "array still busy after every output was taken"


@cocotb.test()
async def back_to_back_throughput(dut):
    """No idle, no backpressure, tiles of 4S beats in every mode, settings changed S + 2
    cycles before the first beat: every output vector leaves exactly ``(2S + 1)*B + 4`` cycles
    after its beat was accepted and the beats are accepted exactly ``B`` cycles apart, across
    tile and bank switches (docs/array.md's formulas, :mod:`sim.tb.cycles`): a bubble anywhere
    fails."""
    tb = TB(dut, seed=3)
    await tb.start()
    cfg = tb.cfg
    S = cfg.size
    rng = np.random.default_rng(6)
    for mode in MODES:
        for wa, wb in ((2, 2), (8, 8)):
            tiles = make_tiles(rng, S, mode, wa, wb, 6, [4 * S])
            # docs/array.md: after a settings change no beat starts for S + 1 cycles (a beat
            # accepted meanwhile waits); the exact figures hold once the settings have settled
            dut.mode.value, dut.width_a.value, dut.width_b.value = mode, wa, wb
            await ClockCycles(dut.clk, S + 2)
            accepts, outs = [], []
            watch = cocotb.start_soon(_transfer_cycles(dut, accepts, outs))
            got, want = await tb.run(mode, wa, wb, tiles)
            watch.cancel()
            _check(got, want, f"throughput mode {mode} {wa}x{wb}")
            B = doc.beat_cycles(wa, wb, cfg.lanes)
            lat = doc.array_latency(S, wa, wb, cfg.lanes)
            beats = sum(len(b) for _, b in tiles)
            assert len(accepts) == len(outs) == beats, (len(accepts), len(outs), beats)
            late = [(i, o - a) for i, (a, o) in enumerate(zip(accepts, outs)) if o - a != lat]
            assert not late, f"mode {mode} {wa}x{wb}: latency {late[:4]}, documented {lat}"
            gaps = [(i, b - a) for i, (a, b) in enumerate(zip(accepts, accepts[1:])) if b - a != B]
            assert not gaps, f"mode {mode} {wa}x{wb}: beat spacing {gaps[:4]}, documented {B}"
            cycles = outs[-1] - accepts[0] + 1
            dut._log.info(f"mode {mode} {wa}x{wb}: {beats} beats in {cycles} cycles, "
                          f"utilization {beats * B / cycles:.3f}")


@cocotb.test()
async def reset_mid_operation(dut):
    """Reset while beats are in flight, then a correct run."""
    tb = TB(dut, seed=21, idle=0.1)
    await tb.start()
    S = tb.cfg.size
    rng = np.random.default_rng(7)
    tiles = make_tiles(rng, S, FWD, 8, 8, 4, [2 * S])
    task = cocotb.start_soon(tb.run(FWD, 8, 8, tiles))
    await ClockCycles(dut.clk, 3 * S * 16)
    task.cancel()
    tb.abort()
    tb.mon.stop()
    await reset(dut)
    await Timer(1, "ns")
    tb.mon.queue.clear()
    tb.mon.start()
    assert not dut.busy.value
    for mode in MODES:
        tiles = make_tiles(rng, S, mode, 4, 4, 3, [S + 1])
        got, want = await tb.run(mode, 4, 4, tiles)
        _check(got, want, f"after reset, mode {mode}")
