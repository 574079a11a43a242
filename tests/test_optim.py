"""Fast tier of the optimizer engine: golden model checks and Amaranth-simulator runs.

The simulator runs use the *default* FP32 unit pipelines (deep latencies) on a small engine,
so the delay balancing of the datapath is checked at realistic latencies; the cocotb tier
runs the long trajectories on the tiny preset.
"""

import functools

import numpy as np
import pytest

from hdl.fp32.config import FP32Config
from hdl.fp32.divsqrt_config import FP32DivSqrtConfig
from hdl.optim.config import Mem, Op, OptimConfig, Reg
from hdl.optim.datapath import OptimDatapath
from hdl.optim.engine import READ_LATENCY, OptimEngine
from hdl.optim.standalone import OptimEngineWithMemories
from sim.host.optim import (SGD, Adam, AdamW, Clip, LossScale, Momentum, optimizer_registers,
                            reg_word)
from sim.model.optim import OptimEngineModel, f32_bits, lane_sum
from sim.model.reference import reference_step_f64
from sim.tb import cycles as doc
from sim.tb.amaranth_tb import ReusableSim, run_sim, stream_get, stream_put


# ---------------------------------------------------------------------------------------------
# Config and hyperparameter validation

@pytest.mark.parametrize("kw, exc, match", [
    ({"depth": 1000}, ValueError, r"OptimConfig\.depth.*1000"),
    ({"depth": 8}, ValueError, r"OptimConfig\.depth.*8"),
    ({"depth": 64.0}, TypeError, r"OptimConfig\.depth"),
    ({"reduce_lanes": 3}, ValueError, r"OptimConfig\.reduce_lanes.*3"),
    ({"reduce_lanes": 128}, ValueError, r"OptimConfig\.reduce_lanes.*128"),
    ({"rd_fifo_depth": 1}, ValueError, r"OptimConfig\.rd_fifo_depth.*1"),
])
def test_invalid_config(kw, exc, match):
    with pytest.raises(exc, match=match):
        OptimConfig(**kw)


@pytest.mark.parametrize("cls", [OptimEngine, OptimEngineWithMemories])
def test_lanes_must_exceed_adder_latency(cls):
    with pytest.raises(ValueError, match="reduce_lanes.*adder latency"):
        cls(config=OptimConfig(reduce_lanes=4), fp32_config=FP32Config(add_stages=5))


