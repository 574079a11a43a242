"""cocotb testbench of the ring top ``collective_ring`` against :mod:`sim.model.collective`.

The host loads every rank's memory through its host port, sends the same command to every
rank at once (``cmd_<r>`` drivers), collects the responses under random backpressure
(``rsp_<r>`` monitors) and reads the memories back; a background coroutine stalls every gate of
every link at random each cycle (or holds one stalled: a link that stops delivering). Every
response status, every memory word, the flits on every link and the overflow flags are
compared with the golden model. Each test starts from a reset.
"""
from __future__ import annotations

import os
import random

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

from hdl.multi.collective import cmd_layout, rsp_layout
from hdl.multi.config import CollComp, CollOp, CollStatus, RingConfig
from sim.model.bfp import ROUND_NEAREST as RNE
from sim.model.bfp import ROUND_STOCHASTIC as SR
from sim.model.bfp import ROUND_TRUNCATE as TRUNC
from sim.model.collective import CollectiveModel, link_flits, sendrecv_link_flits
from sim.model.fp32 import f32_to_bits
from sim.tb.collective_tb import disjoint_regions
from sim.tb.cocotb_stream import StreamDriver, StreamMonitor, reset, start_clock
from sim.tb.payload import pack, unpack

#: cycles one command may take (the longest here: about 1k cycles under stalls)
CMD_CYCLES = 20_000


