"""Fast tier: MatmulEngine in Amaranth's simulator vs sim.model.array.MatmulEngineModel (through
MatmulEngineWithMemories, the registered block; one test drives the engine's ports directly).

Small shapes only (the Python simulator runs a few thousand cycles per second); the large
random sweeps are in tests/test_matmul_engine_cocotb.py.
"""
import functools
import random

import numpy as np
import pytest
from amaranth.hdl import Shape
from amaranth.lib.wiring import Out
from amaranth.sim import Simulator

from hdl.array.config import BWD_DATA, BWD_WEIGHT, FWD, ArrayConfig
from hdl.array.engine import (MEM_A, MEM_B, MEM_C, OP_READ, OP_STATUS, OP_WRITE,
                              MatmulEngine, cmd_layout, counters_layout, rsp_layout)
from hdl.array.standalone import MatmulEngineWithMemories
from hdl.lib.memport import LinePort
from sim.model import array as G
from sim.model.bfp import ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE
from sim.model.stats import StatState
from sim.tb import cycles as cycles_doc
from sim.tb.amaranth_tb import ReusableSim
from sim.tb.matmul_cmds import random_command, start_fields
from sim.tb.payload import pack, unpack

MEMS = {"a": MEM_A, "b": MEM_B, "c": MEM_C}
COUNTERS = ("macs", "beats", "cycles", "stalls", "interval")


def _line(words) -> int:
    return sum(int(w) << (32 * i) for i, w in enumerate(words))


class Host:
    """Host side in the Amaranth simulator: commands in, responses out (random idle/stall)."""

    def __init__(self, dut, ctx, rng, idle=0.0, stall=0.0):
        self.dut, self.ctx, self.rng, self.idle, self.stall = dut, ctx, rng, idle, stall

    async def command(self, **fields):
        ctx, dut = self.ctx, self.dut
        while self.idle and self.rng.random() < self.idle:
            await ctx.tick()
        ctx.set(dut.cmd.payload, fields)
        ctx.set(dut.cmd.valid, 1)
        await ctx.tick().until(dut.cmd.ready)
        ctx.set(dut.cmd.valid, 0)
        while self.stall and self.rng.random() < self.stall:
            await ctx.tick()
        ctx.set(dut.rsp.ready, 1)
        payload, = await ctx.tick().sample(dut.rsp.payload).until(dut.rsp.valid)
        ctx.set(dut.rsp.ready, 0)
        return payload

    async def queue(self, commands):
        """Send ``commands`` (dicts of fields) back to back while collecting responses (random
        idle cycles on ``cmd``, random backpressure on ``rsp``); returns, per response, the
        payload and the counters sampled at its transfer."""
        ctx, dut, rng = self.ctx, self.dut, self.rng
        todo, got = list(commands), []
        while len(got) < len(commands):
            send = bool(todo) and not (self.idle and rng.random() < self.idle)
            if send:
                ctx.set(dut.cmd.payload, todo[0])
            ctx.set(dut.cmd.valid, send)
            ctx.set(dut.rsp.ready, not (self.stall and rng.random() < self.stall))
            *_, c_rdy, r_val, r_rdy, r_pay, cnt = await ctx.tick().sample(
                dut.cmd.ready, dut.rsp.valid, dut.rsp.ready, dut.rsp.payload, dut.counters)
            if send and c_rdy:
                todo.pop(0)
            if r_val and r_rdy:
                got.append((r_pay, {f: int(getattr(cnt, f)) for f in COUNTERS}))
        ctx.set(dut.cmd.valid, 0)
        ctx.set(dut.rsp.ready, 0)
        return got

    async def write_lines(self, mem, lines: np.ndarray, base=0):
        for i, words in enumerate(lines):
            r = await self.command(op=OP_WRITE, mem=MEMS[mem], addr=base + i, data=_line(words))
            assert r.status == G.OK

    async def read_lines(self, mem, n, base=0):
        out = []
        for i in range(n):
            r = await self.command(op=OP_READ, mem=MEMS[mem], addr=base + i)
            assert r.status == G.OK
            v = int(r.data)
            out.append([(v >> (32 * j)) & 0xFFFFFFFF for j in range(self.dut.config.size)])
        return np.array(out, np.uint32)

    async def start(self, cmd: G.MatmulCommand):
        return await self.command(**start_fields(cmd))


def _rand(rng, shape):
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-4, 5, shape))).astype(np.float32)


