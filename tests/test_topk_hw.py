"""Fast tier: top-k compression in hardware (hdl/multi/topk_select.py, hdl/multi/topk.py) in
Amaranth's simulator, bit-exact with sim/model/compress.py."""
import dataclasses
import functools

import numpy as np
import pytest
from amaranth.sim import Simulator

from hdl.config import BFPConfig
from hdl.fp32.config import FP32Config
from hdl.multi.config import (CollComp, CollectiveConfig, CollOp, CollStatus, LinkConfig,
                              RingConfig, TopK)
from hdl.multi.ring import CollectiveRing
from hdl.multi.topk import TopKOp, TopKPass
from hdl.multi.topk_select import TopKSelect
from sim.model.collective import CollectiveModel, add_f32
from sim.model.compress import (TopKState, topk_allreduce, topk_message, topk_order,
                                topk_select, topk_unpack)
from sim.model.fp32 import QNAN, f32_to_bits
from sim.tb.amaranth_tb import SIM_PERIOD, ReusableSim, add_deadline, stream_put
from sim.tb.collective_tb import check_ring, command, run_ring

FP32 = FP32Config.preset("tiny")
BFP = BFPConfig.preset("tiny")


def _words(rng, n, *, ties=False):
    x = rng.standard_normal(n) * 2.0 ** rng.integers(-8, 9, n)
    w = f32_to_bits(x.astype(np.float32))
    if ties:      # repeated magnitudes (both signs), zeros of both signs
        w[rng.random(n) < 0.4] = 0x40000000
        w[rng.random(n) < 0.2] = 0xC0000000
        w[rng.random(n) < 0.1] = 0x80000000
        w[rng.random(n) < 0.1] = 0
    return w


