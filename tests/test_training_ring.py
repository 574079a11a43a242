"""The multi-core top (``hdl/multi/cores.py``) in the Amaranth simulator: training cores whose
``ALLREDUCE`` instructions meet over the ring of links (docs/multicore.md).

Every result is compared with the collective engine's golden model
(:func:`sim.model.collective.ring_allreduce`) word for word, on every core, with the link
flits counted against :func:`sim.model.collective.link_flits`."""
import dataclasses

import numpy as np
import pytest
from amaranth.sim import Simulator

from hdl.core.config import CoreConfig
from hdl.core.core import STATE_LAYOUT
from hdl.core.isa import Op, Status, encode
from hdl.multi.config import CollComp, CollStatus, LinkConfig
from hdl.multi.cores import TrainingRing, TrainingRingConfig
from sim.host.compiler import MLP
from sim.host.dataparallel import DataParallel
from sim.host.driver import CoreDriver
from sim.host.optim import Adam
from sim.model.collective import link_flits, ring_allreduce
from sim.tb.amaranth_tb import StreamTransport, add_deadline

#: a small core: S = 4, four banks of 64 lines, 16-bit flits
CORE = CoreConfig(size=4, banks=4, bank_depth=64, prog_depth=64, layers=4, max_classes=16)
NAN = 0x7FC00000


def ring_config(ranks: int, *, width: int = 16, latency: int = 2) -> TrainingRingConfig:
    return TrainingRingConfig(
        core=dataclasses.replace(CORE, ranks=ranks, link_width=width),
        link=LinkConfig(width=width, latency=latency, fifo_depth=2 * latency + 2))


def test_config_errors():
    with pytest.raises(ValueError, match="ranks"):
        TrainingRingConfig(core=CORE)
    with pytest.raises(ValueError, match="link.width"):
        TrainingRingConfig(core=dataclasses.replace(CORE, ranks=2), link=LinkConfig(width=8))
    with pytest.raises(TypeError, match="core"):
        TrainingRingConfig(core=None)
    with pytest.raises(ValueError, match="link_width"):
        dataclasses.replace(CORE, ranks=2, link_width=12)
    with pytest.raises(ValueError, match="ranks"):
        dataclasses.replace(CORE, ranks=17)
    assert TrainingRingConfig.preset("tiny").ranks == 2
    assert TrainingRingConfig.preset("default", ranks=2).core.size == 8
    assert TrainingRingConfig.preset("tiny-n4").ranks == 4
    assert not TrainingRingConfig.preset("tiny-n4").core.reverse_links
    rev = TrainingRingConfig.preset("tiny-n3-rev").core
    assert (rev.ranks, rev.reverse_links, rev.collective.reverse) == (3, True, True)
    for bad in ("tiny-4", "tiny-rev-n3", "tiny-n3-rev-rev"):
        with pytest.raises(ValueError, match="preset"):
            TrainingRingConfig.preset(bad)


def test_fpga_ring_is_a_synth_target_of_two_fpga_cores():
    from boards.synth import TARGETS, build_block
    assert ("training_ring_fpga", "tiny") in TARGETS
    top = build_block("training_ring_fpga", "tiny")
    top._MustUse__silence = True        # built only for its config (never elaborated)
    assert top.config.ranks == 2
    assert top.config.core == dataclasses.replace(CoreConfig.preset("tiny"), ranks=2,
                                                  link_width=16).fpga()
    assert top.config == TrainingRingConfig.preset("tiny-fpga")
    # one of its cores alone: what each FPGA of a ring of FPGAs holds
    assert ("training_ring_node_fpga", "tiny") in TARGETS
    node = build_block("training_ring_node_fpga", "tiny")
    node._MustUse__silence = True
    assert node.config == top.config.core
    # its collective engine reads the scratchpad as the other registered clients do, its read
    # data registered once more (coll_regs)
    assert node.config.spad_latency == 3 and node.config.coll_regs
    assert node.config.collective.mem_latency == 4