@functools.cache
def _engine_sim(cfg: ArrayConfig) -> ReusableSim:
    """One elaborated :class:`MatmulEngineWithMemories` per configuration, shared by the tests
    of that configuration (2 to 4 s to build; each run starts from the initial state -- all
    scratchpads zero -- :class:`ReusableSim`)."""
    return ReusableSim(MatmulEngineWithMemories(config=cfg), testbenches=1, processes=0)


def run_engine(cfg, body, *, deadline_cycles=400_000):
    """``body(dut, ctx)`` on the engine of ``cfg``; its result. :class:`TimeoutError` if it has
    not returned after ``deadline_cycles``."""
    sim = _engine_sim(cfg)
    dut = sim.dut
    box = {}

    async def tb(ctx):
        box["result"] = await body(dut, ctx)

    sim.run(tb, max_cycles=deadline_cycles)    # ends with the bench
    assert "result" in box, "testbench did not finish"
    return box["result"]


def _regs(on: bool, *, shared: bool | None = None) -> dict:
    """The FPGA build's engine options (``CoreConfig.fpga()``: its registers, the results
    as magnitude and sign, two accumulator lanes, one converter for both operand paths), all
    on or all off; ``shared=False``: all on but each path with its own converter (and the
    output skid buffer, ``out_skid``, the FPGA build's before ``shared_converter``)."""
    shared = on if shared is None else shared
    return {"req_reg": on, "cmd_reg": on, "out_skid": on and not shared, "out_magnitude": on,
            "shared_converter": shared, "acc_lanes": 2 if on else 0}


def passes_scenario(cfg, cmds, seed, *, idle=0.0, stall=0.0):
    """Fill A, B, C with random data, run ``cmds`` in order; compare every memory afterwards."""
    model = G.MatmulEngineModel(cfg)
    if cfg.role_ports:          # one address space: A, B and C are the same lines
        model.mem["b"] = model.mem["c"] = model.mem["a"]
    rng = np.random.default_rng(seed)
    for k in model.mem:
        words = _rand(rng, (cfg.mem_depth, cfg.size)).view(np.uint32)
        model.mem[k][:] = words
    init = {k: v.copy() for k, v in model.mem.items()}
    expected, want_stats = [], []
    for cmd in cmds:
        status, res = model.run(cmd)
        expected.append((status, res))
        want_stats.append(tuple(st.state for st in model.stats))

    async def body(dut, ctx):
        host = Host(dut, ctx, random.Random(seed), idle, stall)
        for k, v in init.items():
            await host.write_lines(k, v)
        got = []
        for cmd in cmds:
            r = await host.start(cmd)
            got.append((int(r.status), int(r.invalid), int(r.overflow),
                        {f: int(getattr(ctx.get(dut.counters), f)) for f in COUNTERS},
                        tuple(StatState.of(ctx.get(dut.stat[i])) for i in range(2))))
        mems = {k: await host.read_lines(k, cfg.mem_depth) for k in init}
        return got, mems

    got, mems = run_engine(cfg, body)
    for (status, inv, ovf, counters, stats), (st, res), cmd, want in zip(got, expected, cmds,
                                                                         want_stats):
        assert status == st, (cmd, status, st)
        assert stats == want, ("FAST statistic", cmd, stats, want)
        if st == G.OK:
            assert counters["macs"] == cmd.M * cmd.K * cmd.N
            assert counters["beats"] == G.pass_beats(cmd.mode, cmd.M, cmd.K, cmd.N, cfg.size)
            B = cfg.beat_cycles(cmd.width_a, cmd.width_b)
            assert counters["stalls"] == counters["cycles"] - counters["beats"] * B
            assert counters["interval"] == counters["cycles"]     # one pass at a time
            assert (inv, ovf) == (int(res.invalid), int(res.overflow))
    for k in mems:
        np.testing.assert_array_equal(mems[k], model.mem[k], err_msg=f"scratchpad {k}")
    return got


@pytest.mark.parametrize("mode", [FWD, BWD_DATA, BWD_WEIGHT])
def test_engine_modes_s2(mode):
    cfg = ArrayConfig(size=2, mem_depth=32, dim_bits=5)
    cmds = [
        G.MatmulCommand(mode, 1, 1, 1, 2, 2, ROUND_NEAREST, False, 0, 0, 0),
        G.MatmulCommand(mode, 3, 5, 4, 8, 4, ROUND_STOCHASTIC, True, 2, 12, 20),
        G.MatmulCommand(mode, 4, 2, 3, 4, 6, ROUND_TRUNCATE, False, 16, 0, 8),
    ]
    passes_scenario(cfg, cmds, seed=mode)


