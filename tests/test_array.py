"""Fast tier: SystolicArray (and its PEs) in Amaranth's simulator vs
sim.model.array.ArrayStreamModel.

Every mode, S in {2, 4}, several width pairs, random idle cycles on ``inp``/``wload`` and random
backpressure on ``out``; latency and beat timing; the same stationary load serving FWD and
BWD_DATA; invalid configs. (S = 8 runs in the cocotb tier.)
"""
import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from hdl.array.array import SystolicArray, array_latency
from hdl.array.config import BWD_DATA, BWD_WEIGHT, FWD, ArrayConfig
from hdl.array.pe import PE
from sim.model.array import ArrayStreamModel
from sim.tb import cycles as doc
from sim.tb.amaranth_tb import run_sim


def _elems(vals):
    return [{"mag": abs(int(x)), "sign": int(x < 0)} for x in vals]


def make_tiles(rng, S, mode, width_a, width_b, n_tiles, beats_per_tile):
    """Random tiles: (weights (S, S) or None, list of beats (h, v, first, last))."""
    ma, mb = (1 << width_a) - 1, (1 << width_b) - 1
    tiles = []
    for t in range(n_tiles):
        w = None if mode == BWD_WEIGHT else rng.integers(-mb, mb + 1, (S, S))
        nb = S if mode == BWD_WEIGHT else beats_per_tile[t % len(beats_per_tile)]
        beats = []
        for j in range(nb):
            if mode == FWD:
                h, v = rng.integers(-ma, ma + 1, S), np.zeros(S, int)
            elif mode == BWD_DATA:
                h, v = np.zeros(S, int), rng.integers(-ma, ma + 1, S)
            else:
                h, v = rng.integers(-ma, ma + 1, S), rng.integers(-mb, mb + 1, S)
            beats.append((h, v, j == 0, j == nb - 1))
        tiles.append((w, beats))
    return tiles


def expected(cfg, mode, tiles):
    model = ArrayStreamModel(cfg)
    out = []
    for t, (w, beats) in enumerate(tiles):
        bank = t % 2
        if w is not None:
            for r in range(cfg.size):
                model.load(bank, r, (w[r] < 0).astype(int), np.abs(w[r]))
        for h, v, first, last in beats:
            out += model.beat(mode, h=h, v=v, bank=bank, first=first, last=last)
    return [list(map(int, o)) for o in out]


