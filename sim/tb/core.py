"""cocotb testbench of the whole training core (``training_core``): training steps run by the
generated Verilog, checked word for word against the golden model (sim/model/core.py).

The host side is the shared driver (:class:`sim.host.driver.CoreDriver`) over a cocotb
transport; the golden model gets the same host actions (:meth:`CoreModel.apply`). Python
acts only at step boundaries: while a program runs the testbench only waits for START's
response (with a deadline). Scenario from the environment (``tests/test_core_cocotb.py``):

``TB_LAYERS`` ("8,16,10"), ``TB_BATCH``, ``TB_OPT`` (sgd | momentum | adam | adamw),
``TB_CLIP`` (max norm, or empty), ``TB_MICRO`` (micro-batches), ``TB_CKPT`` ("1" or empty),
``TB_LOSS_SCALE`` (initial exponent, or empty), ``TB_PREC`` ("8" | "mixed" | "stochastic"),
``TB_SCHEDULE`` (listed | overlap), ``TB_ONE_PASS`` ("0": the two-pass OPT), ``TB_STEPS``, ``TB_SEED``, ``TB_IDLE`` / ``TB_STALL`` (host-stream idle / backpressure).
"""
from __future__ import annotations

import os
import random
import time

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time

from hdl.core.config import CoreConfig
from hdl.core.core import REGS, STATE_LAYOUT, stat_reg
from hdl.core.host import HostOp, HostStatus
from hdl.core.isa import Op, Status, encode, stat_slot, stat_slots
from sim.host.compiler import MLP, compile_mlp
from sim.host.driver import CoreDriver, HostError, pack_cmd
from sim.host.optim import SGD, Adam, AdamW, Clip, LossScale, Momentum
from sim.model.core import CoreModel
from sim.tb import cycles as doc
from sim.tb.cocotb_stream import StreamDriver, StreamMonitor, reset, start_clock
from sim.tb.core_cases import (fast_program, fast_step, fast_thresholds,
                               non_finite_gradient_case)

F32 = np.float32
CLOCK_NS = 10       # sim.tb.cocotb_stream.start_clock's default period


class CocotbTransport:
    """Sends host commands with :class:`StreamDriver` while :class:`StreamMonitor` collects
    the responses; ``deadline`` in clock cycles."""

    def __init__(self, dut, *, seed: int, idle_prob: float = 0.0, stall_prob: float = 0.0,
                 cmd: str = "cmd", rsp: str = "rsp"):
        self.driver = StreamDriver(dut, cmd, idle_prob=idle_prob, rng=random.Random(seed + 1))
        self.monitor = StreamMonitor(dut, rsp, stall_prob=stall_prob,
                                     rng=random.Random(seed + 2))
        self.cycles = 0          # clock cycles spent in transactions (host I/O + runs)

    def start(self):
        self.monitor.start()

    def stop(self):
        self.monitor.stop()

    async def transact(self, cmds, deadline):
        t0 = get_sim_time(unit="ns")
        task = cocotb.start_soon(self.driver.send_all(cmds))
        try:
            out = await self.monitor.wait_for(len(cmds), timeout_cycles=deadline)
        finally:
            if not task.done():
                task.cancel()
        self.cycles += round((get_sim_time(unit="ns") - t0) / CLOCK_NS)
        return out


def scenario_from_env() -> MLP:
    env = os.environ.get
    layers = tuple(int(v) for v in env("TB_LAYERS", "8,16,10").split(","))
    opt = {"sgd": SGD(lr=0.05), "momentum": Momentum(lr=0.05, momentum=0.9),
           "adam": Adam(lr=1e-2), "adamw": AdamW(lr=1e-2, weight_decay=0.05)}[
        env("TB_OPT", "adam")]
    clip = Clip(max_norm=float(env("TB_CLIP"))) if env("TB_CLIP") else None
    ls = LossScale(init_exp=int(env("TB_LOSS_SCALE")), growth_interval=2) \
        if env("TB_LOSS_SCALE") else None
    return MLP(layers=layers, batch=int(env("TB_BATCH", "8")), optimizer=opt,
               loss_scale=ls, clip=clip, micro_batches=int(env("TB_MICRO", "1")),
               checkpoint=(1,) if env("TB_CKPT") else None,
               schedule=env("TB_SCHEDULE", "listed"),
               one_pass=env("TB_ONE_PASS", "1") != "0")