def test_core_module_instances_take_the_core_ports_by_their_verilog_names():
    """With ``core_module`` every core is an ``Instance`` of one module: its ports are the
    core's own Verilog ports (the signal names :func:`hdl.gen.port_signals` converts them
    under), in their direction and width, plus ``clk`` and ``rst``; the module to convert
    beside the top is that core. A bad module name is refused. (The generated ring runs
    bit-exact in tests/test_training_ring_cocotb.py.)"""
    from amaranth.hdl import Fragment
    from amaranth.lib import data, wiring

    from hdl.core.core import TrainingCore
    from hdl.gen import port_signals
    from hdl.lib.mustuse import mark_used

    cfg = ring_config(2)
    ring = TrainingRing(config=cfg, core_module="ring_core")
    ((name, core),) = ring.verilog_modules
    assert name == "ring_core" and isinstance(core, TrainingCore) and core.config == cfg.core
    ports = {id(sig) for sig in port_signals(core)}
    want = {"clk": ("i", 1), "rst": ("i", 1)}
    for _path, member, value in core.signature.flatten(core):
        if isinstance(value, data.View):
            value = value.as_value()
        if id(value) in ports:
            want[value.name] = ("i" if member.flow == wiring.In else "o", len(value))
    fragment = Fragment.get(ring, None)
    instances = {sub_name: sub for sub, sub_name, _ in fragment.subfragments
                 if sub_name in ("core0", "core1")}
    assert len(instances) == 2
    for inst in instances.values():
        assert inst.type == "ring_core"
        assert {n: (kind, len(v)) for n, (v, kind) in inst.ports.items()} == want
    assert mark_used(TrainingRing(config=cfg)).verilog_modules == []
    for bad in ("1core", "a-b", 3):
        with pytest.raises(ValueError, match="core_module"):
            TrainingRing(config=cfg, core_module=bad)


def run_ring(cfg: TrainingRingConfig, per_core, *, stall=None, deadline=200_000):
    """Run ``per_core[r](drv, ctx)`` (async) for every core at once; ``stall(ctx)`` (async)
    drives the link gates. Returns each core's result and the flits of every link."""
    dut = TrainingRing(config=cfg)
    N = cfg.ranks
    out = [None] * N
    flits = []

    def tb_of(r):
        async def tb(ctx):
            drv = CoreDriver(cfg.core, StreamTransport(ctx, getattr(dut, f"cmd_{r}"),
                                                       getattr(dut, f"rsp_{r}")),
                             run_deadline=deadline)
            out[r] = await per_core[r](drv, ctx)
            if r == 0:
                for _ in range(50):
                    await ctx.tick()
                flits.extend(ctx.get(getattr(dut, f"flits_{k}")) for k in range(N))
        return tb

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    for r in range(N):
        sim.add_testbench(tb_of(r))
    if stall is not None:
        async def stall_tb(ctx):
            await stall(ctx, dut)
        sim.add_testbench(stall_tb, background=True)
    add_deadline(sim, 4 * deadline)
    sim.run()
    return out, flits


def _vectors(rng, N, words):
    """Random FP32 words spread over 2**-8 .. 2**8, with a few exact cancellations."""
    v = (rng.standard_normal((N, words)) * 2.0 ** rng.integers(-8, 9, (N, words)))
    v = v.astype(np.float32)
    v[1, :3] = -v[0, :3]
    return v.view(np.uint32)


def _state(regs):
    s = STATE_LAYOUT.from_bits(regs["state"])
    return {"status": int(s.status), "err_pc": int(s.err_pc),
            "coll_status": int(s.coll_status), "coll_step": int(s.coll_step),
            "coll_flags": int(s.coll_flags)}


@pytest.mark.parametrize("ranks,ks", [
    # make test-long (all three): the RTL ring runs ALLREDUCE programs bit-exact in the cocotb
    # tier (tests/test_training_ring_cocotb.py); the sequencer's wait for an ALLREDUCE's
    # region is proven (make formal: hazard_sequencer_coll) and, in make test, a COPY waits
    # for one in test_sendrecv_then_stopped_links_give_err_link
    pytest.param(2, (2, 3), id="2", marks=pytest.mark.long),
    pytest.param(2, (0, 1, 2, 3), id="2-all", marks=pytest.mark.long),
    pytest.param(4, (2, 3), id="4", marks=pytest.mark.long)])