@pytest.mark.parametrize("make, match", [
    (lambda: SGD(lr=0), r"SGD\.lr.*0"),
    (lambda: SGD(lr=float("nan")), r"SGD\.lr.*nan"),
    (lambda: SGD(lr="0.1"), r"SGD\.lr"),
    (lambda: SGD(lr=1e50), r"SGD\.lr.*not representable"),
    (lambda: Momentum(lr=0.1, momentum=1.0), r"Momentum\.momentum.*1\.0"),
    (lambda: Adam(beta1=1.0), r"Adam\.beta1.*1\.0"),
    (lambda: Adam(beta2=-0.1), r"Adam\.beta2.*-0\.1"),
    (lambda: Adam(eps=0.0), r"Adam\.eps.*0\.0"),
    (lambda: Adam(weight_decay=0.1), r"Adam\.weight_decay.*AdamW"),
    (lambda: AdamW(lr=0.5, weight_decay=4.0), r"AdamW\.weight_decay \* lr"),
    (lambda: Clip(max_norm=0.0), r"Clip\.max_norm.*0\.0"),
    (lambda: Clip(max_norm=1.0, eps=-1.0), r"Clip\.eps.*-1\.0"),
    (lambda: LossScale(init_exp=127), r"LossScale\.init_exp.*127"),
    (lambda: LossScale(growth_interval=0), r"LossScale\.growth_interval.*0"),
    (lambda: LossScale(init_exp=2.0), r"LossScale\.init_exp"),
    (lambda: Adam().registers(0), r"step t.*0"),
])
def test_invalid_hyperparameters(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_model_rejects_bad_registers():
    """The host-level methods raise for exactly the commands the engine rejects."""
    model = OptimEngineModel(OptimConfig(depth=16))
    with pytest.raises(ValueError, match="Reg.N"):
        model.step()
    for reg, value, match in ((Reg.N, 0, "Reg.N"), (Reg.N, 17, "Reg.N"), (Reg.MODE, 3, "Reg.MODE"),
                              (Reg.MODE, 7, "Reg.MODE"), (99, 0, "register address")):
        with pytest.raises(ValueError, match=match):
            model.setreg(reg, value)
    model.setreg(Reg.N, 16)
    model.setreg(Reg.MODE, 2 | 4 | 8)
    assert model.error == 0


#: Commands the engine ignores (status.error), as (op, fields) for depth 16.
BAD_COMMANDS = [(Op.SETREG, dict(addr=Reg.N, data=0)), (Op.SETREG, dict(addr=Reg.N, data=17)),
                (Op.SETREG, dict(addr=Reg.MODE, data=3)),
                (Op.SETREG, dict(addr=Reg.MODE, data=3 | 4 | 8)),
                (Op.WRITE, dict(mem=Mem.W, addr=14, count=3)),
                (Op.WRITE, dict(mem=Mem.V, addr=0, count=0)),
                (Op.READ, dict(mem=Mem.M, addr=0, count=0)),
                (Op.READ, dict(mem=Mem.G, addr=16, count=1)),
                (Op.ACCUM, dict(addr=15, count=2)), (6, {}), (7, {})]


def test_model_command_rejections_change_nothing():
    """``OptimEngineModel.command`` mirrors the engine's decode: every rejected command sets
    the sticky error and leaves memories, registers and status as they were; STEP before N."""
    model = OptimEngineModel(OptimConfig(depth=16))
    assert model.command(Op.STEP) == (False, None) and model.error == 1
    model = OptimEngineModel(OptimConfig(depth=16))
    rng = np.random.default_rng(9)
    for mem in Mem.ALL:
        model.write(mem, 0, rng.standard_normal(16).astype(np.float32))
    for a, v in optimizer_registers(Adam(lr=1e-2), 1, 8, LossScale(3, 2)).items():
        model.setreg(a, v)
    assert model.command(Op.STEP) == (True, False)
    for op, kw in BAD_COMMANDS:
        before = ([m.copy() for m in model.mems], list(model.regs), model.status())
        assert model.rejection(op, **kw) is not None, (op, kw)
        assert model.command(op, words=np.ones(kw.get("count", 0), np.float32), **kw) == \
            (False, None)
        assert model.error == 1
        assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32))
                   for a, b in zip(before[0], model.mems)), (op, kw)
        assert before[1] == model.regs, (op, kw)
        assert {**before[2], "error": 1} == model.status(), (op, kw)
    # accepted commands through the same entry point
    assert model.command(Op.READ, mem=Mem.W, addr=14, count=2)[0]
    assert model.command(Op.SETREG, addr=Reg.N, data=16) == (True, None)


# ---------------------------------------------------------------------------------------------
# Golden model properties

def test_lane_sum_order():
    x = np.array([1e8, 1.0, -1e8, 1.0, 3.0], np.float32)
    # lanes=2: p0 = (1e8 + -1e8) + 3 = 3, p1 = 1 + 1 = 2 -> 5
    assert lane_sum(x, 2) == np.float32(5.0)
    # lanes=4: p0 = 1e8 + 3, p1 = 1, p2 = -1e8, p3 = 1 -> ((1e8+3 + 1) - 1e8) + 1
    p0 = np.float32(np.float32(1e8) + np.float32(3))
    want = np.float32(np.float32(np.float32(p0 + np.float32(1)) + np.float32(-1e8)) + 1)
    assert lane_sum(x, 4) == want


