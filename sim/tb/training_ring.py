"""cocotb testbench of the multi-core top ``training_ring`` (docs/multicore.md): data-parallel
training steps on N training cores joined by links, bit-exact against
:class:`sim.model.multicore.MultiCoreModel`, with random backpressure on every link and on
every host port.

The pytest side is ``tests/test_training_ring_cocotb.py``; ``TESSERA_PRESET`` selects the
ring's preset (:meth:`hdl.multi.cores.TrainingRingConfig.preset`).
"""
from __future__ import annotations

import os
import random

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from hdl.core.core import STATE_LAYOUT
from hdl.core.host import HostOp
from hdl.core.isa import Op, Status, encode
from hdl.multi.config import CollStatus
from hdl.multi.cores import TrainingRingConfig
from sim.host.compiler import MLP
from sim.host.dataparallel import DataParallel
from sim.host.driver import CoreDriver
from sim.host.optim import Adam
from sim.model.bfp import ROUND_STOCHASTIC
from sim.model.collective import link_flits
from sim.model.fp32 import f32_to_bits
from sim.model.multicore import MultiCoreModel
from sim.tb.cocotb_stream import reset, start_clock
from sim.tb.core import CocotbTransport
from sim.tb.directed import directed_commands
from sim.tb.fuzz import clear_commands, fuzz_core

__all__ = ["RingTB"]


class RingTB:
    """Driver (one host driver per core, random idle cycles on the command streams and
    stalls on the response streams), link stall injector (``stall_tx`` / ``stall_rx`` bits
    drawn every cycle), golden model (:class:`~sim.model.multicore.MultiCoreModel`) and
    scoreboard of the ``training_ring`` top."""

    def __init__(self, dut, config: TrainingRingConfig, *, seed: int = 1,
                 link_stall: float = 0.0, host_idle: float = 0.0, host_stall: float = 0.0,
                 run_deadline: int = 3_000_000):
        self.dut, self.config, self.N = dut, config, config.ranks
        self.rng = random.Random(seed)
        self.link_stall = link_stall
        self.transports = [CocotbTransport(dut, seed=seed + 10 * r, idle_prob=host_idle,
                                           stall_prob=host_stall, cmd=f"cmd_{r}",
                                           rsp=f"rsp_{r}") for r in range(self.N)]
        self.drivers = [CoreDriver(config.core, t, run_deadline=run_deadline)
                        for t in self.transports]
        self._stall_task = None
        #: the stall inputs: both rings' with reverse links
        self._stall_names = ("stall_tx", "stall_rx") + (
            ("stall_tx_rev", "stall_rx_rev") if config.core.reverse_links else ())

    async def start(self):
        start_clock(self.dut)
        for r in range(self.N):
            getattr(self.dut, f"cmd_{r}__valid").value = 0
        for name in self._stall_names:
            getattr(self.dut, name).value = 0
        await reset(self.dut)
        for t in self.transports:
            t.start()
        if self.link_stall:
            self._stall_task = cocotb.start_soon(self._stall_links())

    async def _stall_links(self):
        mask = (1 << self.N) - 1
        p = self.link_stall
        while True:
            await RisingEdge(self.dut.clk)
            for name in self._stall_names:
                bits = sum(1 << r for r in range(self.N) if self.rng.random() < p)
                getattr(self.dut, name).value = bits & mask

    async def each(self, fn) -> list:
        """``fn(rank, driver)`` (a coroutine function) for every core at once, each on its
        own host port; its results in rank order."""
        tasks = [cocotb.start_soon(fn(r, d)) for r, d in enumerate(self.drivers)]
        return [await t for t in tasks]

    async def apply(self, actions) -> list[dict]:
        """Every core executes its action list (``actions[r]``) at once: the cores' runs meet
        at their ALLREDUCEs over the links."""
        return await self.each(lambda r, d: d.apply(actions[r]))

    async def read_memories(self) -> list[np.ndarray]:
        """Every core's whole scratchpad, the cores read at once."""
        return await self.each(lambda r, d: d.read_lines(0, self.config.core.lines))

    def hold_stalls(self, **bits: int) -> None:
        """Stop the random link stalls and hold each stall input at ``bits[name]`` (0 when
        not given): e.g. ``stall_rx=0b10`` stops core 1 receiving from link 0."""
        if self._stall_task is not None:
            self._stall_task.cancel()
            self._stall_task = None
        for name in self._stall_names:
            getattr(self.dut, name).value = bits.pop(name, 0)
        assert not bits, f"not stall inputs of this ring: {sorted(bits)}"

    def check_links(self) -> None:
        assert int(self.dut.overflow.value) == 0, "a link's receive FIFO overflowed"
        if self.config.core.reverse_links:
            assert int(self.dut.overflow_rev.value) == 0, "a reverse link's FIFO overflowed"

    def flits(self, reverse: bool = False) -> list[int]:
        """Flits sent on each link since reset (``reverse``: on each reverse link)."""
        return [int(getattr(self.dut, f"flits{'_rev' if reverse else ''}_{r}").value)
                for r in range(self.N)]