@pytest.mark.parametrize("topk", [TopK(seg=8, k=3), TopK(seg=16, k=16), TopK(seg=4, k=1)])
def test_select_keeps_the_k_largest_in_model_order(topk):
    """Slots after each clear equal topk_order: largest magnitude first, ties to the word that
    came first (also NaN, Inf, -0); a clear in the middle starts over."""
    dut = TopKSelect(config=topk)
    rng = np.random.default_rng(3)
    runs = [_words(rng, topk.seg, ties=t) for t in (False, True, True)]
    runs.append(np.array([0x7F800000, 0xFF800000, QNAN, 0x80000000, 0, 1, 0x80000001,
                          0x7F7FFFFF][:topk.seg], np.uint32))
    runs.append(_words(rng, max(1, topk.k // 2)))            # fewer words than k
    seen = []

    async def bench(ctx):
        for words in runs:
            ctx.set(dut.clear, 1)
            await ctx.tick()
            ctx.set(dut.clear, 0)
            for j, w in enumerate(words):
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, {"index": j, "word": int(w)})
                await ctx.tick()
            ctx.set(dut.i.valid, 0)
            await ctx.tick()
            count = ctx.get(dut.count)
            seen.append([(ctx.get(dut.slots[j].index), ctx.get(dut.slots[j].word))
                         for j in range(count)])

    sim = Simulator(dut)
    sim.add_clock(SIM_PERIOD)
    sim.add_testbench(bench)
    add_deadline(sim, 2_000)
    sim.run()
    for words, got in zip(runs, seen):
        order = topk_order(words, topk.k)
        assert got == [(int(i), int(words[i])) for i in order]


@functools.cache
def _topk_pass(fp32, mem_latency=1) -> ReusableSim:
    """The simulation of a :class:`TopKPass` of :data:`CFG` (with ``mem_latency``) and
    ``fp32`` (its pass: ``.dut``): one per configuration, shared by the tests and started from
    the initial state by every run."""
    cfg = dataclasses.replace(CFG, mem_latency=mem_latency)
    return ReusableSim(TopKPass(config=cfg, fp32_config=fp32), testbenches=1, processes=1)


def _mem_sim(sim, mem, commands, *, max_cycles=50_000):
    """Run ``commands`` (dicts of pass_layout fields) on ``sim`` (a :func:`_topk_pass`) with
    ``mem`` (uint32, updated in place) behind its port, answering reads after the config's
    ``mem_latency`` cycles (a read sees the memory before the write of its own cycle, as a
    block RAM does; a registered client delays both alike); returns the busy cycles of each
    command."""
    dut = sim.dut
    ML = dut.config.mem_latency
    cycles = []

    async def memory(ctx):
        due = [None] * ML         # read data by edges to go; None: no read
        async for clk_edge, rst, r_en, r_addr, w_en, w_addr, w_data in ctx.tick().sample(
                dut.mem.r_en, dut.mem.r_addr, dut.mem.w_en, dut.mem.w_addr, dut.mem.w_data):
            due.append(int(mem[r_addr]) if r_en else None)
            if due[1] is not None:
                ctx.set(dut.mem.r_data, due[1])
            due.pop(0)
            if w_en:
                mem[w_addr] = w_data

    async def bench(ctx):
        for c in commands:
            await stream_put(ctx, dut.cmd, c)
            n = 0
            while ctx.get(dut.busy):
                await ctx.tick()
                n += 1
            cycles.append(n)

    sim.run(bench, processes=[memory], max_cycles=max_cycles)
    return cycles


CFG = CollectiveConfig(ranks=3, depth=256, topk=TopK(seg=16, k=5))


@pytest.mark.parametrize("length,stages,mem_latency", [
    (48, 1, 1), (37, 1, 1), (3, 1, 1), (48, 2, 1), (37, 2, 1), (37, 1, 2), (48, 2, 3),
    (37, 2, 4)])
def test_compress_then_sum_equal_the_model(length, stages, mem_latency):
    """COMPRESS on each of three memories (residual from an earlier round), then SUM of the
    three messages: residual, zeroed gradient, message and sum equal the model bit for bit;
    nothing outside the regions is written; the busy cycles equal the documented formulas.
    An adder of odd (1) and even (2) latency: COMPRESS puts the gradient's +0 writes in the
    cycles the adder's results leave free, which depend on the latency's parity. A memory
    port of read latency 2 and 3 (a registered scratchpad client)."""
    fp32 = dataclasses.replace(FP32, add_stages=stages)
    topk = CFG.topk
    base, rbase, gbase = 5, 60, 120
    M = topk.message_words(length)
    rng = np.random.default_rng(length)
    mems = []
    for r in range(CFG.ranks):
        mem = rng.integers(0, 1 << 32, CFG.depth, dtype=np.uint64).astype(np.uint32)
        mem[base:base + length] = _words(rng, length, ties=r == 1)
        mem[rbase:rbase + length] = _words(rng, length) & np.uint32(0x83FFFFFF)
        mems.append(mem)
    want = []
    for r, mem in enumerate(mems):
        exp = mem.copy()
        acc = add_f32(mem[base:base + length], mem[rbase:rbase + length])
        mask = topk_select(acc, topk)
        exp[rbase:rbase + length] = np.where(mask, 0, acc)
        exp[base:base + length] = 0
        exp[gbase + r * M:gbase + (r + 1) * M] = topk_message(acc, topk)
        want.append(exp)
    sim = _topk_pass(fp32, mem_latency)
    for r, mem in enumerate(mems):
        cyc = _mem_sim(sim, mem, [dict(op=TopKOp.COMPRESS, base=base, length=length,
                                       rbase=rbase, gbase=gbase + r * M, mlen=0)])
        np.testing.assert_array_equal(mem, want[r])
        assert cyc == [_cycles(sim.dut, length)[0]]
    # every rank's message in every buffer, then SUM on rank 0's memory
    msgs = np.concatenate([m[gbase + r * M:gbase + (r + 1) * M] for r, m in enumerate(mems)])
    mem = mems[0]
    mem[gbase:gbase + 3 * M] = msgs
    exp = mem.copy()
    total = np.zeros(length, np.uint32)
    for r in range(CFG.ranks):
        idx, val = topk_unpack(msgs[r * M:(r + 1) * M], length, topk)
        total[idx] = add_f32(total[idx], val)
    exp[base:base + length] = total
    cyc = _mem_sim(sim, mem, [dict(op=TopKOp.SUM, base=base, length=length, rbase=0,
                                   gbase=gbase, mlen=M)])
    np.testing.assert_array_equal(mem, exp)
    assert cyc == [_cycles(sim.dut, length)[1]]


def _cycles(dut, length):
    """Busy cycles of COMPRESS and SUM from the formulas of docs/multicore.md (*Top-k
    compression*), ``M = mem_latency - 1``: per segment of ``n`` words ``2n + L + 4 + iw +
    2 n_sel + M``; per message ``L + 1 + M`` and per segment ``iw + 2 n_sel + 4 + M``."""
    tk, L = dut.config.topk, dut.fp32_config.latency("fp32_add")
    M = dut.config.mem_latency - 1
    segs = [min(tk.seg, length - s0) for s0 in range(0, length, tk.seg)]
    sel = [min(tk.k, n) for n in segs]
    iw = [-(-k // tk.per_word) for k in sel]
    compress = sum(2 * n + L + 4 + w + 2 * k + M for n, k, w in zip(segs, sel, iw))
    per_msg = L + 1 + M + sum(w + 2 * k + 4 + M for k, w in zip(sel, iw))
    return compress, dut.config.ranks * per_msg


def _topk_ring(N, *, depth=160, topk=TopK(seg=8, k=3), width=32, latency=2,
               fifo_depth=4, mem_latency=1, cmd_reg=False, rx_reg=False) -> ReusableSim:
    """The simulation of the ring of this configuration, for ``run_ring`` and ``check_ring``
    (its ring: ``.dut``): one per configuration (:func:`_ring_sim`)."""
    cfg = RingConfig(collective=CollectiveConfig(ranks=N, depth=depth, bfp=BFP, topk=topk,
                                                 mem_latency=mem_latency, cmd_reg=cmd_reg,
                                                 rx_reg=rx_reg),
                     link=LinkConfig(width=width, latency=latency, fifo_depth=fifo_depth))
    return _ring_sim(cfg)


@functools.cache
def _ring_sim(cfg) -> ReusableSim:
    """One ring per configuration: the tests of a configuration share its elaborated
    simulation, every run started from the initial state (``run_ring`` loads the memories)."""
    return ReusableSim(CollectiveRing(config=cfg, fp32_config=FP32), testbenches=1,
                       processes=1)


def _ring_images(seed, N, depth, *, base, length, rbase):
    rng = np.random.default_rng(seed)
    images = []
    for r in range(N):
        img = rng.integers(0, 1 << 32, depth, dtype=np.uint64).astype(np.uint32)
        img[base:base + length] = _words(rng, length, ties=r % 2 == 1)
        img[rbase:rbase + length] = 0                     # error feedback starts from 0
        images.append(img)
    return images


@pytest.mark.parametrize("N,width,stall,mem_latency", [(2, 32, 0.0, 1), (3, 16, 0.4, 1),
                                                      pytest.param(4, 8, 0.3, 1,
                                                                   marks=pytest.mark.long),
                                                      (3, 16, 0.3, 3),
                                                      (2, 16, 0.3, 4)])
def test_topk_allreduce_rounds_equal_the_model(N, width, stall, mem_latency):
    """Three top-k all-reduces in a row on the ring (the residual of each round feeds the
    next, fresh gradients written between rounds by the model's own run): every memory, every
    status and the flits per link equal CollectiveModel, under random stalls on every link
    gate; the first round's result equals the abstract topk_allreduce. Also with the engines'
    memory ports registered (``mem_latency`` 3)."""
    depth, topk = 160, TopK(seg=8, k=3)
    base, length, rbase, gbase = 3, 21, 30, 60
    images = _ring_images(N, N, depth, base=base, length=length, rbase=rbase)
    cmd = command(base=base, length=length, rbase=rbase, gbase=gbase, timeout=400,
                  comp=CollComp.TOPK)
    sim = _topk_ring(N, depth=depth, topk=topk, width=width, mem_latency=mem_latency,
                     cmd_reg=mem_latency > 1, rx_reg=mem_latency > 1)
    run = check_ring(sim, images, [cmd, cmd, cmd], stall_prob=stall, seed=N)
    assert [g["status"] for g in run.responses[0]] == [CollStatus.OK] * N
    # the abstract model: top-k with error feedback, summed in rank order from +0
    states = [TopKState(length, topk) for _ in range(N)]
    grads = [img[base:base + length] for img in images]
    first = CollectiveModel(sim.dut.config.collective)
    for r in range(N):
        first.mem[r][:] = images[r]
    first.execute(cmd)
    out, _ = topk_allreduce(grads, states)
    for r in range(N):
        np.testing.assert_array_equal(first.mem[r][base:base + length], out[r])
        np.testing.assert_array_equal(first.mem[r][rbase:rbase + length], states[r].residual)
    assert run.flits[0] > 0


@pytest.mark.parametrize("cmd_reg", [False, True])
def test_topk_bad_commands_change_nothing(cmd_reg):
    """BAD_COMP without top-k hardware or with comp = 3, BAD_LEN for each pair of overlapping
    regions and for each region past the memory, BAD_TIMEOUT; then a valid one runs. Also
    with the checks in register stages (``cmd_reg``)."""
    N, depth = 2, 96
    base, length, rbase, gbase = 0, 16, 20, 40
    topk = TopK(seg=8, k=3)
    glen = N * topk.message_words(length)
    images = _ring_images(7, N, depth, base=base, length=length, rbase=rbase)

    def c(**kw):
        f = dict(base=base, length=length, rbase=rbase, gbase=gbase, timeout=300,
                 comp=CollComp.TOPK)
        return command(**{**f, **kw})
    cmds = [c(comp=3), c(op=CollOp.SENDRECV, rlength=4), c(length=0),
            c(rbase=base + length - 1), c(gbase=rbase + length - 1), c(gbase=base + 1),
            c(rbase=depth - length + 1), c(gbase=depth - glen + 1), c(timeout=0),
            c(gbase=rbase + length)]                     # touching regions: valid
    run = check_ring(_topk_ring(N, depth=depth, topk=topk, cmd_reg=cmd_reg), images, cmds)
    assert [g[0]["status"] for g in run.responses] == [
        CollStatus.BAD_COMP, CollStatus.BAD_COMP] + [CollStatus.BAD_LEN] * 6 + [
        CollStatus.BAD_TIMEOUT, CollStatus.OK]
    # an engine built without top-k answers BAD_COMP and changes nothing
    plain = RingConfig(collective=CollectiveConfig(ranks=N, depth=depth, bfp=BFP),
                       link=LinkConfig(width=32, latency=2, fifo_depth=4))
    run = check_ring(CollectiveRing(config=plain, fp32_config=FP32), images, [c()])
    assert [g["status"] for g in run.responses[0]] == [CollStatus.BAD_COMP] * N


def test_topk_stopped_link_times_out():
    """A link that stops delivering during the gather: TIMEOUT (step 0), not a hang."""
    N, depth = 2, 96
    images = _ring_images(9, N, depth, base=0, length=16, rbase=20)
    cmd = command(base=0, length=16, rbase=20, gbase=40, timeout=60, comp=CollComp.TOPK)
    run = run_ring(_topk_ring(N, depth=depth), images, [cmd], stop=[("rx", 1)])
    assert [g["status"] for g in run.responses[0]][1] == CollStatus.TIMEOUT


@pytest.mark.parametrize("units, exc", [(("mul",), ValueError), (("add", "add"), ValueError),
                                        ("add", TypeError)])
def test_pass_units_are_checked(units, exc):
    """``TopKPass(units=...)`` takes at most one ``"add"`` (the engine's lent adder)."""
    with pytest.raises(exc, match=r"TopKPass\.units"):
        TopKPass(config=CFG, units=units)