class TB:
    """Drivers, monitors, stall injection, golden model and scoreboard of the ring."""

    def __init__(self, dut, seed: int, stall_prob: float = 0.0, stop=()):
        self.dut = dut
        self.config = RingConfig.preset(os.environ.get("TESSERA_PRESET", "tiny"))
        c = self.config.collective
        self.N, self.depth = c.ranks, c.depth
        self.model = CollectiveModel(c)
        self.rng = np.random.default_rng(seed)
        self.stall_rng = random.Random(seed)
        self.stall_prob = stall_prob
        self.stop_tx = sum(1 << r for kind, r in stop if kind == "tx")
        self.stop_rx = sum(1 << r for kind, r in stop if kind == "rx")
        self.cmd = [StreamDriver(dut, f"cmd_{r}", rng=random.Random(seed + r))
                    for r in range(self.N)]
        self.rsp = [StreamMonitor(dut, f"rsp_{r}", stall_prob=0.3,
                                  rng=random.Random(seed + 100 + r)) for r in range(self.N)]
        self.flits = [0] * self.N
        self.flits_rev = [0] * self.N          # per reverse link (CollectiveConfig.reverse)
        for r in range(self.N):
            for n in ("r_en", "w_en"):
                getattr(dut, f"host_{r}__{n}").value = 0
        #: the stall inputs: the reverse links' too when the ring has them
        self.stall_names = ("stall_tx", "stall_rx") + (
            ("stall_tx_rev", "stall_rx_rev") if c.reverse else ())
        for name in self.stall_names:
            getattr(dut, name).value = 0

    async def start(self):
        start_clock(self.dut)
        await reset(self.dut)
        for m in self.rsp:
            m.start()
        cocotb.start_soon(self._stalls())

    async def _stalls(self):
        full = (1 << self.N) - 1
        p, rng = self.stall_prob, self.stall_rng
        stop = {"stall_tx": self.stop_tx, "stall_rx": self.stop_rx}
        while True:
            for name in self.stall_names:
                bits = sum(1 << r for r in range(self.N) if p and rng.random() < p)
                getattr(self.dut, name).value = (bits | stop.get(name, 0)) & full
            await RisingEdge(self.dut.clk)

    async def load(self, images):
        for r in range(self.N):
            self.model.mem[r][:] = images[r]
        for a in range(self.depth):
            for r in range(self.N):
                getattr(self.dut, f"host_{r}__w_en").value = 1
                getattr(self.dut, f"host_{r}__w_addr").value = a
                getattr(self.dut, f"host_{r}__w_data").value = int(images[r][a])
            await RisingEdge(self.dut.clk)
        for r in range(self.N):
            getattr(self.dut, f"host_{r}__w_en").value = 0

    async def read(self):
        mems = [np.zeros(self.depth, dtype=np.uint32) for _ in range(self.N)]
        for a in range(self.depth):
            for r in range(self.N):
                getattr(self.dut, f"host_{r}__r_en").value = 1
                getattr(self.dut, f"host_{r}__r_addr").value = a
            await RisingEdge(self.dut.clk)
            await ReadOnly()
            for r in range(self.N):
                mems[r][a] = getattr(self.dut, f"host_{r}__r_data").value.to_unsigned()
            await RisingEdge(self.dut.clk)
        for r in range(self.N):
            getattr(self.dut, f"host_{r}__r_en").value = 0
        return mems

    async def allreduce(self, *, check_model: bool = True, deadline: int = CMD_CYCLES,
                        **fields):
        """Send one command to every rank; return the responses (fields) after checking the
        statuses against the model's (unless ``check_model`` is off). A response not seen
        within ``deadline`` cycles fails the test."""
        c = self.config.collective
        fields = {"comp": CollComp.NONE, "width": 0, "rbase": 0, "rlength": 0, "gbase": 0,
                  **fields}
        word = pack(cmd_layout(c), {"op": CollOp.ALLREDUCE, **fields})
        tasks = [cocotb.start_soon(d.send(word)) for d in self.cmd]
        for t in tasks:
            await t
        got = [unpack(rsp_layout(c), (await m.wait_for(1, deadline))[0]) for m in self.rsp]
        if check_model:
            status = self.model.allreduce(**fields)
            assert [g["status"] for g in got] == [status] * self.N, (fields, got)
            assert [g["flags"] for g in got] == self.model.flags, (fields, got)
            if status == CollStatus.OK:
                sent = link_flits(c, self.config.link.width, length=fields["length"],
                                  seg=fields["seg"], comp=fields["comp"], width=fields["width"])
                self.flits = [a + b for a, b in zip(self.flits, sent)]
        return got

    async def sendrecv(self, cmds):
        """Send ``SENDRECV`` command ``cmds[r]`` (fields ``base``, ``length``, ``rbase``,
        ``rlength``, ``timeout``, ``sdir``, ``rdir``) to rank ``r``, all at once; check every
        status against the model, count the flits per forward and reverse link, return the
        responses (fields)."""
        c = self.config.collective
        full = [{"op": CollOp.SENDRECV, "seg": 0, "comp": CollComp.NONE, "width": 0,
                 "gbase": 0, "sdir": 0, "rdir": 0, **f} for f in cmds]
        tasks = [cocotb.start_soon(d.send(pack(cmd_layout(c), f)))
                 for d, f in zip(self.cmd, full)]
        for t in tasks:
            await t
        got = [unpack(rsp_layout(c), (await m.wait_for(1, CMD_CYCLES))[0]) for m in self.rsp]
        statuses = self.model.execute(full)
        assert [g["status"] for g in got] == statuses, (cmds, got)
        fwd, rev = sendrecv_link_flits(self.config.link.width,
                                       [f if st == CollStatus.OK else None
                                        for f, st in zip(full, statuses)])
        self.flits = [a + b for a, b in zip(self.flits, fwd)]
        self.flits_rev = [a + b for a, b in zip(self.flits_rev, rev)]
        return got

    async def check(self):
        """Memories, flit counters and overflow flags against the model."""
        mems = await self.read()
        for r in range(self.N):
            bad = np.flatnonzero(mems[r] != self.model.mem[r])
            assert bad.size == 0, (f"rank {r} words {bad.tolist()[:8]}: got "
                                   f"{[hex(v) for v in mems[r][bad[:8]]]}, expected "
                                   f"{[hex(v) for v in self.model.mem[r][bad[:8]]]}")
            assert getattr(self.dut, f"flits_{r}").value.to_unsigned() == self.flits[r]
            if self.config.collective.reverse:
                assert (getattr(self.dut, f"flits_rev_{r}").value.to_unsigned()
                        == self.flits_rev[r]), (r, self.flits_rev)
        assert self.dut.overflow.value.to_unsigned() == 0
        if self.config.collective.reverse:
            assert self.dut.overflow_rev.value.to_unsigned() == 0

    def random_images(self):
        x = self.rng.standard_normal((self.N, self.depth))
        x *= 2.0 ** self.rng.integers(-8, 9, x.shape)
        imgs = [f32_to_bits(v.astype(np.float32)) for v in x]
        specials = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 1, 0x7F7FFFFF],
                            dtype=np.uint32)
        for im in imgs:        # a few special values at random places
            where = self.rng.integers(0, self.depth, 4)
            im[where] = self.rng.choice(specials, 4)
        return imgs

    def gradient(self, n: int, *, ties: bool = False):
        """``n`` random FP32 words (uint32); with ``ties`` many repeated magnitudes of both
        signs (``+-2.0``, above most of the other words, so they compete for the top-k slots)
        and zeros of both signs."""
        x = self.rng.standard_normal(n) * 2.0 ** self.rng.integers(-8, 1 if ties else 9, n)
        w = f32_to_bits(x.astype(np.float32))
        if ties:
            w[self.rng.random(n) < 0.4] = 0x40000000
            w[self.rng.random(n) < 0.2] = 0xC0000000
            w[self.rng.random(n) < 0.1] = 0x80000000
            w[self.rng.random(n) < 0.1] = 0
        return w