@cocotb.test()
async def dataparallel_steps(dut):
    """TB_STEPS data-parallel steps (FP32 links, then TB_BFP_STEPS with BFP-4 links rounding
    stochastically, then TB_TOPK_STEPS with top-k links and error feedback, the last
    TB_TOPK_LAYER_STEPS of them with one top-k ALLREDUCE per layer block) of the MLP 6-4-4
    (global batch 4 x ranks, Adam) under random link and host backpressure: every core's
    runs, losses, parameters, gradients, state, whole scratchpad (the top-k residual and
    message buffer included) and the links' flit counts equal the golden model's."""
    cfg = TrainingRingConfig.preset(os.environ.get("TESSERA_PRESET", "tiny"),
                                    ranks=int(os.environ.get("TB_RANKS", "0")) or None)
    N = cfg.ranks
    stall = float(os.environ.get("TB_LINK_STALL", "0.3"))
    tb = RingTB(dut, cfg, seed=int(os.environ.get("TB_SEED", "1")), link_stall=stall,
                host_idle=0.2, host_stall=0.2)
    await tb.start()
    desc = MLP(layers=(6, 4, 4), batch=4 * N, optimizer=Adam(lr=1e-2))
    dp = DataParallel(desc, cfg.core, N, engine=True)
    # the BFP steps round stochastically: the sequencer hands the ALLREDUCE's rounding to
    # the engine, and every core's converter LFSR must step as the model's
    bfp = DataParallel(desc, cfg.core, N, compression="bfp", width=4, engine=True,
                       rounding=ROUND_STOCHASTIC)
    topk = DataParallel(desc, cfg.core, N, compression="topk", engine=True)
    # the last TB_TOPK_LAYER_STEPS top-k steps all-reduce per layer (one top-k ALLREDUCE per
    # gradient block, each on its slice of the same residual region)
    topk_layer = DataParallel(desc, cfg.core, N, compression="topk", engine=True,
                              per_layer=True, split_grads=False)
    c = dp.compiled
    rng = np.random.default_rng(3)
    Ws = [(rng.standard_normal((a, b)) * 0.5).astype(np.float32)
          for a, b in zip(desc.layers[:-1], desc.layers[1:])]
    bs = [(rng.standard_normal(b) * 0.1).astype(np.float32) for b in desc.layers[1:]]
    m = desc.batch // N
    steps = int(os.environ.get("TB_STEPS", "2"))
    bfp_steps = int(os.environ.get("TB_BFP_STEPS", "1"))
    topk_steps = int(os.environ.get("TB_TOPK_STEPS", "1"))
    layer_steps = int(os.environ.get("TB_TOPK_LAYER_STEPS", "0"))
    assert topk.compiled.place == c.place       # the same step, so the same placement
    assert topk_layer.compiled.place == c.place
    assert topk_layer.topk_regions["b"] == topk.topk_regions["b"]
    acts = [c.init_actions(Ws, bs) for _ in range(N)]
    for t in range(1, steps + bfp_steps + topk_steps + 1):
        x = rng.standard_normal((desc.batch, desc.layers[0])).astype(np.float32)
        y = rng.integers(0, desc.layers[-1], desc.batch)
        prog = (dp.program if t <= steps else bfp.program if t <= steps + bfp_steps
                else topk.program if t <= steps + bfp_steps + topk_steps - layer_steps
                else topk_layer.program)
        for r in range(N):
            acts[r] += c.step_actions(x[r * m:(r + 1) * m], y[r * m:(r + 1) * m], t,
                                      program=prog) + c.read_actions()
    want = dp.multi.apply(acts)
    got = await tb.apply(acts)
    mems = await tb.read_memories()
    for r in range(N):
        assert got[r]["run"] == want[r]["run"] == [(Status.OK, 0)] * (steps + bfp_steps
                                                                      + topk_steps), \
            f"core {r}: RTL {got[r]['run']} != golden {want[r]['run']}"
        for key in ("params", "grads", "m", "v", "loss0"):
            assert np.array_equal(got[r][key], want[r][key]), f"core {r}: {key} differs"
        assert np.array_equal(mems[r], dp.multi.cores[r].mem), f"core {r}: scratchpad differs"
        regs = await tb.drivers[r].read_regs()
        state = STATE_LAYOUT.from_bits(regs["state"])
        assert state.conflict == 0 and state.coll_status == 0
        cocotb.log.info("core %d last step: %d cycles, coll_busy %d, overlap %d", r,
                        regs["cycles"], regs["coll_busy"], regs["overlap"])
    tb.check_links()
    flits = [int(getattr(dut, f"flits_{r}").value) for r in range(N)]
    cocotb.log.info("link flits %s", flits)
    assert min(flits) > 0