@pytest.mark.parametrize("opt", [SGD(0.05), Momentum(0.05, 0.9), Adam(1e-2),
                                 AdamW(1e-2, weight_decay=0.1)], ids=lambda o: type(o).__name__)
def test_model_tracks_float64_reference(opt):
    """20 steps of the FP32 model stay within a relative 1e-4 of the float64 textbook update."""
    cfg = OptimConfig(depth=256)
    model = OptimEngineModel(cfg)
    rng = np.random.default_rng(5)
    n = 200
    w = rng.standard_normal(n).astype(np.float32)
    model.write(Mem.W, 0, w)
    w64, m64, v64 = w.astype(np.float64), np.zeros(n), np.zeros(n)
    for t in range(1, 21):
        regs = optimizer_registers(opt, t, n, first=(t == 1))
        for a, v in regs.items():
            model.setreg(a, v)
        g = rng.standard_normal(n).astype(np.float32)
        model.accum(0, g, True)
        assert not model.step()
        w64, m64, v64 = reference_step_f64(opt, w64, m64, v64, g, t)
    err = np.abs(model.w[:n] - w64) / np.maximum(np.abs(w64), 1e-3)
    assert err.max() < 1e-4, err.max()


def test_model_scale_halves_on_skip_and_grows():
    cfg = OptimConfig(depth=16)
    model = OptimEngineModel(cfg)
    for a, v in optimizer_registers(SGD(0.1), 1, 8, LossScale(5, 2)).items():
        model.setreg(a, v)
    g = np.ones(8, np.float32)
    model.accum(0, g, True)
    model.step()
    model.step()                       # two clean steps -> 2**6
    assert model.scale_exp == 6
    g[3] = np.inf
    model.accum(0, g, True)
    w = model.w.copy()
    assert model.step()
    assert model.scale_exp == 5 and np.array_equal(model.w, w) and model.skip_count == 1


# ---------------------------------------------------------------------------------------------
# Amaranth simulator: the engine with deep (default) FP32 pipelines

@functools.cache
def _engine_sim(ii: int = 1) -> ReusableSim:
    """The one elaborated engine (deep default FP32 units) every :func:`_run_engine` test runs
    on (about 4 s to build; each run starts from the initial state, :class:`ReusableSim`);
    one more per initiation interval ``ii`` (shared FP32 units)."""
    cfg = OptimConfig(depth=16, reduce_lanes=8, ii=ii)
    return ReusableSim(OptimEngineWithMemories(config=cfg, fp32_config=FP32Config(),
                                               divsqrt_config=FP32DivSqrtConfig.preset("tiny")),
                       testbenches=1, processes=0)


def _cmd(op, **kw):
    d = dict(op=op, mem=0, first=0, addr=0, count=0, data=0)
    d.update(kw)
    return d