def run_array(cfg, mode, width_a, width_b, tiles, *, seed=0, idle=0.0, stall=0.0,
              timing=None, mode_switch=None):
    """Simulate; returns the list of output vectors. ``timing`` collects (accept, out) cycles
    of every beat when given. ``mode_switch``: list of (mode, tiles) run after the first batch
    *without reloading* (tiles carry w=None and reuse bank 0/1 contents)."""
    S = cfg.size
    dut = SystolicArray(config=cfg)
    rng = random.Random(seed)
    state = {"loaded": 0, "issued": 0, "cycle": 0}
    results = []
    accepts, outs = [], []
    phases = [(mode, tiles)] + list(mode_switch or [])
    total = sum(len(b) for _, ts in phases for _, b in ts)

    async def clock(ctx):
        while True:
            await ctx.tick()
            state["cycle"] += 1

    async def loader(ctx):
        for t, (w, _) in enumerate(tiles):
            if w is None:
                state["loaded"] = t + 1
                continue
            while state["issued"] < t - 1:       # bank t%2 held tile t-2: wait until issued
                await ctx.tick()
            for r in range(S):
                while idle and rng.random() < idle:
                    await ctx.tick()
                ctx.set(dut.wload.payload, {"w": _elems(w[r]), "row": r, "bank": t % 2})
                ctx.set(dut.wload.valid, 1)
                await ctx.tick().until(dut.wload.ready)
                ctx.set(dut.wload.valid, 0)
            state["loaded"] = t + 1

    async def streamer(ctx):
        for ph, (md, ts) in enumerate(phases):
            if ph > 0:
                while ctx.get(dut.busy):
                    await ctx.tick()
            ctx.set(dut.mode, md)
            ctx.set(dut.width_a, width_a)
            ctx.set(dut.width_b, width_b)
            for t, (_, beats) in enumerate(ts):
                while ph == 0 and state["loaded"] <= t:
                    await ctx.tick()
                for h, v, first, last in beats:
                    while idle and rng.random() < idle:
                        await ctx.tick()
                    ctx.set(dut.inp.payload, {"h": _elems(h), "v": _elems(v), "bank": t % 2,
                                              "first": int(first), "last": int(last)})
                    ctx.set(dut.inp.valid, 1)
                    await ctx.tick().until(dut.inp.ready)
                    accepts.append(state["cycle"] - 1)
                    ctx.set(dut.inp.valid, 0)
                if ph == 0:
                    state["issued"] = t + 1

    async def collector(ctx):
        while len(results) < total:
            while stall and rng.random() < stall:
                ctx.set(dut.out.ready, 0)
                await ctx.tick()
            ctx.set(dut.out.ready, 1)
            payload, = await ctx.tick().sample(dut.out.payload).until(dut.out.valid)
            outs.append(state["cycle"] - 1)
            results.append([int(payload.value[i]) for i in range(S)])
        ctx.set(dut.out.ready, 0)

    async def lockstep(ctx):
        """The array's beat timer must mirror every row schedule's ``ready`` and every PE's
        ``done``."""
        ready, done = dut.beat_timer
        while True:
            await ctx.tick()
            r, d = ctx.get(ready), ctx.get(done)
            for sched, row in zip(dut.schedules, dut.pes):
                assert ctx.get(sched.ready) == r, state["cycle"]
                # the schedules trust the array to start only while ready
                assert not ctx.get(sched.start) or ctx.get(sched.ready), state["cycle"]
                for pe in row:
                    assert ctx.get(pe.done) == d, state["cycle"]

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_process(clock)
    sim.add_testbench(lockstep, background=True)
    sim.add_testbench(loader)
    sim.add_testbench(streamer)
    sim.add_testbench(collector)
    deadline = 2 * (total + 10) * (2 * S + 2) * cfg.beat_cycles(width_a, width_b) + 1000
    t = 0
    while len(results) < total and t < deadline:      # stop as soon as every output arrived
        t += 200
        sim.run_until(t * 1e-6)
    assert len(results) == total, f"only {len(results)} of {total} outputs"
    if timing is not None:
        timing.extend(zip(accepts, outs))
    return results


def _collector(dut, n, got):
    """A testbench taking ``n`` output vectors into ``got``, always ready."""
    S = dut.config.size

    async def collector(ctx):
        ctx.set(dut.out.ready, 1)
        for _ in range(n):
            payload, = await ctx.tick().sample(dut.out.payload).until(dut.out.valid)
            got.append([int(payload.value[i]) for i in range(S)])
    return collector


@pytest.mark.parametrize("mode", [FWD, BWD_DATA, BWD_WEIGHT])
@pytest.mark.parametrize("S, wa, wb", [(2, 2, 2), (2, 8, 4), (4, 4, 6), (4, 8, 8)])
def test_array_matches_model(mode, S, wa, wb):
    cfg = ArrayConfig(size=S)
    rng = np.random.default_rng(10 * S + mode + wa)
    tiles = make_tiles(rng, S, mode, wa, wb, n_tiles=3, beats_per_tile=[3, 1, 2 * S])
    got = run_array(cfg, mode, wa, wb, tiles, seed=S + mode)
    assert got == expected(cfg, mode, tiles)


@pytest.mark.parametrize("mode", [FWD, BWD_DATA, BWD_WEIGHT])
@pytest.mark.parametrize("wa, wb, idle, stall", [(4, 2, 0.3, 0.4), (2, 2, 0.0, 0.7)])
def test_array_backpressure_and_idle(mode, wa, wb, idle, stall):
    """Random idle/backpressure; (2, 2) = one-cycle beats, no idle, heavy backpressure: the
    output FIFO must never overflow (every valid beat in flight reserves a slot)."""
    cfg = ArrayConfig(size=2)
    rng = np.random.default_rng(50 + mode)
    tiles = make_tiles(rng, 2, mode, wa, wb, n_tiles=6, beats_per_tile=[5, 2])
    got = run_array(cfg, mode, wa, wb, tiles, seed=3, idle=idle, stall=stall)
    assert got == expected(cfg, mode, tiles)