@cocotb.test()
async def allreduce_random_backpressure(dut):
    """Random vectors (with specials), every link stalled at random 40 % of the cycles:
    bit-exact on every rank, exact flit counts, no overflow, plain and BFP-compressed (every
    width; the specials make flagged groups; segments that are not whole groups; stochastic
    rounding and truncation, the model stepping each rank's LFSR); BAD_* commands change
    nothing."""
    tb = TB(dut, seed=11, stall_prob=0.4)
    await tb.start()
    N, D = tb.N, tb.depth
    for rep in range(3):
        await tb.load(tb.random_images())
        for base, length, seg in [(0, D, -(-D // N)), (5, 4 * N + 3, 5), (D - N + 1, N - 1, 1),
                                  (7, 13, 13)]:
            await tb.allreduce(base=base, length=length, seg=seg, timeout=300)
        G = tb.config.collective.bfp.group_size
        for w in tb.config.collective.bfp.widths:
            await tb.allreduce(base=4 * rep, length=G * 2 * N, seg=2 * G, timeout=300,
                               comp=CollComp.BFP, width=w)
        # BFP segments that are not whole groups: padded on the link, padding dropped
        await tb.allreduce(base=3 + rep, length=G * N + 3, seg=G + 2, timeout=300,
                           comp=CollComp.BFP, width=2 + 2 * rep)
        # stochastic rounding (each rank's converter LFSR, stepped by every group above) and
        # truncation
        await tb.allreduce(base=1 + rep, length=G * 2 * N - 1, seg=2 * G, timeout=300,
                           comp=CollComp.BFP, width=2 + 2 * rep, rounding=SR)
        await tb.allreduce(base=2, length=G * N, seg=G, timeout=300, comp=CollComp.BFP,
                           width=4, rounding=TRUNC)
        await tb.allreduce(base=0, length=G, seg=G, timeout=300, comp=CollComp.BFP,
                           width=5)                                         # BAD_COMP
        await tb.allreduce(base=0, length=G, seg=G, timeout=300, comp=CollComp.BFP,
                           width=4, rounding=3)                             # BAD_COMP
        await tb.allreduce(base=0, length=0, seg=1, timeout=300)            # BAD_LEN
        await tb.allreduce(base=0, length=8, seg=1, timeout=300)            # BAD_SEG
        await tb.allreduce(base=0, length=8, seg=8, timeout=0)              # BAD_TIMEOUT
        await tb.check()


@cocotb.test()
async def stopped_link_times_out(dut):
    """Link 0 stops delivering (its exit held stalled): every rank answers TIMEOUT after at
    least ``timeout`` cycles instead of hanging, and then answers the next command."""
    tb = TB(dut, seed=12, stop=[("rx", 1)])
    await tb.start()
    await tb.load(tb.random_images())
    got = await tb.allreduce(base=0, length=16, seg=8, timeout=64, check_model=False)
    assert [g["status"] for g in got] == [CollStatus.TIMEOUT] * tb.N, got
    assert all(g["cycles"] >= 64 for g in got), got
    got = await tb.allreduce(base=0, length=0, seg=8, timeout=64, check_model=False)
    assert [g["status"] for g in got] == [CollStatus.BAD_LEN] * tb.N, got
    # the longest timeout the field holds: the idle and cycle counters run through all its bits
    longest = (1 << tb.config.collective.timeout_bits) - 1
    got = await tb.allreduce(base=0, length=16, seg=8, timeout=longest, check_model=False,
                             deadline=longest + CMD_CYCLES)
    assert [g["status"] for g in got] == [CollStatus.TIMEOUT] * tb.N, got
    assert all(longest <= g["cycles"] <= longest + CMD_CYCLES for g in got), got
    assert dut.overflow.value.to_unsigned() == 0


@cocotb.test()
async def allreduce_bfp_extreme_magnitudes(dut):
    """BFP-compressed all-reduces of vectors at the ends of FP32's range, every width and
    rounding, every link stalled at random 40 % of the cycles: subnormals and values just
    above the smallest normal (groups whose decoded words are subnormal, so their bits land
    anywhere in the fraction, and the decoder's subnormal rounding), and values near the
    largest finite (sums that overflow to infinity, groups flagged). Every status, flag,
    memory word and flit count against the model."""
    tb = TB(dut, seed=15, stall_prob=0.4)
    await tb.start()
    N, D = tb.N, tb.depth
    c = tb.config.collective
    G = c.bfp.group_size
    for lo, hi in ((-149, -118), (-130, -100), (110, 128)):
        x = tb.rng.standard_normal((N, D)) * 2.0 ** tb.rng.integers(lo, hi, (N, D))
        with np.errstate(over="ignore"):
            images = [f32_to_bits(v.astype(np.float32)) for v in x]
        if lo == -149:                  # raw subnormal bit patterns of both signs
            for im in images:
                where = tb.rng.integers(0, D, D // 4)
                im[where] = (tb.rng.integers(1, 1 << 23, where.size, dtype=np.uint32)
                             | (tb.rng.integers(0, 2, where.size, dtype=np.uint32) << 31))
        await tb.load(images)
        for w in c.bfp.widths:
            for rounding in (RNE, SR, TRUNC):
                await tb.allreduce(base=(w + rounding) % G, length=G * 2 * N, seg=2 * G,
                                   timeout=300, comp=CollComp.BFP, width=w, rounding=rounding)
        await tb.check()


@cocotb.test()
async def allreduce_topk_rounds(dut):
    """Three top-k all-reduces in a row (``comp = CollComp.TOPK``: compress with error
    feedback, all-gather of the messages, rank-order sum), every link stalled at random 40 % of
    the cycles: a fresh random gradient on every rank before each round (repeated magnitudes of
    both signs and +-0 on some ranks; in the first round one segment of rank 0 all +-0), the
    residual carried from the round before (0 at the start). After each round every status,
    every memory word of every rank (gradient, residual, gather buffer, and nothing else
    written) and the flits per link equal the model bit for bit. Then top-k commands with
    overlapping regions or a gather buffer past the memory answer BAD_LEN and change nothing."""
    tb = TB(dut, seed=13, stall_prob=0.4)
    await tb.start()
    N, D = tb.N, tb.depth
    topk = tb.config.collective.topk
    assert topk is not None, "the preset's collective engine has no top-k hardware"
    length = 2 * topk.seg
    base, rbase, gbase = 0, length, 2 * length
    glen = N * topk.message_words(length)
    assert gbase + glen <= D, (gbase, glen, D)
    cmd = dict(base=base, length=length, seg=0, timeout=300, comp=CollComp.TOPK,
               rbase=rbase, gbase=gbase)
    images = tb.random_images()
    for im in images:
        im[rbase:rbase + length] = 0                # error feedback starts from 0
    for rnd in range(3):
        if rnd:
            images = [m.copy() for m in tb.model.mem]   # the residual of the round before
        for r, im in enumerate(images):
            im[base:base + length] = tb.gradient(length, ties=(r + rnd) % 2 == 0)
        if rnd == 0:                                # a segment of zeros: all k slots tie
            images[0][base + topk.seg:base + 2 * topk.seg] = tb.rng.choice(
                np.array([0, 0x80000000], np.uint32), topk.seg)
        await tb.load(images)
        got = await tb.allreduce(**cmd)
        assert [g["status"] for g in got] == [CollStatus.OK] * N, got
        await tb.check()
    assert all(f > 0 for f in tb.flits), tb.flits
    for bad in (dict(rbase=base + length - 1),        # residual overlaps the gradient
                dict(gbase=rbase + length - 1),       # gather buffer overlaps the residual
                dict(gbase=D - glen + 1)):            # gather buffer past the memory
        got = await tb.allreduce(**{**cmd, **bad})
        assert [g["status"] for g in got] == [CollStatus.BAD_LEN] * N, (bad, got)
    await tb.check()


@cocotb.test()
async def sendrecv_both_rings(dut):
    """Point-to-point SENDRECVs on the forward and the reverse ring (the tiny presets have
    reverse links), every gate of both rings stalled at random 40 % of the cycles: a
    pipeline's forward step (rank ``r`` to ``r + 1``, the last rank sends nothing), its
    backward step over the reverse links (rank ``r`` to ``r - 1``, rank 0 sends nothing),
    every rank sending back at once, and 1F1B exchanges fused into one command per rank of
    each pair ``(2i, 2i + 1)`` (a rank left over has nothing to do: ``BAD_LEN``). Random
    lengths and disjoint regions, random bit patterns; every status, memory word and flit
    count of every link of both rings against the model."""
    tb = TB(dut, seed=14, stall_prob=0.4)
    await tb.start()
    N, D = tb.N, tb.depth
    assert tb.config.collective.reverse, "the preset's ring has no reverse links"
    rng = tb.rng

    def cmds(send, recv, sdir, rdir):
        return [dict(base=b, length=n, rbase=rb, rlength=rn, timeout=500, sdir=s, rdir=d)
                for (b, n, rb, rn), s, d in zip(disjoint_regions(rng, D, send, recv), sdir,
                                                 rdir)]

    await tb.load([rng.integers(0, 1 << 32, D, dtype=np.uint64).astype(np.uint32)
                   for _ in range(N)])
    for _ in range(2):
        n = [int(x) for x in rng.integers(1, 12, N)]
        fwd = [n[r] if r < N - 1 else 0 for r in range(N)]                  # r -> r + 1
        await tb.sendrecv(cmds(fwd, [fwd[(r - 1) % N] for r in range(N)], [0] * N, [0] * N))
        bwd = [n[r] if r > 0 else 0 for r in range(N)]                      # r -> r - 1
        await tb.sendrecv(cmds(bwd, [bwd[(r + 1) % N] for r in range(N)], [1] * N, [1] * N))
        await tb.sendrecv(cmds(n, [n[(r + 1) % N] for r in range(N)], [1] * N, [1] * N))
        pair = [r ^ 1 if (r ^ 1) < N else None for r in range(N)]
        send = [n[r] if pair[r] is not None else 0 for r in range(N)]
        recv = [send[pair[r]] if pair[r] is not None else 0 for r in range(N)]
        got = await tb.sendrecv(cmds(send, recv, [r % 2 for r in range(N)],
                                     [1 - r % 2 for r in range(N)]))
        assert [g["status"] for g in got] == [CollStatus.OK if p is not None
                                              else CollStatus.BAD_LEN for p in pair], got
        await tb.check()
    assert all(tb.flits_rev[1:]) and all(tb.flits[:N - 1]), (tb.flits, tb.flits_rev)
