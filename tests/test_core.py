"""The whole training core in the Amaranth simulator: one small training step driven by the
shared host driver, bit-exact against the golden model (weights, optimizer state, loss,
counters and the whole scratchpad); the one-pass OPT's timing and its skip decision for a
non-finite gradient that no BFP converter saw (written by a matmul pass or by the vector
unit). The cocotb tier (tests/test_core_cocotb.py) runs the full matrix of optimizers, widths,
micro-batches, checkpointing and resets."""
import functools

import numpy as np
import pytest

from hdl.core.config import CoreConfig
from hdl.core.core import TrainingCore
from hdl.core.core import CLIENTS, SNOOP_LATENCY, SNOOPED, STATE_LAYOUT
from hdl.optim.config import Op as OptOp
from hdl.core.isa import Op, Rop, Status, Vop, decode, encode
from sim.host.compiler import MLP, compile_mlp
from sim.host.driver import CoreDriver
from sim.host.optim import Adam, LossScale
from sim.model.array import pass_beats
from sim.model.core import CoreModel
from sim.tb import cycles as doc
from sim.tb.amaranth_tb import ReusableSim, StreamTransport
from sim.tb.core_cases import non_finite_gradient_case

CFG = CoreConfig(size=4, banks=8, bank_depth=64, prog_depth=64, layers=4)


@functools.cache
def _core_sim() -> ReusableSim:
    """The one elaborated core every test here runs on (about 16 s to build; each run starts
    from the initial state, :class:`ReusableSim`)."""
    return ReusableSim(TrainingCore(config=CFG), testbenches=1, processes=1)


def _run_core(actions, *, mem=False, after=None):
    """The host actions on the Amaranth-simulated core; with ``mem`` also the whole
    scratchpad (``got["mem"]``) and the cycles of reading and writing it back; then the
    ``after`` actions (their results in ``got["after"]``)."""
    sim = _core_sim()
    dut = sim.dut
    got = {}

    async def tb(ctx):
        tr = StreamTransport(ctx, dut.cmd, dut.rsp)
        drv = CoreDriver(CFG, tr, run_deadline=60_000)
        got.update(await drv.apply(actions))
        if mem:
            c0 = tr.cycles
            got["mem"] = await drv.read_lines(0, CFG.lines)
            got["read_cycles"] = tr.cycles - c0
            c0 = tr.cycles
            await drv.write_lines(0, got["mem"])
            got["write_cycles"] = tr.cycles - c0
        if after:
            got["after"] = await drv.apply(after)

    got["vec_held"] = got["vec_cmds"] = got["running_cycles"] = got["done_pulses"] = 0

    async def watch(ctx):
        # cycles the sequencer offers the vector unit a command it does not take (a held
        # command's payload must stay stable; docs/formal.md, "Findings": none in the core);
        # the core's ``running`` and ``done`` ports
        cmd = dut.blocks["sequencer"].vec_cmd
        async for _clk, _rst, valid, ready, running, done in ctx.tick().sample(
                cmd.valid, cmd.ready, dut.running, dut.done):
            got["vec_held"] += valid & ~ready & 1
            got["vec_cmds"] += valid & ready
            got["running_cycles"] += running
            got["done_pulses"] += done

    sim.run(tb, processes=[watch])
    got["blocks"] = dut.blocks
    return got