def test_array_extreme_values_no_overflow():
    """All magnitudes at 2**8 - 1 with equal signs: the exact chain needs all acc_bits."""
    S = 4
    cfg = ArrayConfig(size=S)
    ones = np.full((S, S), 255)
    for mode, sgn in ((FWD, 1), (BWD_DATA, -1), (BWD_WEIGHT, -1)):
        beats = [(sgn * np.full(S, 255), np.full(S, 255), j == 0, j == S - 1) for j in range(S)]
        tiles = [(None if mode == BWD_WEIGHT else ones, beats)]
        got = run_array(cfg, mode, 8, 8, tiles)
        want = expected(cfg, mode, tiles)
        assert got == want
        assert abs(want[0][0]) == S * 255 * 255


@pytest.mark.parametrize("wa, wb", [(2, 2), (4, 6), (8, 8)])
def test_latency_and_one_beat_per_product_time(wa, wb):
    S = 2
    cfg = ArrayConfig(size=S)
    rng = np.random.default_rng(wa * wb)
    tiles = make_tiles(rng, S, FWD, wa, wb, n_tiles=1, beats_per_tile=[12])
    timing = []
    got = run_array(cfg, FWD, wa, wb, tiles, timing=timing)
    assert got == expected(cfg, FWD, tiles)
    B = doc.beat_cycles(wa, wb, cfg.lanes)            # docs/array.md, not the code under test
    lat = doc.array_latency(S, wa, wb, cfg.lanes)
    assert array_latency(cfg, wa, wb) == lat               # the published figure agrees
    assert [o - a for a, o in timing] == [lat] * len(timing)
    assert [timing[i + 1][0] - timing[i][0] for i in range(len(timing) - 1)] == \
        [B] * (len(timing) - 1)


def test_same_stationary_load_serves_fwd_and_bwd_data():
    """Weights loaded once; FWD beats, then BWD_DATA beats on the same banks, no reload:
    outputs are X.W and dY.W^T of the very same stationary contents (no transposed copy)."""
    S = 4
    cfg = ArrayConfig(size=S)
    rng = np.random.default_rng(99)
    fwd_tiles = make_tiles(rng, S, FWD, 6, 8, n_tiles=2, beats_per_tile=[5])
    bwd_beats = make_tiles(rng, S, BWD_DATA, 6, 8, n_tiles=2, beats_per_tile=[4])
    bwd_tiles = [(None, beats) for _, beats in bwd_beats]
    got = run_array(cfg, FWD, 6, 8, fwd_tiles, mode_switch=[(BWD_DATA, bwd_tiles)])
    want = expected(cfg, FWD, fwd_tiles)
    for t, (_, beats) in enumerate(bwd_tiles):
        w = fwd_tiles[t][0]
        want += [list(map(int, w @ v)) for _, v, _, _ in beats]
    assert got == want


def test_invalid_configs():
    with pytest.raises(TypeError, match="SystolicArray.config"):
        SystolicArray(config=None)
    with pytest.raises(TypeError, match="PE.config"):
        PE(config=3)
    with pytest.raises(ValueError, match="ArrayConfig.size.*32"):
        ArrayConfig(size=32)
    with pytest.raises(ValueError, match="ArrayConfig.max_mantissa.*7"):
        ArrayConfig(max_mantissa=7)