def _run_engine(script, ii: int = 1):
    sim = _engine_sim(ii)
    dut = sim.dut
    model = OptimEngineModel(dut.config)
    rng_np = np.random.default_rng(3)
    import random
    rng = random.Random(4)

    async def tb(ctx):
        class H:
            pass
        h = H()

        async def cmd(op, **kw):
            await stream_put(ctx, dut.cmd, _cmd(op, **kw))

        async def idle():
            await ctx.tick()
            while ctx.get(dut.busy):
                await ctx.tick()

        async def setregs(regs):
            for a, v in regs.items():
                model.setreg(a, v)
                await cmd(Op.SETREG, addr=a, data=reg_word(v))

        async def words(op, data, **kw):
            await cmd(op, count=len(data), **kw)
            for x in np.asarray(data, np.float32):
                await stream_put(ctx, dut.wdata, f32_bits(x), rng=rng, idle_prob=0.3)
            await idle()

        async def write(mem, data):
            model.write(mem, 0, data)
            await words(Op.WRITE, data, mem=mem)

        async def accum(data, first):
            model.accum(0, data, first)
            await words(Op.ACCUM, data, first=int(first))

        async def step(one_pass=False):
            skipped = model.step(one_pass=one_pass)
            await cmd(Op.STEP1 if one_pass else Op.STEP)
            h.cycles = 0                # busy cycles after the accepting one
            while ctx.get(dut.busy):
                await ctx.tick()
                h.cycles += 1
            for name, v in model.status().items():
                got = ctx.get(getattr(dut.status, name))
                assert got == v, f"status.{name}: {got:#x} != {v:#x}"
            return skipped

        async def check(n, mems=(Mem.W, Mem.M, Mem.V)):
            for mem in mems:
                await cmd(Op.READ, mem=mem, count=n)
                got = [await stream_get(ctx, dut.rdata, rng=rng, stall_prob=0.4)
                       for _ in range(n)]
                assert got == [f32_bits(x) for x in model.mems[mem][:n]], Mem.NAMES[mem]
            await idle()

        async def raw(op, **kw):
            """A command exactly as given (no model update), then wait until idle."""
            await cmd(op, **kw)
            await idle()

        def status():
            return {name: ctx.get(getattr(dut.status, name)) for name in model.status()}

        h.setregs, h.write, h.accum, h.step, h.check = setregs, write, accum, step, check
        h.raw, h.status = raw, status
        h.rng, h.model, h.dut = rng_np, model, dut
        await script(h)

    sim.run(tb)


@pytest.mark.parametrize("ii", [1, 3])
def test_engine_adamw_clip_scale_skip(ii):
    """AdamW with clipping and loss scaling over 12 params: 3 steps (one skipped by an Inf,
    which halves the scale and leaves memory unchanged), every word checked; also with
    shared FP32 units (``ii = 3``: the clip factor's element enters the pipeline between the
    check pass's, in a slot of its own)."""
    n = 12

    async def script(h):
        opt = AdamW(lr=1e-2, weight_decay=0.1)
        await h.write(Mem.W, h.rng.standard_normal(n).astype(np.float32))
        await h.setregs(optimizer_registers(opt, 1, n, LossScale(6, 2), Clip(1.0)))
        t = 1
        for step in range(3):
            if step:
                await h.setregs(optimizer_registers(opt, t, n, first=False))
            g = (h.rng.standard_normal(n) * 2.0 ** h.model.scale_exp).astype(np.float32)
            if step == 1:
                g[5] = np.inf
            await h.accum(g, True)
            k = h.model.scale_exp
            skipped = await h.step()
            assert skipped == (step == 1)
            if skipped:
                assert h.model.scale_exp == k - 1
            else:
                t += 1
            await h.check(n)

    _run_engine(script, ii)


#: Cycles a two-pass STEP may take beyond docs/datapaths.md's ``2N + Lsum + Lupdate`` (the pass
#: switch and the decision between the passes; measured: 3 at N = 16, default FP32 units).
STEP_SLACK = 3