@pytest.mark.parametrize("regs", [pytest.param(False, id="plain", marks=pytest.mark.long),
                                  pytest.param(True, id="fpga_regs")])
@pytest.mark.parametrize("mode", [FWD, BWD_DATA, BWD_WEIGHT])
def test_engine_modes_s4(mode, regs):
    """Random operands, idle cycles and backpressure, bit-exact with the model; also with the
    FPGA build's registers (``req_reg``, ``cmd_reg``), which change no result. The last pass
    has one-cycle beats (widths 2 x 2) over several weight tiles / dW rows: beats back to
    back across a tile change (the beat assembler's registered exponents take the next
    tile's or row's a cycle ahead)."""
    cfg = ArrayConfig(size=4, mem_depth=32, dim_bits=5, **_regs(regs))
    cmds = [
        G.MatmulCommand(mode, 5, 3, 6, 8, 8, ROUND_NEAREST, False, 0, 8, 16),
        G.MatmulCommand(mode, 2, 9, 4, 2, 4, ROUND_STOCHASTIC, True, 4, 0, 24),
        G.MatmulCommand(mode, 12, 7, 8, 2, 2, ROUND_NEAREST, False, 0, 8, 0),
    ]
    passes_scenario(cfg, cmds, seed=10 + mode, idle=0.2, stall=0.3)


@pytest.mark.parametrize("regs, latency", [
    pytest.param(False, 1, id="plain"),
    pytest.param(True, 1, id="fpga_regs", marks=pytest.mark.long),
    pytest.param(True, 2, id="fpga_regs_latency2", marks=pytest.mark.long),
    pytest.param(True, 3, id="fpga_regs_latency3")])
def test_role_ports_one_address_space(regs, latency):
    """The training core's port arrangement (``role_ports``: the two quantizers' reads and
    the accumulator's read-modify-write on one scratchpad, the host's WRITE/READ through the
    accumulator's port) with and without the FPGA build's registers, and with ports of read
    latency 2 (``mem_latency``: the requests registered before the memory, as the core's
    crossbar does) and 3 (the read data registered too, ``spad_out_reg``): every mode,
    accumulate, stochastic rounding, random idle cycles and backpressure, bit-exact with the
    model on one memory seen as A, B and C (matrices at disjoint lines)."""
    cfg = ArrayConfig(size=4, mem_depth=64, dim_bits=6, role_ports=True, mem_latency=latency,
                      **_regs(regs))
    C = G.MatmulCommand
    cmds = [C(FWD, 5, 6, 7, 4, 4, ROUND_NEAREST, False, 0, 12, 28),
            C(BWD_DATA, 5, 6, 7, 4, 2, ROUND_NEAREST, False, 0, 12, 28),
            C(BWD_WEIGHT, 5, 6, 7, 8, 4, ROUND_STOCHASTIC, True, 0, 12, 28),
            C(FWD, 3, 6, 7, 2, 8, ROUND_STOCHASTIC, True, 0, 12, 40)]
    passes_scenario(cfg, cmds, seed=41, idle=0.2, stall=0.3)


@pytest.mark.parametrize("regs", [
    pytest.param(False, id="plain"),
    pytest.param(True, id="fpga_regs", marks=pytest.mark.long),
    pytest.param("latency2", id="fpga_regs_latency2", marks=pytest.mark.long),
    pytest.param("latency3", id="fpga_regs_latency3")])