def test_width_change_with_a_beat_while_the_cores_run():
    """Edge case: the widths change in the very cycle a beat is accepted, while the beat
    started that cycle runs the new, longer beat (2x2 -> 2x8: B 1 -> 4 at one lane) and the
    next beat is already offered. The accepted beat waits in ``hold`` until the rows have the
    new settings; ``inp.ready`` must stay low while it waits even once the settings are quiet
    and the cores are about to be ready, or the next beat would overwrite it. Magnitudes fit
    both widths, so every output is the exact product of its beat (no beat lost, none twice).
    Kills mutant 798660411557 (``waiting_n`` as ``accept & waiting``; found by a bounded
    formal check of that line)."""
    S = 2
    cfg = ArrayConfig(size=S)
    rng = np.random.default_rng(5)
    w = rng.integers(-3, 4, (S, S))
    beats = [(rng.integers(-3, 4, S), np.zeros(S, int), j == 0, j == 3) for j in range(4)]
    tiles = [(w, beats)]
    want = expected(cfg, FWD, tiles)
    dut = SystolicArray(config=cfg)
    got = []

    async def tb(ctx):
        ctx.set(dut.mode, FWD)
        ctx.set(dut.width_a, 2)
        ctx.set(dut.width_b, 2)
        for r in range(S):
            ctx.set(dut.wload.payload, {"w": _elems(w[r]), "row": r, "bank": 0})
            ctx.set(dut.wload.valid, 1)
            await ctx.tick().until(dut.wload.ready)
        ctx.set(dut.wload.valid, 0)
        for k, (h, v, first, last) in enumerate(beats):
            ctx.set(dut.inp.payload, {"h": _elems(h), "v": _elems(v), "bank": 0,
                                      "first": int(first), "last": int(last)})
            ctx.set(dut.inp.valid, 1)
            if k == 1:              # the change lands in the cycle beat 1 is offered
                ctx.set(dut.width_b, 8)
            await ctx.tick().until(dut.inp.ready)
        ctx.set(dut.inp.valid, 0)

    run_sim(dut, tb, _collector(dut, len(want), got), max_cycles=2000)
    assert got == want


@pytest.mark.parametrize("wa, wb, bank", [(2, 2, 0), (4, 4, 1)])
def test_weight_load_waits_for_the_beat_accepted_the_cycle_before(wa, wb, bank):
    """Edge case: a weight load into a bank is offered in the cycle right after a beat on that
    bank was accepted while no other beat used it (the bank's count goes up a cycle after the
    accept, and ``wload.ready`` must already count it). The load waits until the beat has
    left the array, so the beat is the product of the old weights and the next beat of the
    new ones. Rows are loaded last row first: the beat reaches the last row last."""
    S = 4
    cfg = ArrayConfig(size=S)
    rng = np.random.default_rng(wa + 7)
    m = (1 << min(wa, wb)) - 1
    # every weight changes sign and every element of the first beat is nonzero: any product
    # of a new weight with it changes the output
    w_old, w_new = rng.integers(1, m + 1, (S, S)), -rng.integers(1, m + 1, (S, S))
    h1, h2 = rng.integers(1, m + 1, S) * rng.choice([-1, 1], S), rng.integers(-m, m + 1, S)
    zero = np.zeros(S, int)
    want = (expected(cfg, FWD, [(w_old, [(h1, zero, True, True)])])
            + expected(cfg, FWD, [(w_new, [(h2, zero, True, True)])]))
    dut = SystolicArray(config=cfg)
    got = []

    async def load(ctx, w, rows):
        for r in rows:
            ctx.set(dut.wload.payload, {"w": _elems(w[r]), "row": r, "bank": bank})
            ctx.set(dut.wload.valid, 1)
            await ctx.tick().until(dut.wload.ready)
        ctx.set(dut.wload.valid, 0)

    async def beat(ctx, h):
        ctx.set(dut.inp.payload, {"h": _elems(h), "v": _elems(zero), "bank": bank,
                                  "first": 1, "last": 1})
        ctx.set(dut.inp.valid, 1)
        await ctx.tick().until(dut.inp.ready)
        ctx.set(dut.inp.valid, 0)

    async def tb(ctx):
        ctx.set(dut.mode, FWD)
        ctx.set(dut.width_a, wa)
        ctx.set(dut.width_b, wb)
        await load(ctx, w_old, range(S))
        for _ in range(S + 2):                   # the settings settle, the loads land
            await ctx.tick()
        await beat(ctx, h1)                      # accepted in the cycle before this one
        await load(ctx, w_new, reversed(range(S)))
        await beat(ctx, h2)

    run_sim(dut, tb, _collector(dut, len(want), got), max_cycles=2000)
    assert got == want