@pytest.mark.parametrize("clip, ii", [(False, 1), (True, 1), (False, 4)])
def test_engine_step1_one_pass(clip, ii):
    """STEP1 (one pass) against STEP on the same state, Adam with dynamic loss scaling over
    N = 16 words: bit-identical memories and status (a second golden model runs the two-pass
    steps), one element per cycle in ONE pass -- ``step1_cycles(N)`` against about 2N + the sum
    of squares for STEP. With clipping STEP1 is STEP (same cycles). An Inf in G: STEP skips;
    STEP1 does not look (the caller's guarantee: in the core, the write snoop), and it updates."""
    n = 16

    async def script(h):
        opt = Adam(lr=1e-2)
        two = OptimEngineModel(h.model.config)
        regs = optimizer_registers(opt, 1, n, LossScale(4, 3), Clip(0.5) if clip else None)
        w0 = h.rng.standard_normal(n).astype(np.float32)
        two.write(Mem.W, 0, w0)
        await h.write(Mem.W, w0)
        for a, v in regs.items():
            two.setreg(a, v)
        await h.setregs(regs)
        cyc = {}
        for t, one in ((1, False), (2, True), (3, True)):
            if t > 1:
                r = optimizer_registers(opt, t, n, first=False)
                for a, v in r.items():
                    two.setreg(a, v)
                await h.setregs(r)
            g = (h.rng.standard_normal(n) * 16).astype(np.float32)
            two.accum(0, g, True)
            await h.accum(g, True)
            assert not two.step()
            assert not await h.step(one_pass=one)
            cyc[one] = h.cycles
            assert h.model.status() == two.status()
            for sel in (Mem.W, Mem.M, Mem.V):
                assert np.array_equal(h.model.mems[sel], two.mems[sel]), Mem.NAMES[sel]
            await h.check(n)
        if clip:
            assert h.model.clipped
            assert cyc[True] == cyc[False]
        elif ii == 1:
            # docs/datapaths.md's formulas with this engine's units (deep FP32, tiny div/sqrt)
            f, d = h.dut.fp32_config, h.dut.divsqrt_config
            lat = (f.latency("fp32_mul"), f.latency("fp32_add"), d.sqrt_latency,
                   d.div_latency, h.model.config.reduce_lanes)
            assert cyc[True] == doc.optim_step1_cycles(n, *lat), cyc
            lo = doc.optim_step_cycles_min(n, *lat)
            assert lo <= cyc[False] <= lo + STEP_SLACK, (cyc, lo)
        else:
            # shared units: the pipeline's latencies are those tests/test_optim_shared.py
            # measures; the passes read one element every ii cycles
            lat = READ_LATENCY + OptimDatapath.latency_for(h.dut.fp32_config,
                                                           h.dut.divsqrt_config, ii)
            sq = OptimDatapath.latencies_for(h.dut.fp32_config, h.dut.divsqrt_config, ii)[1]
            f = h.dut.fp32_config
            lsum = READ_LATENCY + sq + doc.lanesum_flush(0, f.latency("fp32_add"),
                                                         h.model.config.reduce_lanes) + 1
            assert cyc[True] == doc.optim_step1_cycles_ii(n, ii, lat, lsum), cyc
            lo = 2 * (ii * (n - 1) + 1) + lsum + lat
            assert lo <= cyc[False] <= lo + STEP_SLACK + 2 * (ii - 1), (cyc, lo)
        # a non-finite gradient: STEP1 without clipping does not test G (no skip)
        g = (h.rng.standard_normal(n)).astype(np.float32)
        g[7] = np.inf
        await h.accum(g, True)
        skipped = await h.step(one_pass=True)
        assert skipped == clip and h.model.last_skipped == int(clip)

    _run_engine(script, ii)


def test_engine_rejected_commands_change_nothing():
    """Every command the golden model rejects (``BAD_COMMANDS``, ``OptimEngineModel.command``)
    is ignored by the engine: the sticky error rises with the first and the status equals the
    model's after each; W, M, V and G read back unchanged; a STEP after them runs with the N
    and MODE set before (a rejected SETREG changed no register)."""
    n = 8

    async def script(h):
        depth = h.model.config.depth
        for mem in (Mem.W, Mem.M, Mem.V):
            await h.write(mem, np.abs(h.rng.standard_normal(depth)).astype(np.float32))
        await h.setregs(optimizer_registers(Adam(lr=1e-2), 1, n, LossScale(3, 2)))
        await h.accum(h.rng.standard_normal(depth).astype(np.float32), True)
        assert not await h.step()
        assert h.status()["error"] == 0
        for op, kw in BAD_COMMANDS:
            accepted, _ = h.model.command(op, words=np.ones(kw.get("count", 0), np.float32),
                                          **kw)
            assert not accepted, (op, kw)
            await h.raw(op, **kw)          # no wdata: the engine takes none for a rejected one
            assert h.status() == h.model.status(), (op, kw, h.status())
        # every word of every memory as before (a change would persist until here; a word a
        # rejected READ had sent would shift these reads)
        await h.check(depth, mems=(Mem.W, Mem.M, Mem.V, Mem.G))
        assert h.status()["error"] == 1
        await h.accum(h.rng.standard_normal(depth).astype(np.float32), True)
        assert not await h.step()
        await h.check(depth, mems=(Mem.W, Mem.M, Mem.V, Mem.G))

    _run_engine(script)