@pytest.mark.parametrize("mode", [FWD, BWD_DATA, BWD_WEIGHT])
def test_pass_cycles_documented_s2(mode, regs):
    """The fast tier's twin of the cocotb tier's ``pass_cycles_documented``: square passes of
    4S per side (16 weight tiles, each loaded while the one before computes) on an idle engine
    at 2- and 4-bit beats take exactly ``(beats + 2S)*B + 2S + 26`` cycles (docs/array.md via
    :mod:`sim.tb.cycles`, not the code under test): a bubble per beat or per tile, or a weight
    tile that cannot load ahead, fails. With the FPGA build's registers one cycle more (the
    request registers; the command register comes before the pass starts), no bubble: a slice
    that halved the request rate would add a cycle per line. With ports of read latency 2
    (``mem_latency``, on the core's port arrangement) one more, and at 3 one more again, no
    bubble either. (Each operand path with its own converter: the shared one is
    ``test_pass_cycles_shared_converter``.)"""
    S = 2
    lat = {"latency2": 2, "latency3": 3}.get(regs, 1)
    # (the core's arrangement is one memory: A, B and C then at disjoint lines)
    cfg = ArrayConfig(size=S, mem_depth=32 * (4 if lat >= 2 else 1), dim_bits=5,
                      role_ports=lat >= 2, mem_latency=lat, **_regs(bool(regs), shared=False))
    D = 4 * S
    bases = (0, 32, 64) if lat >= 2 else (0, 0, 0)
    cmds = [G.MatmulCommand(mode, D, D, D, w, w, ROUND_NEAREST, False, *bases) for w in (2, 4)]
    got = passes_scenario(cfg, cmds, seed=30 + mode)
    for (status, _, _, counters, _), cmd in zip(got, cmds):
        assert status == G.OK
        B = cycles_doc.beat_cycles(cmd.width_a, cmd.width_b, cfg.lanes)
        beats = G.pass_beats(mode, D, D, D, S)
        want = cycles_doc.matmul_pass_cycles(S, beats, B, cfg.req_reg,
                                             S // (cfg.acc_lanes or S), cfg.mem_latency)
        assert counters["cycles"] == want, (cmd, counters, want)


@pytest.mark.parametrize("mode", [FWD, BWD_DATA, BWD_WEIGHT])
def test_pass_cycles_shared_converter(mode):
    """The FPGA build's one converter for both operand paths (``shared_converter``) on the
    square passes of ``test_pass_cycles_documented_s2`` (latency 3, as the core has it): its
    input register, output FIFO and output register make every pass at least 3 cycles longer
    than ``sim.tb.cycles.matmul_pass_cycles`` says for own converters, and at most 5 while
    beats take 4 cycles (the two paths' groups never queue long for the converter); at 1-cycle beats
    the converter's group per cycle bounds the pass: each group beyond one per beat costs at
    most a cycle (``BWD_WEIGHT`` streams both operands, a group each per beat). Results
    bit-exact with the model."""
    S, lat = 2, 3
    cfg = ArrayConfig(size=S, mem_depth=128, dim_bits=5, role_ports=True, mem_latency=lat,
                      **_regs(True))
    D = 4 * S
    cmds = [G.MatmulCommand(mode, D, D, D, w, w, ROUND_NEAREST, False, 0, 32, 64)
            for w in (2, 4)]
    got = passes_scenario(cfg, cmds, seed=30 + mode)
    beats = G.pass_beats(mode, D, D, D, S)
    # groups through the converter: one per beat for the streamed operand; a weight tile's
    # S groups per tile (FWD, BWD_DATA) or the other operand's group per beat (BWD_WEIGHT)
    groups = 2 * beats if mode == BWD_WEIGHT else beats + (D // S) ** 2 * S
    for (status, _, _, counters, _), cmd in zip(got, cmds):
        assert status == G.OK
        B = cycles_doc.beat_cycles(cmd.width_a, cmd.width_b, cfg.lanes)
        own = cycles_doc.matmul_pass_cycles(S, beats, B, cfg.req_reg,
                                            S // (cfg.acc_lanes or S), cfg.mem_latency)
        extra = max(0, groups - beats * B)
        assert own + 3 <= counters["cycles"] <= own + 5 + extra, (cmd, counters, own, extra)
        if B == 1:
            assert counters["cycles"] >= groups, "the converter gives a group per cycle"


@pytest.mark.parametrize("acc_lanes", [pytest.param(1, marks=pytest.mark.long), 2])
def test_pass_cycles_shared_accumulator(acc_lanes):
    """An accumulator of fewer lanes than S (``acc_lanes``; the FPGA build has 2) takes a
    result line in ``F = S / acc_lanes`` cycles: square passes at S = 4 take exactly
    ``max((beats + 2S)*B + F - 1, beats*F + 2S*B + B - 1) + 2S + 26`` cycles
    (``sim.tb.cycles.matmul_pass_cycles``, docs/array.md) at beats of 1, 2, 3 and 4 cycles
    (below, at and above F), results bit-exact with the model."""
    S = 4
    cfg = ArrayConfig(size=S, mem_depth=64, dim_bits=6, acc_lanes=acc_lanes)
    D = 4 * S
    for mode in (FWD, BWD_WEIGHT):
        cmds = [G.MatmulCommand(mode, D, D, D, wa, wb, ROUND_NEAREST, False, 0, 0, 0)
                for wa, wb in ((2, 2), (2, 4), (2, 6), (4, 4))]
        got = passes_scenario(cfg, cmds, seed=50 + mode)
        for (status, _, _, counters, _), cmd in zip(got, cmds):
            B = cycles_doc.beat_cycles(cmd.width_a, cmd.width_b, cfg.lanes)
            beats = G.pass_beats(mode, D, D, D, S)
            want = cycles_doc.matmul_pass_cycles(S, beats, B, acc_parts=S // acc_lanes)
            assert counters["cycles"] == want, (cmd, counters, want)


@pytest.mark.parametrize("regs", [False, True], ids=["plain", "fpga_regs"])
def test_back_to_back_passes(regs):
    """Commands sent without waiting for responses. STARTs with the running pass's settings
    overlap it (``interval < cycles``, proving the overlap), including one that accumulates
    into lines the previous pass is still writing; a START with other widths, a WRITE and an
    invalid START wait until the engine is idle. Every response in order, flags attributed
    to the right pass (NaN/Inf planted in one pass's operands), memories bit-exact with the
    model run one command after the other; random idle cycles and backpressure. Also with
    the FPGA build's registers: a generator is "done" while its last request may still be in
    the request slice, and every command passes the pending register, so the overlap must
    still keep every pass's reads and responses in order."""
    S = 4
    cfg = ArrayConfig(size=S, mem_depth=64, dim_bits=6, **_regs(regs))
    model = G.MatmulEngineModel(cfg)
    rng = np.random.default_rng(21)
    for k in model.mem:
        model.mem[k][:] = _rand(rng, (cfg.mem_depth, S)).view(np.uint32)
    model.mem["a"][40, 1] = np.float32(np.nan).view(np.uint32)    # read by passes 3 and 10
    model.mem["a"][41, 2] = np.float32(np.inf).view(np.uint32)
    init = {k: v.copy() for k, v in model.mem.items()}
    C = G.MatmulCommand
    rn, sr, tr = ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE
    new_line = _rand(rng, S).view(np.uint32)
    items = [
        C(FWD, 5, 6, 7, 4, 2, rn, False, 0, 0, 0),
        C(FWD, 8, 4, 4, 4, 2, rn, True, 20, 10, 4),      # accumulates into pass 1's lines
        C(FWD, 3, 7, 2, 4, 2, rn, False, 40, 16, 30),    # NaN/Inf in its X rows
        C(FWD, 4, 4, 5, 4, 2, rn, False, 0, 20, 40),     # clean again
        C(FWD, 4, 5, 5, 8, 8, rn, False, 0, 20, 0),      # other widths: waits for idle
        ("write", 10, new_line),                          # waits; the next pass reads it
        C(FWD, 6, 4, 3, 8, 8, rn, True, 8, 30, 50),
        C(FWD, 2, 2, 2, 3, 8, rn, False, 0, 0, 0),       # invalid width: answered in order
        C(BWD_WEIGHT, 6, 5, 7, 2, 4, sr, False, 0, 0, 0),
        C(BWD_WEIGHT, 9, 3, 2, 2, 4, sr, True, 40, 8, 12),   # other strides; NaN in X
        C(BWD_WEIGHT, 5, 6, 5, 2, 4, sr, True, 0, 2, 30),
        C(BWD_DATA, 7, 5, 6, 6, 2, tr, False, 0, 0, 0),
        C(BWD_DATA, 5, 3, 9, 6, 2, tr, True, 2, 20, 30),
    ]
    commands, expected = [], []
    for it in items:
        if isinstance(it, tuple):
            model.mem["a"][it[1]] = it[2]
            commands.append(dict(op=OP_WRITE, mem=MEM_A, addr=it[1], data=_line(it[2])))
            expected.append((G.OK, None, None))
        else:
            status, res = model.run(it)
            commands.append(start_fields(it))
            expected.append((status, res, it))

    async def body(dut, ctx):
        host = Host(dut, ctx, random.Random(3), idle=0.1, stall=0.3)
        for k, v in init.items():
            await host.write_lines(k, v)
        got = await host.queue(commands)
        mems = {k: await host.read_lines(k, cfg.mem_depth) for k in init}
        return got, mems

    got, mems = run_engine(cfg, body)
    overlapped = []
    for i, ((r, cnt), (status, res, cmd)) in enumerate(zip(got, expected)):
        assert int(r.op) == commands[i]["op"], i
        assert int(r.status) == status, (i, cmd)
        if res is None:
            continue
        assert (int(r.invalid), int(r.overflow)) == (int(res.invalid), int(res.overflow)), i
        assert cnt["macs"] == cmd.M * cmd.K * cmd.N, i
        assert cnt["beats"] == G.pass_beats(cmd.mode, cmd.M, cmd.K, cmd.N, S), i
        B = cfg.beat_cycles(cmd.width_a, cmd.width_b)
        assert cnt["stalls"] == cnt["cycles"] - cnt["beats"] * B, i
        assert cnt["interval"] <= cnt["cycles"], i
        if cnt["interval"] < cnt["cycles"]:
            overlapped.append(i)
            # it started after its predecessor: its latency is at most the predecessor's
            # plus the cycles it added (the counter restarts for every pass)
            assert cnt["cycles"] <= got[i - 1][1]["cycles"] + cnt["interval"], (i, cnt)
    assert [bool(expected[i][1].invalid) for i in (2, 9)] == [True, True]
    assert not expected[3][1].invalid and not expected[8][1].invalid
    # every START with its predecessor's settings overlapped it; the others did not
    assert overlapped == [1, 2, 3, 9, 10, 12], overlapped
    for k in mems:
        np.testing.assert_array_equal(mems[k], model.mem[k], err_msg=f"scratchpad {k}")


@pytest.mark.parametrize("regs", [False, True], ids=["plain", "fpga_regs"])
def test_invalid_commands_rejected_memory_untouched(regs):
    """Each invalid START answered with its status, nothing written; also with the checks
    registered on the way into the pending register (``cmd_reg``: the products, the checks
    finished from there)."""
    cfg = ArrayConfig(size=2, mem_depth=16, dim_bits=5, **_regs(regs))
    cmds = [
        G.MatmulCommand(3, 1, 1, 1),
        G.MatmulCommand(FWD, 0, 1, 1),
        G.MatmulCommand(FWD, 1, 1, 1, width_a=3),
        G.MatmulCommand(FWD, 1, 1, 1, width_b=10),
        G.MatmulCommand(FWD, 1, 1, 1, width_a=0),
        G.MatmulCommand(FWD, 1, 1, 1, rounding=3),
        G.MatmulCommand(FWD, 4, 4, 4, base_c=10),
        G.MatmulCommand(BWD_WEIGHT, 4, 4, 4, base_b=9),
        G.MatmulCommand(BWD_DATA, 2, 2, 2, base_a=15),
        G.MatmulCommand(FWD, 2, 3, 2, 4, 4, ROUND_NEAREST, False, 1, 2, 3),     # valid
    ]
    got = passes_scenario(cfg, cmds, seed=5)
    assert [g[0] for g in got] == [G.ERR_MODE, G.ERR_SHAPE, G.ERR_WIDTH, G.ERR_WIDTH,
                                   G.ERR_WIDTH, G.ERR_ROUNDING, G.ERR_ADDR, G.ERR_ADDR,
                                   G.ERR_ADDR, G.OK]


@pytest.mark.parametrize("regs", [False, True], ids=["plain", "fpga_regs"])
def test_address_check_at_the_boundary(regs):
    """A pass whose operand ends exactly at ``mem_depth`` runs; one line further, or a base
    past the end (up to the field's largest value, where ``depth - base`` is negative), is
    ``ERR_ADDR``; for each of A, B and C. (The check compares the lines with the room above
    the base, registered with the products under ``cmd_reg``.)"""
    cfg = ArrayConfig(size=2, mem_depth=16, dim_bits=5, **_regs(regs))
    top = (1 << (cfg.mem_depth - 1).bit_length() + 1) - 1      # largest base field value
    cmds, want = [], []
    # 2 x 2 x 2 at S = 2: each operand spans 2 lines
    for base in ("base_a", "base_b", "base_c"):
        for b, st in ((14, G.OK), (15, G.ERR_ADDR), (16, G.ERR_ADDR), (top, G.ERR_ADDR)):
            cmds.append(G.MatmulCommand(FWD, 2, 2, 2, **{base: b}))
            want.append(st)
    got = passes_scenario(cfg, cmds, seed=6)
    assert [g[0] for g in got] == want


@pytest.mark.parametrize("regs", [False, True], ids=["plain", "fpga_regs"])
def test_host_response_latency_published(regs):
    """A WRITE (and a STATUS) is answered ``latency`` cycles after its transfer on ``cmd``, a
    READ one cycle later (the registry's ``latency``: 1, and 2 with ``cmd_reg``, whose
    commands wait a cycle in the pending register)."""
    from hdl.array.standalone import _params
    cfg = ArrayConfig(size=2, mem_depth=16, dim_bits=5, **_regs(regs))
    lat = 1 + int(cfg.cmd_reg)
    assert _params("tiny")["latency"] == 1           # the preset is the plain build

    async def body(dut, ctx):
        got = []
        for fields in ({"op": OP_WRITE, "mem": MEM_B, "addr": 3, "data": 7},
                       {"op": OP_STATUS}, {"op": OP_READ, "mem": MEM_B, "addr": 3}):
            ctx.set(dut.cmd.payload, fields)
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)
            ctx.set(dut.rsp.ready, 1)
            n = 1               # the transfer's clock edge: 1 cycle
            while not ctx.get(dut.rsp.valid):
                await ctx.tick()
                n += 1
            got.append((n, int(ctx.get(dut.rsp.payload.data))))
            await ctx.tick()
            ctx.set(dut.rsp.ready, 0)
        return got

    got = run_engine(cfg, body)
    assert [n for n, _ in got] == [lat, lat, lat + 1], got
    assert got[2][1] == 7


@pytest.mark.parametrize("regs", [False, True], ids=["plain", "fpga_regs"])
def test_host_bad_address_rejected(regs):
    cfg = ArrayConfig(size=2, mem_depth=16, dim_bits=5, **_regs(regs))

    async def body(dut, ctx):
        host = Host(dut, ctx, random.Random(0))
        r1 = await host.command(op=OP_WRITE, mem=MEM_A, addr=16, data=123)
        r2 = await host.command(op=OP_WRITE, mem=3, addr=0, data=123)
        r3 = await host.command(op=OP_READ, mem=MEM_C, addr=20)
        r4 = await host.command(op=OP_WRITE, mem=MEM_B, addr=15, data=0xABCDEF)
        r5 = await host.command(op=OP_READ, mem=MEM_B, addr=15)
        a = await host.read_lines("a", 16)
        return [int(r.status) for r in (r1, r2, r3, r4, r5)], int(r5.data), a

    statuses, data5, a = run_engine(cfg, body)
    assert statuses == [G.ERR_ADDR, G.ERR_ADDR, G.ERR_ADDR, G.OK, G.OK]
    assert data5 == 0xABCDEF
    assert not a.any()                       # the rejected writes went nowhere


def test_python_packing_matches_layouts():
    """The cocotb testbench's integer payloads (sim.tb.payload over the engine's layouts) are
    the Amaranth constants of those layouts, and unpack inverts pack."""
    rng = random.Random(3)
    for cfg in (ArrayConfig(size=2, mem_depth=16), ArrayConfig.preset("tiny"),
                ArrayConfig.preset("default")):
        for layout in (cmd_layout(cfg), rsp_layout(cfg), counters_layout()):
            for _ in range(50):
                vals = {n: rng.randrange(1 << f.width) for n, f in layout}
                word = pack(layout, vals)
                assert word == layout.const(vals).as_value().value
                assert unpack(layout, word) == vals
        cmd = random_command(np.random.default_rng(1), cfg)
        assert pack(cmd_layout(cfg), start_fields(cmd)) == \
            cmd_layout(cfg).const(start_fields(cmd)).as_value().value


def test_engine_invalid_config():
    with pytest.raises(TypeError, match="MatmulEngine.config"):
        MatmulEngine(config=None)


def test_wrapper_invalid_config():
    with pytest.raises(TypeError, match="MatmulEngine.config"):
        MatmulEngineWithMemories(config=None)


def test_engine_port_signature():
    """The engine owns no memory: three line ports of ``mem_depth`` lines (in-range line
    addresses only; the command's address fields keep one spare bit for range checks)."""
    for depth, bits in ((16, 4), (512, 9), (65536, 16)):
        cfg = ArrayConfig(size=4, mem_depth=depth)
        eng = MatmulEngine(config=cfg)
        eng._MustUse__silence = True          # only the signature is looked at
        for name in ("a", "b", "c"):
            assert eng.signature.members[name].flow == Out
            assert eng.signature.members[name].signature == LinePort(addr_bits=bits, words=4)
        assert Shape.cast(cmd_layout(cfg)["addr"].shape).width == bits + 1


def _line_memory(port, S):
    """A memory behind a :class:`LinePort` in the simulator (the contract of hdl.lib.memport:
    data one cycle after ``r_en``, held while ``r_en = 0``, not transparent, per-word write
    enables). Returns the backing dict, the set of lines read and the process."""
    store, reads = {}, set()

    async def process(ctx):
        async for _, _, r_en, r_addr, w_en, w_addr, w_data in ctx.tick().sample(
                port.r_en, port.r_addr, port.w_en, port.w_addr, port.w_data):
            if r_en:
                reads.add(r_addr)
                ctx.set(port.r_data, store.get(r_addr, 0))
            if w_en:
                line = store.get(w_addr, 0)
                for j in range(S):
                    if (w_en >> j) & 1:
                        mask = 0xFFFFFFFF << (32 * j)
                        line = (line & ~mask) | (w_data & mask)
                store[w_addr] = line
    return store, reads, process


def test_engine_ports_at_top_of_64k_lines():
    """The training core's use: ``MatmulEngine`` itself on memories behind its ports with
    ``mem_depth`` = 65536 lines and matrices at the very top (global line addresses); a range
    one line beyond the top is rejected and touches nothing. Every read and write stays inside
    the matrices (padding rows past M and K, read as zeros, do not leave them either), as a
    shared scratchpad needs."""
    S, depth = 2, 65536
    cfg = ArrayConfig(size=S, mem_depth=depth, dim_bits=5)
    C = G.MatmulCommand
    M, K, N = 3, 5, 4
    la, lb, lc = (G.lines_of(r, c_, S) for r, c_ in ((M, K), (K, N), (M, N)))
    top = dict(base_a=depth - la, base_b=depth - lb, base_c=depth - lc)
    cmds = [
        C(FWD, M, K, N, 4, 6, ROUND_NEAREST, False, **top),
        C(BWD_WEIGHT, M, K, N, 8, 4, ROUND_STOCHASTIC, True, **top),
        C(FWD, M, K, N, 4, 4, ROUND_NEAREST, False, depth - la + 1, top["base_b"],
          top["base_c"]),                                    # A one line beyond the top
        C(BWD_DATA, M, K, N, 2, 8, ROUND_TRUNCATE, True, **top),
    ]
    model = G.MatmulEngineModel(cfg)
    rng = np.random.default_rng(64)
    regions = {"a": (top["base_a"], la), "b": (top["base_b"], lb), "c": (top["base_c"], lc)}
    for k, (base, n) in regions.items():
        model.mem[k][base:base + n] = _rand(rng, (n, S)).view(np.uint32)
    init = {k: model.mem[k][base:base + n].copy() for k, (base, n) in regions.items()}
    expected = [model.run(cmd)[0] for cmd in cmds]
    assert expected == [G.OK, G.OK, G.ERR_ADDR, G.OK]

    dut = MatmulEngine(config=cfg)
    stores, reads = {}, {}
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    for k in ("a", "b", "c"):
        stores[k], reads[k], proc = _line_memory(getattr(dut, k), S)
        sim.add_process(proc)
    box = {}

    async def tb(ctx):
        host = Host(dut, ctx, random.Random(1))
        for k, (base, n) in regions.items():
            await host.write_lines(k, init[k], base=base)
        got = [int((await host.start(cmd)).status) for cmd in cmds]
        box["top_line"] = await host.read_lines("a", 1, base=depth - 1)
        box["got"] = got

    sim.add_testbench(tb)
    t = 0
    while "got" not in box and t < 400_000:
        t += 500
        sim.run_until(t * 1e-6)
    assert box.get("got") == expected
    for k, (base, n) in regions.items():
        assert set(stores[k]) == set(range(base, base + n)), k      # nothing else written
        assert reads[k] <= set(range(base, base + n)), (k, sorted(reads[k]))
        lines = np.array([[(stores[k][a] >> (32 * j)) & 0xFFFFFFFF for j in range(S)]
                          for a in range(base, base + n)], np.uint32)
        np.testing.assert_array_equal(lines, model.mem[k][base:base + n], err_msg=k)
    np.testing.assert_array_equal(box["top_line"][0], model.mem["a"][depth - 1])