def precision_from_env(desc: MLP):
    kind = os.environ.get("TB_PREC", "8")
    if kind == "mixed":      # different widths per layer and pass
        table = {}
        for l in range(desc.L):
            table[(l, 0)] = (4 + 2 * (l % 2), 6, 0)
            table[(l, 1)] = (8, 4, 0)
            table[(l, 2)] = (6, 8 - 2 * (l % 2), 0)
        return table
    if kind == "stochastic":
        return (6, 6, 1)
    return int(kind)


def init_params(desc: MLP, rng: np.random.Generator):
    Ws = [(rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(F32)
          for a, b in zip(desc.layers[:-1], desc.layers[1:])]
    bs = [(rng.standard_normal(b) * 0.1).astype(F32) for b in desc.layers[1:]]
    return Ws, bs


def batch(desc: MLP, rng: np.random.Generator):
    x = rng.standard_normal((desc.batch, desc.layers[0])).astype(F32)
    y = rng.integers(0, desc.layers[-1], desc.batch)
    return x, y


class CoreTB:
    """Driver (host commands), monitor (responses), golden model and scoreboard."""

    def __init__(self, dut, config: CoreConfig, *, seed: int = 1):
        self.dut, self.config, self.seed = dut, config, seed
        env = os.environ.get
        self.transport = CocotbTransport(dut, seed=seed, idle_prob=float(env("TB_IDLE", "0")),
                                         stall_prob=float(env("TB_STALL", "0")))
        self.driver = CoreDriver(config, self.transport,
                                 run_deadline=int(env("TB_RUN_DEADLINE", "3000000")))
        self.model = CoreModel(config)
        self.runs = 0

    async def start(self):
        start_clock(self.dut)
        self.dut.cmd__valid.value = 0
        await reset(self.dut)
        self.transport.start()

    async def apply(self, actions) -> tuple[dict, dict]:
        """Both sides execute ``actions``; every result must agree bit for bit; after every
        ``run`` the core's counters are checked against the golden model's."""
        got, want = {}, {}
        for act in actions:
            before = dict(self.model.counters)
            w0 = time.perf_counter()
            g = await self.driver.apply([act])
            if act[0] == "run":
                self.last_run_wall = time.perf_counter() - w0   # the RTL run alone
            w = self.model.apply([act])
            if act[0] == "run":
                self.runs += 1
                assert g["run"] == w["run"], f"run {self.runs}: RTL {g['run']} != golden " \
                                             f"{w['run']}"
                if w["run"][0][0] == Status.OK:
                    await self.check_counters(before)
            for k, v in g.items():
                if k == "run":
                    got.setdefault("run", []).extend(v)
                    want.setdefault("run", []).extend(w["run"])
                else:
                    got[k], want[k] = v, w[k]
        self.scoreboard(got, want)
        return got, want

    def scoreboard(self, got: dict, want: dict) -> None:
        for key in want:
            g, w = got[key], want[key]
            if key == "status":
                for name in w:
                    assert g[name] == w[name], f"optimizer status {name}: RTL {g[name]} != " \
                                               f"golden {w[name]}"
            elif isinstance(w, np.ndarray):
                if not np.array_equal(g, w):
                    line, lane = np.argwhere(g != w)[0]
                    raise AssertionError(f"read {key!r}: first difference at line +{line} "
                                         f"lane {lane}: RTL {int(g[line, lane]):#010x} != "
                                         f"golden {int(w[line, lane]):#010x}")
            else:
                assert g == w, f"{key}: RTL {g} != golden {w}"

    async def check_counters(self, before: dict) -> None:
        c0 = self.transport.cycles
        regs = await self.driver.read_regs()
        self.reg_read_cycles = self.transport.cycles - c0
        after = self.model.counters
        for hw, gold in (("instructions", "instructions"), ("array_beats", "beats"),
                         ("macs", "macs")):
            assert regs[hw] == after[gold] - before[gold], \
                f"counter {hw}: RTL {regs[hw]} != golden {after[gold] - before[gold]}"
        assert STATE_LAYOUT.from_bits(regs["state"]).conflict == 0, \
            "two clients hit one bank port (conflict)"
        busy = regs["matmul_busy"] + regs["vector_busy"] + regs["optim_busy"]
        assert regs["cycles"] >= regs["check_cycles"] + regs["idle"]
        assert busy - regs["overlap"] <= regs["cycles"]
        cocotb.log.info(
            "run %d: %d cycles (check %d, idle %d), matmul %d vector %d optim %d busy, overlap "
            "%d, beats %d, stalls unit/bank/fence/order %d/%d/%d/%d", self.runs, regs["cycles"],
            regs["check_cycles"], regs["idle"], regs["matmul_busy"], regs["vector_busy"],
            regs["optim_busy"], regs["overlap"], regs["array_beats"], regs["stall_unit"],
            regs["stall_bank"], regs["stall_fence"], regs["stall_order"])
        self.last_regs = regs

    async def compare_memory(self, plan=None) -> None:
        """Read the whole scratchpad and compare it with the golden image."""
        got = await self.driver.read_lines(0, self.config.lines)
        want = self.model.mem
        if not np.array_equal(got, want):
            line, lane = np.argwhere(got != want)[0]
            where = ""
            for name, t in (plan or {}).items():
                if t.line <= line < t.line + t.lines:
                    where = f" (tensor {name})"
            raise AssertionError(f"scratchpad differs first at line {line} lane {lane}{where}: "
                                 f"RTL {int(got[line, lane]):#010x} != golden "
                                 f"{int(want[line, lane]):#010x}")


def _config() -> CoreConfig:
    return CoreConfig.preset(os.environ.get("TESSERA_PRESET", "tiny"))


async def _setup(dut, seed: int, *, load: bool = True):
    """Clock, reset, the testbench, the scenario compiled for this core, random parameters
    (loaded into both sides when ``load``) and the random generator that made them."""
    cfg = _config()
    tb = CoreTB(dut, cfg, seed=seed)
    await tb.start()
    desc = scenario_from_env()
    comp = compile_mlp(desc, cfg)
    rng = np.random.default_rng(seed)
    Ws, bs = init_params(desc, rng)
    if load:
        await tb.apply(comp.init_actions(Ws, bs))
    return tb, cfg, desc, comp, rng, Ws, bs


@cocotb.test()
async def training_steps(dut):
    """TB_STEPS training steps of the scenario, bit-exact every step and at the end."""
    tb, cfg, desc, comp, rng, Ws, bs = await _setup(dut, int(os.environ.get("TB_SEED", "1")))
    k0 = desc.loss_scale.init_exp if desc.loss_scale else None
    prec = precision_from_env(desc)
    clipped = 0
    for t in range(1, int(os.environ.get("TB_STEPS", "2")) + 1):
        x, y = batch(desc, rng)
        # later steps rewrite the precision table (widths shifted per step) but not the
        # program: the table is read by every MATMUL at run time
        if t > 1 and isinstance(prec, dict):
            prec = {key: (wb, wa, r) for key, (wa, wb, r) in prec.items()}
        got, want = await tb.apply(comp.step_actions(x, y, t, precision=prec,
                                                     scale_exp=k0 if t == 1 else None,
                                                     load_program=t == 1))
        step = comp.decode_step(got)
        assert step["ok"], step["run"]
        assert np.all(np.isfinite(step["losses"]))
        clipped += step["status"]["clipped"]
        cocotb.log.info("step %d: loss %.4f skipped %s clipped %d", t, step["loss"],
                        step["skipped"], step["status"]["clipped"])
    got, _ = await tb.apply(comp.read_actions())
    W1, _ = comp.decode_params(got)
    assert any(not np.array_equal(a, b) for a, b in zip(W1, Ws)), "weights did not change"
    if desc.clip is not None:
        assert clipped > 0, "clipping never engaged"
    await tb.compare_memory(comp.plan)


@cocotb.test()
async def inf_skips_step(dut):
    """Dynamic loss scaling: an Inf in the batch skips the step - every weight, optimizer
    state word and the step count unchanged, the scale halved - and training goes on."""
    tb, cfg, desc, comp, rng, Ws, bs = await _setup(dut, 3)
    assert desc.loss_scale is not None, "needs TB_LOSS_SCALE"
    x, y = batch(desc, rng)
    got, _ = await tb.apply(comp.step_actions(x, y, 1, scale_exp=desc.loss_scale.init_exp))
    s1 = comp.decode_step(got)
    assert not s1["skipped"]
    before, _ = await tb.apply(comp.read_actions())
    x, y = batch(desc, rng)
    x[1, 2] = np.inf
    got, _ = await tb.apply(comp.step_actions(x, y, 2))
    s2 = comp.decode_step(got)
    assert s2["skipped"] and s2["scale_exp"] == s1["scale_exp"] - 1
    assert s2["status"]["step_count"] == s1["status"]["step_count"]
    after, _ = await tb.apply(comp.read_actions())
    for key in ("params",) + desc.states:
        assert np.array_equal(before[key], after[key]), f"{key} changed in a skipped step"
    x, y = batch(desc, rng)
    got, _ = await tb.apply(comp.step_actions(x, y, 2))
    assert not comp.decode_step(got)["skipped"]
    await tb.compare_memory(comp.plan)


@cocotb.test()
async def one_pass_skip_matches_two_pass(dut):
    """A gradient made non-finite by a matmul pass or by the vector unit with no BFP converter
    flag: the two-pass OPT (check pass) and the one-pass OPT (write snoop, ``flags`` bit 2)
    both skip the step, write nothing, and leave identical memories and status; then a clean
    step runs one-pass with the optimizer busy ``N + latency`` cycles (no check pass)."""
    cfg = _config()
    tb = CoreTB(dut, cfg, seed=9)
    await tb.start()
    for where in ("matmul", "vector"):
        desc, Ws, bs, x, y = non_finite_gradient_case(where)
        results = {}
        for one_pass in (False, True):
            comp = compile_mlp(desc.replace(one_pass=one_pass), cfg)
            init = comp.init_actions(Ws, bs)
            await tb.apply(init)
            before, _ = await tb.apply(comp.read_actions())
            got, _ = await tb.apply(comp.step_actions(x, y, 1, scale_exp=5))
            step = comp.decode_step(got)
            assert step["skipped"], (where, one_pass)
            assert tb.last_regs["flags"] == (4 if one_pass else 0), tb.last_regs["flags"]
            after, _ = await tb.apply(comp.read_actions())
            for key in ("params",) + desc.states:
                assert np.array_equal(before[key], after[key]), f"{key} written ({where})"
            results[one_pass] = (step["status"], after, tb.model.mem.copy())
            cocotb.log.info("%s, %s pass: skipped, flags %d, optimizer busy %d", where,
                            "one" if one_pass else "two", tb.last_regs["flags"],
                            tb.last_regs["optim_busy"])
        (st2, mem2_regions, img2), (st1, mem1_regions, img1) = results[False], results[True]
        assert st1 == st2, (st1, st2)
        for key in mem2_regions:
            assert np.array_equal(mem1_regions[key], mem2_regions[key]), key
        assert np.array_equal(img1, img2)
        await tb.compare_memory(comp.plan)
    # a clean step, one pass: N + latency optimizer cycles
    desc = non_finite_gradient_case("vector")[0]
    comp = compile_mlp(desc, cfg)
    rng = np.random.default_rng(9)
    await tb.apply(comp.init_actions(*init_params(desc, rng)))
    x, y = batch(desc, rng)
    got, _ = await tb.apply(comp.step_actions(x, y, 1, scale_exp=5))
    assert not comp.decode_step(got)["skipped"]
    assert tb.last_regs["flags"] == 0
    n = comp.report()["parameter_words_padded"]
    # SETREG N and STEP1 in the two cycles after issue, the unit free a cycle after busy falls
    assert tb.last_regs["optim_busy"] == doc.core_opt_busy_cycles(n), tb.last_regs["optim_busy"]
    await tb.compare_memory(comp.plan)


@cocotb.test()
async def checkpointing_identical(dut):
    """The same step with and without activation checkpointing gives identical weights and
    optimizer state (nearest rounding), each bit-exact with the golden model."""
    cfg = _config()
    tb = CoreTB(dut, cfg, seed=4)
    await tb.start()
    base = scenario_from_env()
    rng = np.random.default_rng(4)
    Ws, bs = init_params(base, rng)
    x, y = batch(base, rng)
    results, cycles = [], []
    for ck in (None, (1,)):
        desc = base.replace(checkpoint=ck)
        comp = compile_mlp(desc, cfg)
        await tb.apply(comp.init_actions(Ws, bs))
        await tb.apply(comp.step_actions(x, y, 1))
        cycles.append(tb.last_regs["cycles"])
        got, _ = await tb.apply(comp.read_actions())
        results.append((comp.decode_params(got), comp.decode_opt_state(got)))
    (p0, s0), (p1, s1) = results
    for a, b in zip(p0[0] + p0[1], p1[0] + p1[1]):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    for s in s0:
        for a, b in zip(s0[s]["W"] + s0[s]["b"], s1[s]["W"] + s1[s]["b"]):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert cycles[1] > cycles[0], f"recomputation should cost cycles: {cycles}"
    cocotb.log.info("step cycles without / with checkpointing: %d / %d", *cycles)


@cocotb.test()
async def reset_mid_step(dut):
    """Reset in the middle of a step (at several points), then a full correct step."""
    tb, cfg, desc, comp, rng, Ws, bs = await _setup(dut, 5, load=False)
    x, y = batch(desc, rng)
    for delay in (40, 400, 1500):
        await tb.apply(comp.init_actions(Ws, bs))
        acts = comp.step_actions(x, y, 1)
        i_run = [a[0] for a in acts].index("run")
        await tb.apply(acts[:i_run])
        tb.transport.driver.valid.value = 1
        tb.transport.driver.payload.value = pack_cmd(cfg, HostOp.START)
        await RisingEdge(dut.clk)
        tb.transport.driver.valid.value = 0
        await ClockCycles(dut.clk, delay)
        assert dut.running.value == 1, f"program finished before the reset at {delay}"
        tb.transport.stop()
        await reset(dut)
        tb.transport.start()
        # the golden model mirrors the reset; the scratchpad keeps what the RTL wrote
        tb.model.reset()
        tb.model.mem[:] = await tb.driver.read_lines(0, cfg.lines)
        await tb.apply(comp.init_actions(Ws, bs))
        got, _ = await tb.apply(comp.step_actions(x, y, 1))
        assert comp.decode_step(got)["ok"]
        await tb.compare_memory(comp.plan)


@cocotb.test()
async def rejected_input_changes_nothing(dut):
    """A program that fails the check runs nothing; bad host commands answer an error
    status; the scratchpad, program results and optimizer state stay as they were."""
    tb, cfg, desc, comp, rng, Ws, bs = await _setup(dut, 6)
    D = cfg.bank_depth
    bad = [encode(Op.VEC, vop=6, rows=2, cols=4, d=0),          # fine, must not run
           encode(Op.MATMUL, mode=0, M=4, K=4, N=4, a=0, b=8, c=2 * D),   # A, B in bank 0
           encode(Op.HALT)]
    before = await tb.driver.read_lines(0, cfg.lines)
    got, _ = await tb.apply([("program", bad), ("run",)])
    assert got["run"] == [(Status.ERR_BANK, 1)]
    for cmd, status in ((pack_cmd(cfg, HostOp.WRITE, cfg.lines, 5), HostStatus.BAD_ADDR),
                        (pack_cmd(cfg, HostOp.READ, cfg.lines), HostStatus.BAD_ADDR),
                        (pack_cmd(cfg, HostOp.PREC, 0, 3), HostStatus.BAD_VALUE),
                        (pack_cmd(cfg, HostOp.PREC, cfg.layers * 4), HostStatus.BAD_ADDR),
                        (pack_cmd(cfg, HostOp.PROG, cfg.prog_depth), HostStatus.BAD_ADDR),
                        (pack_cmd(cfg, HostOp.REG, 999), HostStatus.BAD_ADDR),
                        (pack_cmd(cfg, HostOp.REG, len(REGS)), HostStatus.BAD_ADDR),
                        (pack_cmd(cfg, HostOp.REG, stat_reg(stat_slots(cfg), 0)),
                         HostStatus.BAD_ADDR),
                        (pack_cmd(cfg, HostOp.THRESH, stat_slot(0, 3, 0), 1),
                         HostStatus.BAD_ADDR),
                        (pack_cmd(cfg, HostOp.THRESH, stat_slot(cfg.layers, 0, 0), 1),
                         HostStatus.BAD_ADDR),
                        (pack_cmd(cfg, 15), HostStatus.BAD_OP)):
        (_, st, _), = await tb.driver._do([cmd])
        assert st == status, (cmd, st, status)
    try:
        await tb.driver.set_precision(0, 0, 3, 8, 0)
        raise AssertionError("odd width accepted")
    except HostError as e:
        assert e.status == HostStatus.BAD_VALUE
    after = await tb.driver.read_lines(0, cfg.lines)
    assert np.array_equal(before, after), "a rejected program or command changed memory"
    # and the core still trains correctly afterwards
    x, y = batch(desc, rng)
    got, _ = await tb.apply(comp.step_actions(x, y, 1))
    assert comp.decode_step(got)["ok"]
    await tb.compare_memory(comp.plan)


@cocotb.test()
async def fast_adapt_steps(dut):
    """FAST: the program (ADAPT at its top) is loaded once; all widths start at 4; after step
    1 the host sets thresholds just below the statistic of some slots and just above others;
    step 2's ADAPT raises exactly the former; step 3 also gets a host PREC. Every result, the
    statistics after every step and the whole scratchpad bit-exact with the golden model."""
    tb, cfg, desc, comp, rng, Ws, bs = await _setup(dut, 7)
    start = [("prec", l, mode, 4, 4, 0) for l in range(desc.L) for mode in range(3)]
    await tb.apply([("program", fast_program(comp))] + start)
    x, y = batch(desc, rng)
    await tb.apply(fast_step(comp, x, y, 1) + [("stats", "stats1")])
    raise_, keep = [(0, 0, 1), (1, 2, 0), (1, 0, 0)], [(0, 0, 0), (1, 1, 1)]
    await tb.apply(fast_thresholds(tb.model.stat_states(), raise_, keep))
    x, y = batch(desc, rng)
    await tb.apply(fast_step(comp, x, y, 2) + [("stats", "stats2")])
    prec = tb.model.prec
    assert prec[(0, 0)] == (4, 6, 0) and prec[(1, 0)] == (6, 4, 0) and prec[(1, 2)][0] == 6
    assert prec[(1, 1)] == (4, 4, 0)
    x, y = batch(desc, rng)
    await tb.apply(fast_step(comp, x, y, 3, prec=[(1, 2, 6, 2, 1)]) + [("stats", "stats3")])
    await tb.compare_memory(comp.plan)


@cocotb.test()
async def bench_step(dut):
    """Benchmark (``make bench-core``): cycles of one training step of the scenario at width
    ``TB_BENCH_WIDTH`` with its breakdown, written to ``$TESSERA_BENCH_OUT``. The step is still
    checked bit-exactly against the golden model (the core's timing does not depend on the
    data, except that a skipped step has no update pass)."""
    import json
    out = os.environ.get("TESSERA_BENCH_OUT")
    if not out:
        raise RuntimeError("bench_step needs TESSERA_BENCH_OUT (run it through make bench-core)")
    width = int(os.environ.get("TB_BENCH_WIDTH", "8"))
    tb, cfg, desc, comp, rng, Ws, bs = await _setup(dut, 7)
    x, y = batch(desc, rng)
    acts = comp.step_actions(x, y, 1, precision=width)
    c0 = tb.transport.cycles
    got, _ = await tb.apply(acts)
    wall = tb.last_run_wall
    assert comp.decode_step(got)["ok"]
    regs = tb.last_regs
    # the counter reads after the run are the testbench's, not the step's host I/O
    total = tb.transport.cycles - c0 - tb.reg_read_cycles
    S = cfg.size
    beat = cfg.array.beat_cycles(width, width)
    macs = regs["macs"]
    host_io = total - regs["cycles"]
    res = {
        "S": S, "width": width, "layers": list(desc.layers), "batch": desc.batch,
        "optimizer": type(desc.optimizer).__name__, "micro_batches": desc.micro_batches,
        "schedule": desc.schedule,
        "step_cycles": total, "run_cycles": regs["cycles"], "host_io_cycles": host_io,
        "mac_bound_cycles": -(-macs * beat // (S * S)), "macs": macs,
        "array_busy": regs["matmul_busy"], "vector_busy": regs["vector_busy"],
        "optim_busy": regs["optim_busy"], "overlap": regs["overlap"], "idle": regs["idle"],
        "check_cycles": regs["check_cycles"], "array_beats": regs["array_beats"],
        "array_stalls": regs["array_stalls"], "instructions": regs["instructions"],
        "stall_bank": regs["stall_bank"], "stall_unit": regs["stall_unit"],
        "stall_fence": regs["stall_fence"], "stall_order": regs["stall_order"],
        # Verilator speed while the program runs (Python only waits for START's response)
        "run_seconds": wall, "sim_cycles_per_second": regs["cycles"] / wall,
    }
    res["step_over_mac_bound"] = res["step_cycles"] / res["mac_bound_cycles"]
    with open(out, "w") as f:
        json.dump(res, f, indent=2)