def test_engine_without_data_cmds_rejects_them():
    """``data_cmds=False`` (the training core's engine): WRITE, READ and ACCUM with valid
    ranges are rejected like an invalid op -- the sticky error rises, the engine stays idle,
    takes no ``wdata``, sends no ``rdata`` and touches no memory port -- and a non-bool
    ``data_cmds`` is a TypeError naming it."""
    with pytest.raises(TypeError, match="data_cmds"):
        OptimEngine(config=OptimConfig(depth=16), data_cmds=1)
    dut = OptimEngine(config=OptimConfig(depth=16), fp32_config=FP32Config.preset("tiny"),
                      divsqrt_config=FP32DivSqrtConfig.preset("tiny"), data_cmds=False)
    ports = [getattr(dut, Mem.NAMES[s]) for s in Mem.ALL]

    async def tb(ctx):
        ctx.set(dut.wdata.valid, 1)
        ctx.set(dut.rdata.ready, 1)
        for op in (Op.WRITE, Op.READ, Op.ACCUM):
            assert ctx.get(dut.status.error) == (op != Op.WRITE)
            await stream_put(ctx, dut.cmd, _cmd(op, count=4))
            for _ in range(8):
                assert not ctx.get(dut.busy) and not ctx.get(dut.wdata.ready)
                assert not ctx.get(dut.rdata.valid)
                assert not any(ctx.get(p.w_en) or ctx.get(p.r_en) for p in ports)
                await ctx.tick()
            assert ctx.get(dut.status.error) == 1

    run_sim(dut, tb)


def test_engine_momentum_accumulation():
    """Momentum over gradients accumulated from two micro-batches."""
    n = 10

    async def script(h):
        opt = Momentum(lr=0.1, momentum=0.9)
        await h.write(Mem.W, h.rng.standard_normal(n).astype(np.float32))
        await h.setregs(optimizer_registers(opt, 1, n))
        for _ in range(2):
            await h.accum(h.rng.standard_normal(n).astype(np.float32), True)
            await h.accum(h.rng.standard_normal(n).astype(np.float32), False)
            assert not await h.step()
        await h.check(n)

    _run_engine(script)


@pytest.mark.parametrize("preset, latency, sumsq", [("tiny", 31, 24), ("default", 85, 84)])
def test_engine_latency_is_documented(preset, latency, sumsq):
    """docs/datapaths.md: update pipeline ``2 + 6*Lmul + 3*Ladd + Lsqrt + Ldiv`` = 31 (tiny
    units) / 85 (default units); ``sumsq_latency`` = 2 + 3*Lmul + LaneSum flush + 1 (flush 18 /
    66, no square stage: the squares are the update pipeline's); STEP1 busy ``N + 34`` /
    ``N + 88``. The formulas are the page's (sim.tb.cycles); the
    numbers are the page's too."""
    f, d = FP32Config.preset(preset), FP32DivSqrtConfig.preset(preset)
    lm, la = f.latency("fp32_mul"), f.latency("fp32_add")
    assert doc.optim_update_latency(lm, la, d.sqrt_latency, d.div_latency) == latency
    assert doc.optim_sumsq_latency(lm, la, 8) == sumsq
    eng = OptimEngine(config=OptimConfig(depth=16, reduce_lanes=8), fp32_config=f,
                      divsqrt_config=d)
    eng._MustUse__silence = True     # built only for its published figures (never elaborated)
    assert eng.latency == latency and eng.sumsq_latency == sumsq
    assert OptimDatapath.latency_for(f, d) + 2 == latency       # + read and data register
    assert eng.step1_cycles(100) == 100 + {"tiny": 34, "default": 88}[preset]