def _step_cycle_bounds(program, trace, vector):
    """docs/core.md *Cycles of a step* (``sim.tb.cycles.core_step_cycle_bounds``) for the run
    the golden model executed (``CoreModel.trace``), with the vector unit's published
    latencies; also the documented busy cycles of each unit: ``(lower, upper, busy)``."""
    ops = [decode(w)[0] for w in program]
    static = ops.index(Op.HALT) + 1          # the compiler's programs have no HALT in a loop
    S, lanes = CFG.size, CFG.array.lanes
    f = vector.fp32_config
    lat = dict(lanes=vector.lanes, ladd=f.latency("fp32_add"), lmul=f.latency("fp32_mul"),
               bg_latency=vector.bg_latency, sumsq_latency=vector.sumsq_latency,
               softmax_latency=vector.softmax_latency, bg_chunk=vector.bg_chunk,
               grad_lanes=vector.grad_config.lanes)
    mm, vec, opt = [], [], 0
    for op, a in trace:
        if op == Op.MATMUL:
            beats = pass_beats(a["mode"], a["M"], a["K"], a["N"], S)
            mm.append(doc.matmul_pass_cycles(S, beats,
                                             doc.beat_cycles(a["width_a"], a["width_b"], lanes)))
        elif op == Op.VEC:
            kind = "copy" if a["vop"] in (Vop.COPY, Vop.ZERO) else "vec"
            vec.append(doc.vector_cycles(kind, a["rows"], a["cols"], **lat))
        elif op == Op.REDUCE:
            kind = "sumsq" if a["rop"] == Rop.SUMSQ else "bias_grad"
            vec.append(doc.vector_cycles(kind, a["rows"], a["cols"], acc=bool(a["acc"]), **lat))
        elif op == Op.SOFTMAX_XENT:
            vec.append(doc.vector_cycles("softmax", a["rows"], a["cols"], **lat))
        elif op == Op.OPT:
            opt += doc.core_opt_busy_cycles(a["count"])
    lo, hi = doc.core_step_cycle_bounds(static, len(trace), mm, vec, opt)
    busy = {"matmul_busy": sum(mm) + len(mm), "vector_busy": sum(vec), "optim_busy": opt,
            "check_cycles": doc.core_check_cycles(static)}
    return lo, hi, busy


# the Inf case in ``make test-long`` (about 50 s): ``make test`` runs it on the generated
# Verilog (tests/test_core_cocotb.py ``s4_inf_skips_step``), and the one-pass skip tests below
# skip steps in this tier
@pytest.mark.parametrize("inject_inf", [False, pytest.param(True, marks=pytest.mark.long)])
def test_training_step_bit_exact_with_golden_model(inject_inf):
    """``inject_inf``: an Inf in the batch reaches a BFP converter; its flag makes the OPT
    skip the step (no parameter or state word written; dynamic scaling halves the scale).
    The OPT is one-pass (no clipping): a step that is applied keeps the optimizer busy
    ``N + latency`` cycles (one pass), not ``2N + ...``."""
    desc = MLP(layers=(4, 6, 3), batch=4, optimizer=Adam(lr=1e-2), micro_batches=2,
               loss_scale=LossScale(init_exp=5, growth_interval=2))
    comp = compile_mlp(desc, CFG)
    rng = np.random.default_rng(0)
    Ws = [rng.standard_normal((a, b)).astype(np.float32)
          for a, b in zip(desc.layers[:-1], desc.layers[1:])]
    bs = [rng.standard_normal(b).astype(np.float32) * 0.1 for b in desc.layers[1:]]
    x = rng.standard_normal((4, 4)).astype(np.float32)
    y = rng.integers(0, 3, 4)
    if inject_inf:
        x[2, 1] = np.inf
    actions = (comp.init_actions(Ws, bs) + comp.step_actions(x, y, 1, precision={(0, 0): 4})
               + comp.read_actions() + [("counters",)])
    model = CoreModel(CFG)
    want = model.apply(actions)
    got = _run_core(actions, mem=True)
    assert got["run"] == want["run"] == [(Status.OK, 0)]
    for key in ("params", "grads", "m", "v", "loss0", "loss1"):
        assert np.array_equal(got[key], want[key]), key
    for name in want["status"]:
        assert got["status"][name] == want["status"][name], name
    assert got["counters"]["instructions"] == want["counters"]["instructions"]
    assert got["counters"]["array_beats"] == want["counters"]["beats"]
    assert got["counters"]["overlap"] > 0, "no two units ever ran at once"
    assert got["status"]["last_skipped"] == int(inject_inf)
    assert got["status"]["scale_exp"] == 5 - int(inject_inf)
    assert got["counters"]["flags"] == want["counters"]["flags"] == (2 if inject_inf else 0)
    n = comp.report()["parameter_words_padded"]         # the OPT's count
    if inject_inf:      # nothing of the parameters or the optimizer state was written
        init = CoreModel(CFG)
        ref = init.apply(comp.init_actions(Ws, bs) + comp.read_actions())
        for key in ("params", "m", "v"):
            assert np.array_equal(got[key], ref[key]), key
    else:               # one pass over the N words
        assert got["counters"]["optim_busy"] == doc.core_opt_busy_cycles(n), \
            (got["counters"]["optim_busy"], n)
        # the whole step's cycles (docs/core.md, "Cycles of a step"): every unit busy as
        # its page states, and the cycles counter within the documented bounds
        lo, hi, busy = _step_cycle_bounds(comp.program, model.trace, got["blocks"]["vector"])
        c = got["counters"]
        assert {k: c[k] for k in busy} == busy, (c, busy)
        assert c["instructions"] == len(model.trace)
        assert lo <= c["cycles"] <= hi, (lo, c["cycles"], hi)
    assert got["vec_held"] == 0, "a vector command waited with valid & ~ready"
    # the ports: ``running`` for the run's cycles (from the start to the last unit's end;
    # the counter also counts the cycle that raises it), one ``done`` pulse per run
    assert got["done_pulses"] == len(got["run"]) == 1
    c_run = got["counters"]["cycles"]
    assert abs(got["running_cycles"] - c_run) <= 1, (got["running_cycles"], c_run)
    assert got["vec_cmds"] == sum(op in (Op.VEC, Op.REDUCE, Op.SOFTMAX_XENT)
                                  for op, _ in model.trace)
    # exact: check, then every cycle has a unit busy (at most two at once) or is idle
    c = got["counters"]
    assert c["cycles"] == (c["check_cycles"] + c["matmul_busy"] + c["vector_busy"]
                           + c["optim_busy"] - c["overlap"] + c["idle"]), c
    assert np.array_equal(got["mem"], model.mem)
    # host loads and reads stream at one line per cycle (plus the response latency)
    assert got["read_cycles"] <= CFG.lines + 2, got["read_cycles"]
    assert got["write_cycles"] <= CFG.lines + 2, got["write_cycles"]