@cocotb.test()
async def pipeline_steps(dut):
    """TB_STEPS pipeline-parallel steps (:class:`sim.host.pipeline_ring.RingPipeline`: the MLP
    8-...-8-4 in one stage per core (8-8-4 on two cores, 8-8-8-4 on three), batch 8 in two
    micro-batches, Adam; each core runs one program per step whose SENDRECVs carry
    activations forward and gradients back (on more than two cores over the reverse links);
    odd steps GPipe, even steps 1F1B with its fused exchanges) under random backpressure on
    every link and host port: every core's runs, losses, parameters, gradients, state,
    whole scratchpad and the flit counts of every link equal the golden model's ring."""
    from sim.host.pipeline_ring import RingPipeline
    cfg, tb = await _started_ring(dut, seed=2)
    p = cfg.ranks
    desc = MLP(layers=(8,) * p + (4,), batch=8, micro_batches=2, optimizer=Adam(lr=1e-2))
    pipe = RingPipeline(desc, cfg.core, timeout=20_000)
    pipe_1f1b = RingPipeline(desc, cfg.core, timeout=20_000, schedule="1f1b")
    rng = np.random.default_rng(5)
    Ws = [(rng.standard_normal((a, b)) * 0.5).astype(np.float32)
          for a, b in zip(desc.layers[:-1], desc.layers[1:])]
    bs = [(rng.standard_normal(b) * 0.1).astype(np.float32) for b in desc.layers[1:]]
    acts = [c.init_actions(W, b)
            for c, W, b in zip(pipe.compiled, pipe._split(Ws), pipe._split(bs))]
    steps = int(os.environ.get("TB_STEPS", "2"))
    for t in range(1, steps + 1):
        x = rng.standard_normal((desc.batch, desc.layers[0])).astype(np.float32)
        y = rng.integers(0, desc.layers[-1], desc.batch)
        sched = pipe if t % 2 else pipe_1f1b     # same stages and buffers, other slots
        for s, a in enumerate(sched.step_actions(x, y, t)):
            acts[s] += a + pipe.compiled[s].read_actions() + [("counters",)]
    want = pipe.multi.apply(acts)
    got = await tb.apply(acts)
    mems = await tb.read_memories()
    for r in range(p):
        assert got[r]["run"] == want[r]["run"] == [(Status.OK, 0)] * steps, \
            f"core {r}: RTL {got[r]['run']} != golden {want[r]['run']}"
        keys = ("params", "grads", "m", "v") + (("loss0", "loss1") if r == p - 1 else ())
        for key in keys:
            assert np.array_equal(got[r][key], want[r][key]), f"core {r}: {key} differs"
        assert np.array_equal(mems[r], pipe.multi.cores[r].mem), f"core {r}: scratchpad differs"
        regs = got[r]["counters"]
        cocotb.log.info("stage %d last step: %d cycles, coll_busy %d, matmul_busy %d", r,
                        regs["cycles"], regs["coll_busy"], regs["matmul_busy"])
    tb.check_links()
    # on two cores both links carry (the next core is also the previous one); with reverse
    # links activations go forward on links 0 .. p - 2, gradients back on 1 .. p - 1
    rev = cfg.core.reverse_links
    flits, words = tb.flits(), pipe.multi.sendrecv_words
    assert flits == [w * 32 // cfg.link.width for w in words], (flits, words)
    assert all(words[:p - 1]) and (words[p - 1] == 0 if rev else words[p - 1] > 0), words
    if rev:
        flits, words = tb.flits(reverse=True), pipe.multi.sendrecv_words_rev
        assert flits == [w * 32 // cfg.link.width for w in words], (flits, words)
        assert words[0] == 0 and all(words[1:]), words


async def _started_ring(dut, *, seed: int) -> tuple[TrainingRingConfig, RingTB]:
    """The ring's config (``TESSERA_PRESET``) and a started :class:`RingTB` with random stalls
    on every link (``TB_LINK_STALL``, default 0.3) and host port; ``TB_SEED`` overrides
    ``seed``."""
    cfg = TrainingRingConfig.preset(os.environ.get("TESSERA_PRESET", "tiny"))
    tb = RingTB(dut, cfg, seed=int(os.environ.get("TB_SEED", str(seed))),
                link_stall=float(os.environ.get("TB_LINK_STALL", "0.3")),
                host_idle=0.2, host_stall=0.2)
    await tb.start()
    return cfg, tb


def _ring_model(cfg: TrainingRingConfig, images, program) -> tuple[MultiCoreModel, list]:
    """The golden model of the ring, each core's scratchpad set to its image in ``images`` and
    loaded with ``program``, after its run; and the run's ``(status, pc)`` per core."""
    model = MultiCoreModel(cfg.core)
    for r, im in enumerate(images):
        model.cores[r].mem[:] = im
        model.cores[r].load_program(program)
    return model, model.run()


def _state(regs: dict) -> dict:
    s = STATE_LAYOUT.from_bits(regs["state"])
    return {"status": int(s.status), "err_pc": int(s.err_pc),
            "coll_status": int(s.coll_status)}


@cocotb.test()
async def stopped_links_give_err_link(dut):
    """A link that stops delivering ends a core's run with ERR_LINK instead of a hang.

    1. Core 0 runs a receive-only SENDRECV from a core that only halts (random stalls on
       every link and host port): ERR_LINK at its pc, the state register holds the engine's
       TIMEOUT, its receive lines and the COPY after it (which would copy them) are unchanged;
       the other cores halt with OK.
    2. Link 0 stops delivering (``stall_rx`` bit 1 held: core 1 never receives): the
       ALLREDUCE on every core reports ERR_LINK at its pc with TIMEOUT, and the COPY that
       waits for its region never runs (its target line keeps its random words)."""
    cfg, tb = await _started_ring(dut, seed=4)
    N, S, D = cfg.ranks, cfg.core.size, cfg.core.bank_depth
    rng = np.random.default_rng(11)

    def words(n):
        return rng.integers(0, 1 << 32, (n, S), dtype=np.uint64).astype(np.uint32)

    # 1. a receive whose sender never sends
    recv, dest = 2 * D, 3 * D
    lone = [encode(Op.SENDRECV, b=recv, rlines=2, timeout=200),
            encode(Op.VEC, vop=5, rows=1, cols=S, a=recv, d=dest), encode(Op.HALT)]
    image = words(3)

    async def lone_run(r, d):
        if r == 0:
            await d.write_lines(recv, image[:2])
            await d.write_lines(dest, image[2:])
        await d.load_program(lone if r == 0 else [encode(Op.HALT)])
        return await d.run(), _state(await d.read_regs())

    # the golden model does not time out: it refuses a ring in which no core can go on,
    # naming the ERR_LINK the hardware's waiting core ends with
    model = MultiCoreModel(cfg.core)
    for r in range(N):
        model.cores[r].load_program(lone if r == 0 else [encode(Op.HALT)])
    try:
        model.run()
    except ValueError as e:
        assert "ERR_LINK" in str(e) and "rank 0 waits at a SENDRECV" in str(e), e
    else:
        raise AssertionError("the golden model ran a receive whose sender never sends")
    got = await tb.each(lone_run)
    assert got[0][0] == (Status.ERR_LINK, 0), got[0]
    assert got[0][1]["coll_status"] == CollStatus.TIMEOUT, got[0]
    assert [g[0] for g in got[1:]] == [(Status.OK, 0)] * (N - 1), got
    after = await tb.drivers[0].read_lines(recv, 2)
    assert np.array_equal(after, image[:2]), "a receive line changed after ERR_LINK"
    assert np.array_equal(await tb.drivers[0].read_lines(dest, 1), image[2:]), \
        "the COPY after the failed SENDRECV ran"

    # 2. link 0 stops delivering in the middle of nothing: every ALLREDUCE times out
    tb.hold_stalls(stall_rx=0b10)
    region, lines = D, 4 * N
    stop = [encode(Op.FENCE), encode(Op.ALLREDUCE, a=region, lines=lines, seg=4, timeout=300),
            encode(Op.VEC, vop=5, rows=1, cols=S, a=region, d=dest),     # waits for bank 1
            encode(Op.HALT)]
    marks = [words(1) for _ in range(N)]

    async def stop_run(r, d):
        await d.write_lines(region, words(lines))
        await d.write_lines(dest, marks[r])
        await d.load_program(stop)
        return await d.run(), _state(await d.read_regs()), await d.read_lines(dest, 1)

    got = await tb.each(stop_run)
    for r, (run, state, line) in enumerate(got):
        assert run == (Status.ERR_LINK, 1), (r, run, state)
        assert state["coll_status"] == CollStatus.TIMEOUT, (r, state)
        assert np.array_equal(line, marks[r]), f"core {r}: an instruction after the failed " \
                                               "ALLREDUCE ran"
        cocotb.log.info("core %d: %s, state %s", r, run, state)


@cocotb.test()
async def poison_right_after_a_vector_write(dut):
    """A poisoning ``ALLREDUCE`` that issues right after a vector write of a NaN into the
    gradient window (the one-pass ``OPT``'s ``g`` line): the write reaches ``flags`` through
    the gradient-write snoop ``SNOOP_LATENCY`` = 3 cycles after it, and the ``ALLREDUCE`` can
    issue 2 cycles after the vector unit's last write, so the sequencer's second sample of
    ``flags`` (the cycle after the issue, ``coll_poison_arm``) is what poisons it. Core 0's
    ``COPY`` writes a NaN, the other cores' a finite line: every core's region equals the
    golden model's (core 0's word 0 the canonical NaN, so word 0 is NaN on every core), core
    0's ``flags`` has the snoop's bit and the others' none, and core 0's one-pass ``OPT``
    skips (its parameters unchanged) while the others' step (random stalls on every link and
    host port)."""
    cfg, tb = await _started_ring(dut, seed=9)
    N, S, D = cfg.ranks, cfg.core.size, cfg.core.bank_depth
    rng = np.random.default_rng(23)
    region, lines = D, 4 * N              # bank 1; the COPY's and the OPT's lines elsewhere
    src, grad, w, m, v = 2 * D, 3 * D, 4 * D, 5 * D, 6 * D       # an OPT port per bank
    program = [encode(Op.VEC, vop=5, rows=1, cols=S, a=src, d=grad),
               encode(Op.ALLREDUCE, a=region, lines=lines, seg=4, timeout=2000, poison=1),
               encode(Op.OPT, count=S, w=w, m=m, v=v, g=grad, one_pass=1),
               encode(Op.HALT)]
    images = []
    for r in range(N):
        im = np.zeros((cfg.core.lines, S), np.uint32)
        im[region:region + lines] = f32_to_bits(
            rng.standard_normal((lines, S)).astype(np.float32))
        im[src] = f32_to_bits(rng.standard_normal(S).astype(np.float32))
        if r == 0:
            im[src, S - 1] = 0x7FC00000 | 5          # a NaN in the COPY's last word
        im[w] = f32_to_bits(rng.standard_normal(S).astype(np.float32))
        images.append(im)
    model, want = _ring_model(cfg, images, program)
    assert want == [(Status.OK, 0)] * N, want
    assert model.poisoned == [True] + [False] * (N - 1), model.poisoned
    assert model.cores[0].mem[region, 0] == 0x7FC00000
    assert np.array_equal(model.cores[0].mem[w], images[0][w])     # core 0 skipped
    assert not np.array_equal(model.cores[1].mem[w], images[1][w])  # the others stepped
    used = [(region, lines), (src, 1), (grad, 1), (w, 1), (m, 1), (v, 1)]

    async def run(r, d):
        for a, n in used:
            await d.write_lines(a, images[r][a:a + n])
        await d.load_program(program)
        res = await d.run()
        return res, [await d.read_lines(a, n) for a, n in used], await d.read_regs()

    got = await tb.each(run)
    for r, (res, mem, regs) in enumerate(got):
        assert res == want[r], (r, res, want[r])
        assert regs["flags"] == model.cores[r].run_flags, (r, regs["flags"])
        for (a, n), lines_got in zip(used, mem):
            bad = np.flatnonzero((lines_got != model.cores[r].mem[a:a + n]).any(1))
            assert not bad.size, f"core {r}: lines {a + bad} differ from the model"
        assert _state(regs)["coll_status"] == CollStatus.OK, (r, _state(regs))
    assert got[0][2]["flags"] == 4 and all(g[2]["flags"] == 0 for g in got[1:])
    tb.check_links()


@cocotb.test()
async def reverse_ring_rotation(dut):
    """Every core sends a block of lines backward while it receives one from the core after
    it, on the reverse ring (``SENDRECV`` with ``sdir = rdir = 1``), twice with other lengths
    and a COPY of the received lines between, under random stalls on every link and host
    port. The reverse link of rank 0 (to rank N - 1, closing the ring), which neither a
    pipeline (its first stage sends nothing back) nor data parallelism uses, carries a
    block. On a ring without reverse links the same rotation runs forward. Every run, the
    lines of every region with two lines either side, and the flits of every link of both
    rings equal the golden model's."""
    cfg, tb = await _started_ring(dut, seed=6)
    # without reverse links (preset tiny) the same rotation goes forward
    rev = int(cfg.core.reverse_links)
    N, S, D = cfg.ranks, cfg.core.size, cfg.core.bank_depth
    rng = np.random.default_rng(13)
    send, recv, copy = D, 2 * D, 3 * D
    program = [encode(Op.SENDRECV, a=send, lines=3, b=recv, rlines=3, timeout=2000,
                      sdir=rev, rdir=rev),
               encode(Op.VEC, vop=5, rows=3, cols=S, a=recv, d=copy),
               encode(Op.SENDRECV, a=send + 3, lines=1, b=recv + 3, rlines=1, timeout=2000,
                      sdir=rev, rdir=rev),
               encode(Op.HALT)]
    # random words in the lines the program touches (the rest of the scratchpad is 0 after
    # reset, in the model too): lines that must not change are not zeros over zeros
    regions = [(send, 4), (recv, 4), (copy, 3)]
    images = [np.zeros((cfg.core.lines, S), np.uint32) for _ in range(N)]
    for im in images:
        for base, n in regions:
            im[base:base + n] = rng.integers(0, 1 << 32, (n, S), dtype=np.uint64)
    model, want = _ring_model(cfg, images, program)

    # each region with two lines either side: written (the margins with the model's
    # zeros, whatever an earlier test in this simulation left there) and compared
    windows = [(base - 2, n + 4) for base, n in regions]

    async def run(r, d):
        for base, n in windows:
            await d.write_lines(base, images[r][base:base + n])
        await d.load_program(program)
        return await d.run()

    got = await tb.each(run)
    assert got == [(Status.OK, 0)] * N, (got, want)
    # (an address off by one or two writes in the margins; the data-parallel test compares
    # whole scratchpads, 16,384 lines a core)
    async def read(r, d):
        return [await d.read_lines(base, n) for base, n in windows]

    mems = await tb.each(read)
    for r in range(N):
        for (base, n), line in zip(windows, mems[r]):
            assert np.array_equal(line, model.cores[r].mem[base:base + n]), \
                f"core {r}: lines {base}..{base + n - 1} differ from the model"
        nxt = (r + 1 if rev else r - 1) % N     # the sender of rank r's block
        assert np.array_equal(mems[r][1][2:6], images[nxt][send:send + 4]), r
        assert np.array_equal(mems[r][2][2:5], images[nxt][send:send + 3]), r
    tb.check_links()
    words = 4 * S
    used, unused = (tb.flits(reverse=True), tb.flits()) if rev else (tb.flits(), [0] * N)
    assert (model.sendrecv_words_rev if rev else model.sendrecv_words) == [words] * N
    assert used == [words * 32 // cfg.link.width] * N, used
    assert unused == [0] * N, unused


@cocotb.test()
async def allreduce_every_link_format(dut):
    """One program of BFP-compressed ALLREDUCEs on every core, one for each link width,
    rounding (nearest even, stochastic with each core's converter LFSR, truncation) and
    range of values (ordinary magnitudes with zeros, infinities and NaNs among them;
    subnormals, whose groups decode to subnormal words; values near FP32's largest, whose
    sums overflow), each on a region of its own, under random stalls on every link and host
    port: every run, every region with two lines either side, the state register and the
    flits of every link against the golden model. The ring's training programs use BFP-4
    with stochastic rounding only; this runs the link codecs inside the ring's core build
    through the sequencer."""
    cfg, tb = await _started_ring(dut, seed=8)
    N, S, D = cfg.ranks, cfg.core.size, cfg.core.bank_depth
    rng = np.random.default_rng(17)
    # lines per ALLREDUCE: N segments of 8 lines, two BFP groups each, so a group reaches
    # the receive codec while the one before is still leaving it (its stages hold)
    L = 8 * N
    combos = [(w, rnd) for w in cfg.core.collective.bfp.widths for rnd in (0, 1, 2)]
    ranges = ((-8, 9), (-149, -127), (110, 128))
    bases = [D + i * L for i in range(len(combos) * len(ranges))]
    program = [encode(Op.ALLREDUCE, a=bases[len(ranges) * j + k], lines=L, seg=8,
                      timeout=2000, comp=1, width=w, rounding=rnd)
               for j, (w, rnd) in enumerate(combos) for k in range(len(ranges))]
    program.append(encode(Op.HALT))
    specials = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000], np.uint32)
    images = []
    for _ in range(N):
        im = np.zeros((cfg.core.lines, S), np.uint32)
        for i, base in enumerate(bases):
            lo, hi = ranges[i % len(ranges)]
            x = rng.standard_normal((L, S)) * 2.0 ** rng.integers(lo, hi, (L, S))
            with np.errstate(over="ignore"):
                words = f32_to_bits(x.astype(np.float32)).reshape(L, S)
            if i % len(ranges) == 0 and rng.random() < 0.5:  # specials in half the groups
                words.ravel()[rng.integers(0, L * S, 2)] = rng.choice(specials, 2)
            im[base:base + L] = words
        images.append(im)
    model, want = _ring_model(cfg, images, program)
    assert want == [(Status.OK, 0)] * N, want
    span = (bases[0] - 2, bases[-1] + L + 2)

    async def run(r, d):        # the compared span, margins included, is written first
        await d.write_lines(span[0], images[r][span[0]:span[1]])
        await d.load_program(program)
        res = await d.run()
        return res, await d.read_lines(span[0], span[1] - span[0]), await d.read_regs()

    got = await tb.each(run)
    for r, (res, lines, regs) in enumerate(got):
        assert res == want[r], (r, res, want[r])
        assert np.array_equal(lines, model.cores[r].mem[span[0]:span[1]]), \
            f"core {r}: lines {span[0]}..{span[1] - 1} differ from the model"
        state = _state(regs)
        assert state["coll_status"] == CollStatus.OK, (r, state)
    tb.check_links()
    want_flits = [0] * N
    for w, _ in combos:
        for _ in ranges:
            sent = link_flits(cfg.core.collective, cfg.link.width, length=L * S, seg=8 * S,
                              comp=1, width=w)
            want_flits = [a + b for a, b in zip(want_flits, sent)]
    assert tb.flits() == want_flits, (tb.flits(), want_flits)


def log_table_index(s, log_config=None) -> np.ndarray:
    """Entry of the softmax log's tables (:class:`hdl.fp32.log.FP32Log`) that the row sums
    ``s`` (FP32) select: ``j = (frac + 2**(22-t)) >> (23-t)``, ``t`` its ``table_bits``."""
    from hdl.fp32.log_config import FP32LogConfig
    t = (log_config or FP32LogConfig()).table_bits
    frac = np.asarray(s, np.float32).view(np.uint32).astype(np.int64) & ((1 << 23) - 1)
    return (frac + (1 << (22 - t))) >> (23 - t)


def softmax_every_log_entry_rows(rng, log_config=None) -> np.ndarray:
    """Two-class logit rows ``[0, ln(m - 1)]`` whose row sum ``1 + (m - 1) = m`` falls near the
    middle of each of the log table's ``2**t + 1`` entries in turn (``m`` in ``(1, 2)``,
    jittered by ``rng`` within a third of an entry): FP32, shape ``(2**t + 1, 2)``."""
    from hdl.fp32.log_config import FP32LogConfig
    n = 1 << (log_config or FP32LogConfig()).table_bits
    j = np.arange(n + 1) + rng.uniform(-0.3, 0.3, n + 1)
    m = 1 + np.clip(j, 2.0 ** -6, n - 2.0 ** -4) / n         # m - 1 > 0, m < 2
    return np.stack([np.zeros(n + 1), np.log(m - 1)], axis=1).astype(np.float32)


@cocotb.test()
async def softmax_every_log_entry(dut):
    """SOFTMAX_XENT on every core, first on two-class rows whose sums select each entry of
    the loss's log table in turn (:func:`softmax_every_log_entry_rows`; the training
    programs' losses reach only the entries their batches' sums fall on), then on random
    eight-class rows with a wide spread of logits; random labels, random stalls on every
    link and host port. Every run, the gradients and losses with two lines either side,
    against the golden model; the model's row sums must select every table entry (else the
    case no longer does what it is for)."""
    cfg, tb = await _started_ring(dut, seed=9)
    N, S, D = cfg.ranks, cfg.core.size, cfg.core.bank_depth
    rng = np.random.default_rng(19)
    z2 = [softmax_every_log_entry_rows(rng) for _ in range(N)]
    r2 = len(z2[0])
    r8 = 64
    z8 = [(rng.standard_normal((r8, 8)) * rng.uniform(0.5, 6, (r8, 1))).astype(np.float32)
          for _ in range(N)]
    from sim.model.grad import softmax_xent
    s = softmax_xent(z2[0], np.zeros(r2, int), 1.0, cfg.core.grad)[1]
    assert set(log_table_index(s).tolist()) == set(range(r2)), \
        sorted(set(range(r2)) - set(log_table_index(s).tolist()))
    a2, a8, lab, d2, d8, e = D, D + r2, 2 * D, 3 * D, 3 * D + r2 + 4, 4 * D
    l2, l8 = -(-r2 // S), -(-r8 // S)          # label / loss lines of each instruction
    program = [encode(Op.SOFTMAX_XENT, rows=r2, cols=2, a=a2, b=lab, d=d2, e=e,
                      imm=0x3F800000),
               encode(Op.SOFTMAX_XENT, rows=r8, cols=8, a=a8, b=lab + l2, d=d8, e=e + l2 + 2,
                      imm=0x3E000000),
               encode(Op.HALT)]
    images = []
    for r in range(N):
        im = np.zeros((cfg.core.lines, S), np.uint32)
        im[a2:a2 + r2, :2] = z2[r].view(np.uint32)
        im[a8:a8 + 2 * r8] = z8[r].view(np.uint32).reshape(2 * r8, S)
        labels = np.zeros((l2 + l8) * S, np.uint32)
        labels[:r2] = rng.integers(0, 2, r2)
        labels[l2 * S:l2 * S + r8] = rng.integers(0, 8, r8)
        im[lab:lab + l2 + l8] = labels.reshape(-1, S)
        # what the program writes holds random words first: an unwritten word shows
        for base, n in ((d2, r2), (d8, 2 * r8), (e, l2 + l8 + 2)):
            im[base:base + n] = rng.integers(0, 1 << 32, (n, S), dtype=np.uint64)
        images.append(im)
    model, want = _ring_model(cfg, images, program)
    assert want == [(Status.OK, 0)] * N, want
    windows = [(a2 - 2, r2 + 2 * r8 + 4), (lab - 2, l2 + l8 + 4),
               (d2 - 2, d8 + 2 * r8 + 4 - d2), (e - 2, l2 + l8 + 6)]

    async def run(r, d):
        for base, n in windows:
            await d.write_lines(base, images[r][base:base + n])
        await d.load_program(program)
        res = await d.run()
        return res, [await d.read_lines(base, n) for base, n in windows]

    got = await tb.each(run)
    for r, (res, lines) in enumerate(got):
        assert res == want[r], (r, res, want[r])
        for (base, n), line in zip(windows, lines):
            assert np.array_equal(line, model.cores[r].mem[base:base + n]), \
                f"core {r}: lines {base}..{base + n - 1} differ from the model"
    tb.check_links()


@cocotb.test()
async def directed_program_core0(dut):
    """The single core's directed host-command stream (:func:`sim.tb.directed.directed_commands`:
    every FAST slot, precision entry and ``(layer, mode)``, the vector unit on FP32 special
    values, every bank on the matmul engine's ports) on core 0 of the ring, through the
    fuzzer's checker (:func:`sim.tb.fuzz.fuzz_core`: every response against its host model,
    the whole scratchpad read back and compared at the end), with idle cycles and
    backpressure on its host port; the other cores stay idle. The ring's cores are the
    training core built with ``ranks >= 2`` (collective engine, link endpoints): this runs
    the paths the ring's own programs leave out on that build (``make coverage``)."""
    cfg = TrainingRingConfig.preset(os.environ.get("TESSERA_PRESET", "tiny"))
    tb = RingTB(dut, cfg, seed=int(os.environ.get("TB_SEED", "7")), host_idle=0.1,
                host_stall=0.1)
    await tb.start()
    cmds = directed_commands(cfg.core)
    runs = sum(op == HostOp.START for op, _, _ in cmds)
    stats = await fuzz_core(cfg.core, tb.transports[0], seed=0, n=0, cmds=cmds,
                            pre=clear_commands(cfg.core), run_deadline=200_000)
    dut._log.info(f"{stats['sent']} commands, {stats['runs_ok']} runs")
    assert stats["runs_ok"] == runs and stats["runs_rejected"] == 0 and stats["rejected"] == 0, \
        stats


@cocotb.test()
async def bench_scaling(dut):
    """Benchmark (``make bench-distributed``): cycles of a data-parallel step of the MLP
    ``TB_LAYERS`` with ``TB_BATCH`` rows per core (Adam, widths ``TB_BENCH_WIDTH``, FP32 links
    unless ``TB_COMP=bfp``; ``TB_PER_LAYER=1``: one ALLREDUCE per layer), written to
    ``$TESSERA_BENCH_OUT``. Step 1 loads the program; step 2 is measured. Both are checked
    bit-exactly against the golden model."""
    import json
    out = os.environ.get("TESSERA_BENCH_OUT")
    if not out:
        raise RuntimeError("bench_scaling needs TESSERA_BENCH_OUT (make bench-distributed)")
    env = os.environ.get
    cfg = TrainingRingConfig.preset(env("TESSERA_PRESET", "tiny"))
    N = cfg.ranks
    layers = tuple(int(v) for v in env("TB_LAYERS", "64,64,10").split(","))
    per_core = int(env("TB_BATCH", "32"))
    width = int(env("TB_BENCH_WIDTH", "8"))
    comp = env("TB_COMP", "none")
    per_layer = env("TB_PER_LAYER", "0") == "1"
    tb = RingTB(dut, cfg, seed=5)
    await tb.start()
    desc = MLP(layers=layers, batch=per_core * N, optimizer=Adam(lr=3e-3))
    kw = {"per_layer": True} if per_layer else {}
    dp = DataParallel(desc, cfg.core, N, compression=comp, width=4, engine=True, **kw)
    c = dp.compiled
    rng = np.random.default_rng(5)
    Ws = [(rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
          for a, b in zip(layers, layers[1:])]
    bs = [np.zeros(b, np.float32) for b in layers[1:]]
    init = [c.init_actions(Ws, bs) for _ in range(N)]
    dp.multi.apply(init)
    await tb.apply(init)
    res = {}
    for t in (1, 2):
        x = rng.standard_normal((desc.batch, layers[0])).astype(np.float32)
        y = rng.integers(0, layers[-1], desc.batch)
        acts = [c.step_actions(x[r * per_core:(r + 1) * per_core],
                               y[r * per_core:(r + 1) * per_core], t, precision=width,
                               program=dp.program) for r in range(N)]
        want = dp.multi.apply(acts)
        c0 = [tr.cycles for tr in tb.transports]
        f0 = [int(getattr(dut, f"flits_{k}").value) for k in range(N)]
        got = await tb.apply(acts)
        spent = [tr.cycles - c for tr, c in zip(tb.transports, c0)]
        for r in range(N):
            assert got[r]["run"] == want[r]["run"] == [(Status.OK, 0)], got[r]["run"]
            assert np.array_equal(got[r]["loss0"], want[r]["loss0"]), f"core {r}: losses"
        regs = [await d.read_regs() for d in tb.drivers]
        res = {"ranks": N, "S": cfg.core.size, "layers": list(layers),
               "batch_per_core": per_core, "global_batch": desc.batch, "width": width,
               "compression": comp, "per_layer": per_layer,
               "split_grads": bool(getattr(dp, "split_grads", False)),
               "link_width": cfg.link.width,
               "link_latency": cfg.link.latency,
               "run_cycles": [r["cycles"] for r in regs],
               "step_cycles": max(r["cycles"] for r in regs),
               "host_io_cycles": max(s - r["cycles"] for s, r in zip(spent, regs)),
               "coll_busy": [r["coll_busy"] for r in regs],
               "coll_hidden": [r["coll_hidden"] for r in regs],
               "matmul_busy": [r["matmul_busy"] for r in regs],
               "vector_busy": [r["vector_busy"] for r in regs],
               "optim_busy": [r["optim_busy"] for r in regs],
               "flits": [int(getattr(dut, f"flits_{k}").value) - f0[k] for k in range(N)]}
    final = [await d.read_lines(*c.regions["params"]) for d in tb.drivers]
    for r in range(N):
        assert np.array_equal(final[r], dp.multi.cores[r].read_lines(*c.regions["params"]))
    with open(out, "w") as f:
        json.dump(res, f, indent=2)


@cocotb.test()
async def bench_pipeline(dut):
    """Benchmark (``make bench-pipeline``): a pipeline step of the MLP ``TB_LAYERS`` in one
    stage per core of the ring (:class:`sim.host.pipeline_ring.RingPipeline`, schedule
    ``TB_SCHEDULE``; stage boundaries ``TB_BOUNDS``, e.g. ``0,1,2,4``, default as even as
    possible), batch ``TB_BATCH`` in ``TB_MICRO`` micro-batches, Adam, widths
    ``TB_BENCH_WIDTH``, written to ``$TESSERA_BENCH_OUT``. Step 1 warms up; step 2 is measured
    (each core's counters, the flits of every link, reverse links included). Both are checked
    bit-exactly against the golden model's ring."""
    import json
    from sim.host.pipeline_ring import RingPipeline
    out = os.environ.get("TESSERA_BENCH_OUT")
    if not out:
        raise RuntimeError("bench_pipeline needs TESSERA_BENCH_OUT (make bench-pipeline)")
    env = os.environ.get
    cfg = TrainingRingConfig.preset(env("TESSERA_PRESET", "tiny"))
    layers = tuple(int(v) for v in env("TB_LAYERS", "64,64,10").split(","))
    batch, micro = int(env("TB_BATCH", "32")), int(env("TB_MICRO", "4"))
    width = int(env("TB_BENCH_WIDTH", "8"))
    N = cfg.ranks
    tb = RingTB(dut, cfg, seed=7)
    await tb.start()
    desc = MLP(layers=layers, batch=batch, micro_batches=micro, optimizer=Adam(lr=3e-3))
    schedule = env("TB_SCHEDULE", "gpipe")
    bounds = tuple(int(v) for v in env("TB_BOUNDS").split(",")) if env("TB_BOUNDS") else None
    pipe = RingPipeline(desc, cfg.core, schedule=schedule, bounds=bounds)
    rng = np.random.default_rng(5)
    Ws = [(rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
          for a, b in zip(layers, layers[1:])]
    bs = [np.zeros(b, np.float32) for b in layers[1:]]
    init = [c.init_actions(W, b)
            for c, W, b in zip(pipe.compiled, pipe._split(Ws), pipe._split(bs))]
    pipe.multi.apply(init)
    await tb.apply(init)
    names = ("cycles", "check_cycles", "idle", "coll_busy", "coll_hidden", "matmul_busy",
             "vector_busy", "optim_busy", "array_beats")
    for t in (1, 2):
        x = rng.standard_normal((batch, layers[0])).astype(np.float32)
        y = rng.integers(0, layers[-1], batch)
        acts = [a + [("counters",)] for a in pipe.step_actions(x, y, t, precision=width)]
        want = pipe.multi.apply(acts)
        rev = cfg.core.reverse_links
        f0, r0 = tb.flits(), tb.flits(reverse=True) if rev else [0] * N
        got = await tb.apply(acts)
        runs = [g["run"] for g in got]
        assert runs == [w["run"] for w in want] == [[(Status.OK, 0)]] * N, \
            (runs, [STATE_LAYOUT.from_bits(g["counters"]["state"]) for g in got])
        for j in range(micro):
            assert np.array_equal(got[-1][f"loss{j}"], want[-1][f"loss{j}"]), f"losses {j}"
    res = {"layers": list(layers), "batch": batch, "micro_batches": micro, "width": width,
           "schedule": schedule, "stash_slots": [len(v) for v in pipe.stash_slots],
           "S": cfg.core.size, "link_width": cfg.link.width, "link_latency": cfg.link.latency,
           "program_lengths": [len(p) for p in pipe.ring_programs],
           "stage_words": [sum(n for _, n in io["stash"]) * cfg.core.size for io in pipe.io],
           "flits": [a - b for a, b in zip(tb.flits(), f0)],
           "flits_rev": [a - b for a, b in zip(tb.flits(reverse=True), r0)] if rev else [],
           **{name: [int(got[r]["counters"][name]) for r in range(N)] for name in names}}
    final = [await d.read_lines(*c.regions["params"]) for d, c in zip(tb.drivers, pipe.compiled)]
    for r, c in enumerate(pipe.compiled):
        assert np.array_equal(final[r], pipe.multi.cores[r].read_lines(*c.regions["params"]))
    with open(out, "w") as f:
        json.dump(res, f, indent=2)