# ---------------------------------------------------------------------------------------------
# The engine alone, through its word ports (as the training core instantiates it)

def test_engine_signature_word_ports():
    """The engine's word ports at the core's depth (65536: 16-bit word addresses); it
    elaborates. The wrapper keeps the old interface."""
    from amaranth.hdl import Fragment
    from amaranth.lib.wiring import Flow

    from hdl.lib.memport import WordPort
    cfg = OptimConfig(depth=65536)
    dut = OptimEngine(config=cfg, fp32_config=FP32Config.preset("tiny"),
                      divsqrt_config=FP32DivSqrtConfig.preset("tiny"))
    assert cfg.addr_bits == 16
    for name in Mem.NAMES:
        member = dut.signature.members[name]
        assert member.flow == Flow.Out and member.signature == WordPort(addr_bits=16)
    assert set(dut.signature.members) == {"w", "m", "v", "g", "cmd", "wdata", "rdata", "busy",
                                          "status", "skip_in"}
    assert "scale_exp" in dut.signature.members["status"].shape.members
    # The wrapper presents exactly the old interface.
    wrap = OptimEngineWithMemories(config=OptimConfig(depth=16), fp32_config=dut.fp32_config,
                                   divsqrt_config=dut.divsqrt_config)
    assert set(wrap.signature.members) == {"cmd", "wdata", "rdata", "busy", "status"}
    assert wrap.latency == wrap.engine.latency == dut.latency
    Fragment.get(dut, None)
    Fragment.get(wrap, None)


def test_engine_ports_depth_65536_step():
    """``OptimEngine(depth=65536)`` alone, the four scratchpads modelled behind its word ports
    (one-cycle read latency, data held while ``r_en = 0``): WRITE/READ at the top of the address
    space, ACCUM, then an Adam STEP with dynamic loss scaling over N words; every word the engine
    wrote, the status and ``busy`` checked. No memory is written outside ``[0, N)`` and the top
    words; reads are issued only with ``r_en``."""
    import random
    cfg = OptimConfig(depth=65536)
    dut = OptimEngine(config=cfg, fp32_config=FP32Config.preset("tiny"),
                      divsqrt_config=FP32DivSqrtConfig.preset("tiny"))
    model = OptimEngineModel(cfg)
    rng_np = np.random.default_rng(11)
    rng = random.Random(12)
    n = 40
    top = cfg.depth - 6
    stores = [dict() for _ in Mem.ALL]      # sparse scratchpads: address -> word
    ports = [getattr(dut, name) for name in Mem.NAMES]
    reads = [0] * len(Mem.ALL)

    async def memories(ctx):
        sigs = [x for p in ports for x in (p.r_addr, p.r_en, p.w_addr, p.w_en, p.w_data)]
        async for _clk, _rst, *vals in ctx.tick().sample(*sigs):
            for s, p in enumerate(ports):
                r_addr, r_en, w_addr, w_en, w_data = vals[5 * s:5 * s + 5]
                if r_en:                      # read before write: not transparent
                    reads[s] += 1
                    ctx.set(p.r_data, stores[s].get(r_addr, 0))
                if w_en:
                    stores[s][w_addr] = w_data

    async def tb(ctx):
        async def cmd(op, **kw):
            await stream_put(ctx, dut.cmd, _cmd(op, **kw))

        async def idle():
            await ctx.tick()
            while ctx.get(dut.busy):
                await ctx.tick()

        async def words(op, data, **kw):
            await cmd(op, count=len(data), **kw)
            for x in np.asarray(data, np.float32):
                await stream_put(ctx, dut.wdata, f32_bits(x), rng=rng, idle_prob=0.3)
            await idle()

        # WRITE + READ at the top of the 16-bit address space
        hi = rng_np.standard_normal(6).astype(np.float32)
        model.write(Mem.V, top, hi)
        await words(Op.WRITE, hi, mem=Mem.V, addr=top)
        assert [stores[Mem.V][top + i] for i in range(6)] == [f32_bits(x) for x in hi]
        await cmd(Op.READ, mem=Mem.V, addr=top, count=6)
        got = [await stream_get(ctx, dut.rdata, rng=rng, stall_prob=0.4) for _ in range(6)]
        assert got == [f32_bits(x) for x in hi]
        await idle()

        w0 = rng_np.standard_normal(n).astype(np.float32)
        model.write(Mem.W, 0, w0)
        await words(Op.WRITE, w0, mem=Mem.W)
        opt = Adam(lr=1e-2)
        regs = optimizer_registers(opt, 1, n, LossScale(3, 1))
        for a, v in regs.items():
            model.setreg(a, v)
            await cmd(Op.SETREG, addr=a, data=reg_word(v))
        g = (rng_np.standard_normal(n) * 8).astype(np.float32)
        model.accum(0, g, True)
        await words(Op.ACCUM, g, first=1)
        assert ctx.get(dut.status.scale_exp) == 3
        before = list(reads)
        assert not model.step()
        await cmd(Op.STEP)
        await ctx.tick()
        assert ctx.get(dut.busy)
        await idle()
        # check pass reads G, the update pass W, M, V, G: N words each
        assert [r - b for r, b in zip(reads, before)] == [n, n, n, 2 * n]
        for name, v in model.status().items():
            got = ctx.get(getattr(dut.status, name))
            assert got == v, f"status.{name}: {got:#x} != {v:#x}"
        assert ctx.get(dut.status.scale_exp) == 4      # growth interval 1: doubled
        for sel in (Mem.W, Mem.M, Mem.V, Mem.G):
            want = {a: f32_bits(x) for a, x in enumerate(model.mems[sel][:n])}
            if sel == Mem.V:
                want.update({top + i: f32_bits(x) for i, x in enumerate(hi)})
            assert stores[sel] == want, Mem.NAMES[sel]

    run_sim(dut, tb, processes=[memories])