@pytest.mark.parametrize("where", ["matmul",
                                   # make test-long (35 s): the cocotb tier's
                                   # s4_one_pass_skip runs both cases on the RTL in make test
                                   pytest.param("vector", marks=pytest.mark.long)])
def test_one_pass_skip_for_gradient_no_converter_saw(where):
    """The one-pass OPT skips a step exactly as the two-pass one does when a gradient is
    non-finite although no BFP converter flagged anything: the core's snoop of the matmul
    engine's / vector unit's writes into the gradient lines sets ``flags`` bit 2 (the two-pass
    program: flags 0, its check pass finds the Inf). Nothing is written; the RTL is bit-exact
    with the golden model, whose one-pass and two-pass runs agree on every word and status
    field. ``make test`` runs the matmul case here and both in the cocotb tier
    (``one_pass_skip_matches_two_pass``)."""
    desc, Ws, bs, x, y = non_finite_gradient_case(where)
    runs = {}
    for one_pass in (False, True):
        comp = compile_mlp(desc.replace(one_pass=one_pass), CFG)
        actions = (comp.init_actions(Ws, bs) + comp.step_actions(x, y, 1)
                   + comp.read_actions() + [("counters",)])
        model = CoreModel(CFG)
        runs[one_pass] = (comp, actions, model.apply(actions), model)
    comp, actions, want, model = runs[True]
    two = runs[False][2]
    grads = comp.decode_grads(want)
    bad = {"matmul": grads["W"][0], "vector": grads["b"][0]}[where]
    assert not np.all(np.isfinite(bad)), "the case must make that gradient non-finite"
    assert two["counters"]["flags"] == 0 and want["counters"]["flags"] == 4
    assert two["status"] == want["status"] and want["status"]["last_skipped"] == 1
    for key in ("params", "grads", "m", "v"):
        assert np.array_equal(two[key], want[key]), key
    assert np.array_equal(runs[False][3].mem, model.mem)
    ref = CoreModel(CFG).apply(comp.init_actions(Ws, bs) + comp.read_actions())
    for key in ("params", "m", "v"):            # nothing written
        assert np.array_equal(want[key], ref[key]), key
    # then a program the check rejects (ENDLOOP outside a loop at pc 2): START answers the
    # status and pc, runs nothing, and the state register reads them back
    bad = [encode(Op.FENCE), encode(Op.FENCE), encode(Op.ENDLOOP), encode(Op.HALT)]
    after = [("program", bad), ("run",), ("counters",)]
    got = _run_core(actions, after=after)
    assert got["run"] == want["run"] == [(Status.OK, 0)]
    for key in ("params", "grads", "m", "v"):
        assert np.array_equal(got[key], want[key]), key
    for name in want["status"]:
        assert got["status"][name] == want["status"][name], name
    assert got["counters"]["flags"] == 4
    assert got["after"]["run"] == model.apply(after)["run"] == [(Status.ERR_LOOP, 2)]
    state = STATE_LAYOUT.const({"status": Status.ERR_LOOP, "err_pc": 2, "running": 0,
                                "conflict": 0}).as_value().value
    assert got["after"]["counters"]["state"] == state
    assert got["after"]["counters"]["instructions"] == 0