def test_allreduce_program_bit_exact_on_every_core(ranks, ks):
    """Programs in a row on every core: a plain FP32 ALLREDUCE of a region that crosses
    a bank boundary, a BFP-4 one (groups of 16 words), and poisoning ones (FP32 and BFP-4)
    after a MATMUL whose input holds a NaN on core 0 only (flags set there): every core's
    region equals the model's sum (core 0's word 0 replaced by the NaN once), word 0 of the
    FP32 poisoned one is the canonical NaN on every core, and the links carried exactly the
    model's flits. ``coll_busy`` counts the engine's cycles. ``ks``: the programs run.
    ``make test`` runs the two poisoning programs on two cores (they also cover both link
    modes and the region crossing a bank; the un-poisoned FP32 and BFP-4 ALLREDUCEs run on
    the RTL in the cocotb tier's data-parallel steps on three cores); ``make test-long`` all
    four on two cores, and the poisoning ones on four (about 100 s)."""
    cfg = ring_config(ranks)
    c = cfg.core
    S, D = c.size, c.bank_depth
    rng = np.random.default_rng(ranks)
    lines = 4 * 5                                  # 80 words: 5 BFP groups
    base = D - 7                                   # crosses from bank 0 into bank 1
    seg = -(-lines // ranks)
    seg_bfp = -(-lines // (ranks * 4)) * 4         # whole groups of 16 words
    data = [_vectors(rng, ranks, lines * S) for _ in range(4)]
    progs = [
        [encode(Op.ALLREDUCE, a=base, lines=lines, seg=seg, timeout=500), encode(Op.HALT)],
        [encode(Op.ALLREDUCE, a=base, lines=lines, seg=seg_bfp, timeout=500,
                comp=CollComp.BFP, width=4), encode(Op.HALT)],
        # a 1 x 4 x 4 forward pass (A at line 2D, B at 3D, C at D + 40), then the poisoning
        # all-reduce: core 0's A holds a NaN, so its converter flags it
        [encode(Op.MATMUL, mode=0, M=1, K=4, N=4, a=2 * D, b=3 * D, c=D + 40),
         encode(Op.ALLREDUCE, a=base, lines=lines, seg=seg, timeout=500, poison=1),
         encode(Op.HALT)],
        # the same with BFP-4 links: the poisoned group crosses as a NaN group and reaches
        # every core as canonical NaNs (the cores that send it on flag it)
        [encode(Op.MATMUL, mode=0, M=1, K=4, N=4, a=2 * D, b=3 * D, c=D + 40),
         encode(Op.ALLREDUCE, a=base, lines=lines, seg=seg_bfp, timeout=500, poison=1,
                comp=CollComp.BFP, width=4),
         encode(Op.HALT)],
    ]

    def core_tb(r):
        async def run(drv, ctx):
            res = []
            for k in ks:
                prog = progs[k]
                await drv.write_lines(base, data[k][r].reshape(lines, S))
                a = np.ones((1, S), np.float32)
                if k >= 2 and r == 0:
                    a[0, 1] = np.nan
                await drv.write_lines(2 * D, a.view(np.uint32))
                await drv.write_lines(3 * D, np.ones((4, S), np.float32).view(np.uint32))
                await drv.load_program(prog)
                st = await drv.run()
                regs = await drv.read_regs()
                got = await drv.read_lines(base, lines)
                res.append((st, _state(regs), regs["coll_busy"], regs["flags"],
                            got.reshape(-1)))
            return res
        return run

    out, flits = run_ring(cfg, [core_tb(r) for r in range(ranks)])
    coll = c.collective
    want_flits = np.zeros(ranks, np.int64)
    for i, k in enumerate(ks):
        vec = [d.copy() for d in data[k]]
        comp = CollComp.BFP if k in (1, 3) else CollComp.NONE
        if k >= 2:
            vec[0][0] = NAN                        # core 0's poisoned contribution
        sg = (seg_bfp if k in (1, 3) else seg) * S
        fl = [0] * ranks
        want = ring_allreduce(vec, sg, comp=comp, bfp=(coll.bfp, 4), flags=fl)
        want_flits += np.array(link_flits(coll, 16, length=lines * S, seg=sg, comp=comp,
                                          width=4))
        for r in range(ranks):
            st, state, busy, flags, got = out[r][i]
            assert st == (Status.OK, 0), (k, r, st)
            assert state["coll_status"] == CollStatus.OK
            # the transmit codec flags each NaN group the core sent
            assert state["coll_flags"] == fl[r], (k, r, state, fl)
            assert busy > lines * S // 2, (k, r, busy)
            assert np.array_equal(got, want[r]), f"program {k}, core {r}: " \
                f"{np.flatnonzero(got != want[r])[:8]}"
        if k == 2:
            assert all(out[r][i][4][0] == NAN for r in range(ranks))
        if k == 3:
            assert all(np.all(out[r][i][4][:16] == NAN) for r in range(ranks))
            assert fl[0] & 1                       # core 0 reduced and sent it on
        if k >= 2:
            assert out[0][i][3] & 1 and not any(out[r][i][3] for r in range(1, ranks))
    assert list(flits) == list(want_flits)


@pytest.mark.long
def test_sendrecv_then_stopped_links_give_err_link():
    """One ring build, three programs per core (``make test-long``: about 100 s in the
    Amaranth simulator; ``make test`` runs the lone receive and the stopped link on the
    three-core RTL ring in the cocotb tier, ``test_training_ring_stopped_links_give_err_link``,
    and SENDRECVs under random link stalls in its pipeline steps).

    1. SENDRECV through the sequencer, the word-to-line adapter and the engine, with random
       stalls on every link: core 0 sends 6 lines that cross a bank boundary and receives 3
       from core 1 in one instruction, core 1 the reverse with its ranges the other way round
       (receive range below the send range); then each copies what it received (a COPY that
       waits for the SENDRECV's banks). Both scratchpads equal ``MultiCoreModel``'s (a NaN
       payload crosses unchanged) and the links carried exactly those words.
    2. Core 0 receives from a core 1 that only halts: ERR_LINK at the SENDRECV's pc, the state
       register holds the engine's TIMEOUT, the COPY after it never ran.
    3. Link 0 stops delivering: the ALLREDUCE on both cores reports ERR_LINK at its pc
       instead of hanging, and the instruction that waits for its region never runs (its COPY
       would have written line 0)."""
    cfg = ring_config(2)
    S, D = cfg.core.size, cfg.core.bank_depth
    rng = np.random.default_rng(12)
    imgs = [rng.integers(0, 1 << 32, (4 * D, S), dtype=np.uint64).astype(np.uint32)
            for _ in range(2)]
    imgs[0][D - 3, 0] = NAN + 5
    progs = [[encode(Op.SENDRECV, a=D - 3, lines=6, b=2 * D, rlines=3, timeout=300),
              encode(Op.VEC, vop=5, rows=3, cols=S, a=2 * D, d=3 * D), encode(Op.HALT)],
             [encode(Op.SENDRECV, a=3 * D + 4, lines=3, b=D + 1, rlines=6, timeout=300),
              encode(Op.VEC, vop=5, rows=6, cols=S, a=D + 1, d=0), encode(Op.HALT)]]
    lone = [[encode(Op.SENDRECV, b=2 * D, rlines=2, timeout=200),
             encode(Op.VEC, vop=5, rows=1, cols=S, a=2 * D, d=1), encode(Op.HALT)],
            [encode(Op.HALT)]]
    stop = [encode(Op.FENCE),
            encode(Op.ALLREDUCE, a=D, lines=8, seg=4, timeout=300),
            encode(Op.VEC, vop=5, rows=1, cols=S, a=D, d=0),      # COPY: waits for bank 1
            encode(Op.HALT)]
    from sim.model.multicore import MultiCoreModel
    multi = MultiCoreModel(cfg.core)
    for r in range(2):
        multi.cores[r].mem[:4 * D] = imgs[r]
        multi.cores[r].load_program(progs[r])
    assert multi.run() == [(Status.OK, 0)] * 2
    ones = np.ones((1, S), np.float32).view(np.uint32)
    phase = {"done": 0, "flits": None}

    def core_tb(r):
        async def run(drv, ctx):
            out = {}
            await drv.write_lines(0, imgs[r])
            await drv.load_program(progs[r])
            out["exchange"] = await drv.run()
            out["mem"] = await drv.read_lines(0, 4 * D)
            await drv.load_program(lone[r])
            out["lone"] = await drv.run()
            out["lone_state"] = _state(await drv.read_regs())
            out["after_lone"] = await drv.read_lines(0, 4 * D)
            phase["done"] += 1
            while phase["done"] < 3:        # the stall testbench stops link 0
                await ctx.tick()
            await drv.write_lines(0, ones)
            await drv.load_program(stop)
            out["stop"] = await drv.run()
            out["stop_state"] = _state(await drv.read_regs())
            out["line0"] = await drv.read_lines(0, 1)
            return out
        return run

    async def stall(ctx, dut):
        rs = np.random.default_rng(6)
        while phase["done"] < 2:
            ctx.set(dut.stall_tx, int(rs.integers(0, 4)))
            ctx.set(dut.stall_rx, int(rs.integers(0, 4)))
            await ctx.tick()
        phase["flits"] = [ctx.get(dut.flits_0), ctx.get(dut.flits_1)]
        ctx.set(dut.stall_tx, 0)
        ctx.set(dut.stall_rx, 0b10)          # core 1 never receives from link 0
        await ctx.tick()
        phase["done"] += 1
    out, _ = run_ring(cfg, [core_tb(r) for r in range(2)], stall=stall, deadline=20_000)
    for r in range(2):
        assert out[r]["exchange"] == (Status.OK, 0), (r, out[r]["exchange"])
        bad = np.flatnonzero((out[r]["mem"] != multi.cores[r].mem[:4 * D]).any(1))
        assert not bad.size, f"core {r}: lines {bad[:8]} differ from the model"
    assert multi.cores[1].mem[D + 1, 0] == NAN + 5
    assert phase["flits"] == [2 * 6 * S, 2 * 3 * S]     # 16-bit flits: two per word
    assert out[0]["lone"] == (Status.ERR_LINK, 0)
    assert out[0]["lone_state"]["coll_status"] == CollStatus.TIMEOUT
    assert np.array_equal(out[0]["after_lone"], out[0]["mem"]), "a line changed after ERR_LINK"
    assert out[1]["lone"] == (Status.OK, 0)
    for r in range(2):
        assert out[r]["stop"] == (Status.ERR_LINK, 1), (r, out[r]["stop"])
        assert out[r]["stop_state"]["coll_status"] == CollStatus.TIMEOUT, r
        assert np.array_equal(out[r]["line0"], ones), "an instruction after the failed " \
            "ALLREDUCE ran"


@pytest.mark.long
def test_dataparallel_steps_bit_exact_with_the_golden_model():
    """Two data-parallel training steps on two cores (MLP 6-4-4: its gradient region is
    whole BFP groups; global batch 8, Adam), step 1 with FP32 links and step 2 with BFP-4
    links. ``make test-long`` (about 150 s): ``make test`` runs the same MLP and programs in
    the cocotb tier (tests/test_training_ring_cocotb.py: one FP32, one BFP-4 and two top-k
    steps under random backpressure on every link and host port, bit-exact with the same
    model). Every core runs the one program with the ALLREDUCE before its OPT
    (``DataParallel(engine=True)`` builds it); every core's parameters, gradients, optimizer
    state, losses and run status, and at the end its whole scratchpad, equal
    ``MultiCoreModel``'s bit for bit, and the two cores hold the same parameters."""
    cfg = ring_config(2)
    desc = MLP(layers=(6, 4, 4), batch=8, optimizer=Adam(lr=1e-2))
    dp = DataParallel(desc, cfg.core, 2, engine=True)
    bfp = DataParallel(desc, cfg.core, 2, compression="bfp", width=4, engine=True)
    c = dp.compiled
    assert bfp.compiled.program == c.program and bfp.program != dp.program
    rng = np.random.default_rng(7)
    Ws = [(rng.standard_normal((a, b)) * 0.5).astype(np.float32)
          for a, b in zip(desc.layers[:-1], desc.layers[1:])]
    bs = [(rng.standard_normal(b) * 0.1).astype(np.float32) for b in desc.layers[1:]]
    m = desc.batch // 2
    acts = [c.init_actions(Ws, bs) for _ in range(2)]
    for t in (1, 2):
        x = rng.standard_normal((desc.batch, desc.layers[0])).astype(np.float32)
        y = rng.integers(0, desc.layers[-1], desc.batch)
        prog = dp.program if t == 1 else bfp.program
        for r in range(2):
            acts[r] += c.step_actions(x[r * m:(r + 1) * m], y[r * m:(r + 1) * m], t,
                                      program=prog) + c.read_actions()
    want = dp.multi.apply(acts)

    def core_tb(r):
        async def run(drv, ctx):
            got = await drv.apply(acts[r])
            got["mem"] = await drv.read_lines(0, cfg.core.lines)
            return got
        return run

    out, _ = run_ring(cfg, [core_tb(r) for r in range(2)])
    for r in range(2):
        assert out[r]["run"] == want[r]["run"] == [(Status.OK, 0)] * 2, (r, out[r]["run"])
        for key in ("params", "grads", "m", "v", "loss0"):
            assert np.array_equal(out[r][key], want[r][key]), (r, key)
        assert np.array_equal(out[r]["mem"], dp.multi.cores[r].mem), r
    assert np.array_equal(out[0]["params"], out[1]["params"])
    assert not np.array_equal(out[0]["loss0"], out[1]["loss0"])   # different shards


@pytest.mark.long
def test_pipeline_step_on_the_ring_bit_exact():
    """Pipeline parallelism in hardware (``make test-long``: about 170 s; the cocotb tier runs
    the same steps under backpressure): two stages of an MLP 8-8-4 (Adam, batch 8 in two
    micro-batches, GPipe) on two cores, each running one program per step whose SENDRECVs
    carry the activations forward and the gradients back over the links, with random stalls
    on every link. Two steps: every core's run status, losses, parameters, gradients and
    optimizer state, and at the end its whole scratchpad, equal the golden model's ring
    (``RingPipeline.ring_step`` on ``MultiCoreModel``) bit for bit; that model equals the
    host-mediated pipeline (``tests/test_pipeline_ring.py``). The links carried exactly the
    transferred words (16-bit flits: two per word)."""
    from sim.host.pipeline_ring import RingPipeline
    cfg = ring_config(2)
    core = dataclasses.replace(cfg.core, prog_depth=128)
    cfg = dataclasses.replace(cfg, core=core)
    desc = MLP(layers=(8, 8, 4), batch=8, micro_batches=2, optimizer=Adam(lr=1e-2))
    pipe = RingPipeline(desc, core, timeout=4000)
    rng = np.random.default_rng(11)
    Ws = [(rng.standard_normal((a, b)) * 0.5).astype(np.float32)
          for a, b in zip(desc.layers[:-1], desc.layers[1:])]
    bs = [(rng.standard_normal(b) * 0.1).astype(np.float32) for b in desc.layers[1:]]
    acts = [[] for _ in range(2)]
    for s, (c, W, b) in enumerate(zip(pipe.compiled, pipe._split(Ws), pipe._split(bs))):
        acts[s] += c.init_actions(W, b)
    for t in (1, 2):
        x = rng.standard_normal((desc.batch, desc.layers[0])).astype(np.float32)
        y = rng.integers(0, desc.layers[-1], desc.batch)
        for s, a in enumerate(pipe.step_actions(x, y, t)):
            acts[s] += a + pipe.compiled[s].read_actions()
    want = pipe.multi.apply(acts)
    words = sum(pipe.multi.sendrecv_words)

    def core_tb(r):
        async def run(drv, ctx):
            got = await drv.apply(acts[r])
            got["mem"] = await drv.read_lines(0, core.lines)
            return got
        return run

    async def stall(ctx, dut):
        rs = np.random.default_rng(5)
        while True:
            ctx.set(dut.stall_tx, int(rs.integers(0, 4)))
            ctx.set(dut.stall_rx, int(rs.integers(0, 4)))
            await ctx.tick()

    out, flits = run_ring(cfg, [core_tb(r) for r in range(2)], stall=stall)
    for r in range(2):
        assert out[r]["run"] == want[r]["run"] == [(Status.OK, 0)] * 2, (r, out[r]["run"])
        for key in ("params", "grads", "m", "v") + (("loss0", "loss1") if r == 1 else ()):
            assert np.array_equal(out[r][key], want[r][key]), (r, key)
        assert np.array_equal(out[r]["mem"], pipe.multi.cores[r].mem), r
    assert sum(flits) == 2 * words > 0