def test_engine_step_after_step1():
    """A two-pass STEP right after a one-pass STEP1, then another STEP with new gradients:
    STEP1 must leave nothing of its fused pass behind (its extra sum-of-squares feed in the
    update pass; a late sum would be taken as the next STEP's). Status (``sumsq`` included)
    and W, M, V after every step equal the golden model's. Kills the mutant that keeps
    ``fused`` set after STEP1 (docs/bench/mutation.md, hdl/optim/engine.py UPD_DRAIN)."""
    n = 8

    async def script(h):
        opt = Adam(lr=1e-2)
        await h.write(Mem.W, h.rng.standard_normal(n).astype(np.float32))
        await h.setregs(optimizer_registers(opt, 1, n, LossScale(4, 3)))
        for t, one in ((1, True), (2, False), (3, False)):
            if t > 1:
                await h.setregs(optimizer_registers(opt, t, n, first=False))
            g = (h.rng.standard_normal(n) * (4.0 * t)).astype(np.float32)
            await h.accum(g, True)
            assert not await h.step(one_pass=one)
            await h.check(n)

    _run_engine(script)


def test_unpack_status_reads_the_status_layout():
    """``unpack_status`` (the host's reader of the ``status`` port) against the port's own
    layout (``OPTIM_STATUS_LAYOUT``, built from the same ``STATUS_FIELDS``): every field at
    its own offset, a distinct value in each."""
    from hdl.optim.config import STATUS_FIELDS, unpack_status
    from hdl.optim.engine import OPTIM_STATUS_LAYOUT
    rng = np.random.default_rng(5)
    for _ in range(20):
        want = {name: int(rng.integers(0, 1 << w)) | (1 << (w - 1)) for name, w in STATUS_FIELDS}
        word = OPTIM_STATUS_LAYOUT.const(want).as_value().value
        assert unpack_status(word) == want