@pytest.mark.parametrize("where", ["matmul", "vector"])
def test_snoop_reaches_skip_in_before_one_pass_step(where):
    """The gradient-write snoop's timing: every write of a non-finite word into the gradient
    window by a snooped client (the scratchpad ports, watched each cycle) comes at least
    ``SNOOP_LATENCY`` cycles before the optimizer accepts the one-pass ``STEP1``, and
    ``skip_in`` is 1 as it does (the golden model's ``flags`` is 4); ``skip_in`` rises exactly
    ``SNOOP_LATENCY`` cycles after the first such write (no converter flag is set). For
    ``"vector"`` the last such write is the bias-gradient ``REDUCE``'s last line, and the
    ``OPT`` waits only for its ``done``: the margin there is what a longer snoop pipeline
    could still take (1 cycle at SNOOP_LATENCY = 3; printed, asserted ``>= 0``)."""
    desc, Ws, bs, x, y = non_finite_gradient_case(where)
    comp = compile_mlp(desc.replace(one_pass=True), CFG)
    actions = comp.init_actions(Ws, bs) + comp.step_actions(x, y, 1) + [("counters",)]
    want = CoreModel(CFG).apply(actions)
    assert want["counters"]["flags"] == 4
    sim = _core_sim()
    dut = sim.dut
    got = {}
    # the elaborated design's blocks exist after the first build; the ports are the
    # TrainingCore's, so reach them through a first (empty) run if needed
    if "scratchpad" not in getattr(dut, "blocks", {}):
        _run_core([("counters",)])
    seq, opt, spad = (dut.blocks[k] for k in ("sequencer", "optim", "scratchpad"))
    ports = [spad.ports[CLIENTS.index(n)] for n in SNOOPED]
    sigs = [seq.gwin_lo, seq.gwin_hi, opt.cmd.valid, opt.cmd.ready, opt.cmd.payload.op,
            opt.skip_in]
    for p in ports:
        sigs += [p.w_en, p.w_addr, p.w_data]
    bad_writes, steps = [], []

    async def tb(ctx):
        tr = StreamTransport(ctx, dut.cmd, dut.rsp)
        got.update(await CoreDriver(CFG, tr, run_deadline=60_000).apply(actions))

    async def watch(ctx):
        cycle = 0
        async for _clk, _rst, lo, hi, valid, ready, op, skip, *pv in ctx.tick().sample(*sigs):
            for k in range(len(ports)):
                en, addr, data = pv[3 * k:3 * k + 3]
                words = [(data >> (32 * j)) & 0xFFFFFFFF for j in range(CFG.size)]
                if lo <= addr < hi and any((en >> j) & 1 and (w >> 23) & 0xFF == 0xFF
                                           for j, w in enumerate(words)):
                    bad_writes.append((cycle, SNOOPED[k]))
            if valid and ready and op == OptOp.STEP1:
                steps.append((cycle, skip))
            if skip and "skip_from" not in got:
                got["skip_from"] = cycle
            cycle += 1

    sim.run(tb, processes=[watch])
    assert got["counters"]["flags"] == 4 and got["status"] == want["status"]
    assert len(steps) == 1 and bad_writes, (steps, bad_writes)
    (accept, skip), = steps
    last, client = max(w for w in bad_writes if w[0] < accept)
    assert skip == 1
    margin = accept - last - SNOOP_LATENCY
    print(f"{where}: last non-finite write at {last} ({client}), STEP1 at {accept}, "
          f"margin {margin}")
    assert client == {"matmul": "mm_acc", "vector": "vec_bd"}[where]
    # the published latency is the RTL's: no converter flag is set, so skip_in rises exactly
    # SNOOP_LATENCY cycles after the first non-finite write
    assert got["skip_from"] - bad_writes[0][0] == SNOOP_LATENCY, (got["skip_from"], bad_writes)
    assert margin >= 0, (last, accept, SNOOP_LATENCY)
