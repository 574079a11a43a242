"""cocotb testbench of the generated ``matmul_engine`` (Verilator tier) and the array benchmark.

The host side only loads scratchpads, sends ``START`` and waits for its response (Python never
drives the array). ``TB`` = command driver + response monitor (random idle cycles and
backpressure) + :class:`sim.model.array.MatmulEngineModel` (golden) + scoreboard. Payloads are
packed with the hardware's layouts (:func:`hdl.array.control.cmd_layout`, ``rsp_layout``,
``counters_layout``) through :mod:`sim.tb.payload`.
"""
from __future__ import annotations

import json
import os
import random
import time

import cocotb
import numpy as np
import pytest
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from hdl.array.config import BWD_DATA, BWD_WEIGHT, FWD, MODE_NAMES, ArrayConfig
from hdl.array.control import (MEM_A, MEM_B, MEM_C, OP_READ, OP_START, OP_WRITE, cmd_layout,
                               counters_layout, rsp_layout)
from hdl.bfp.stat import stat_layout
from sim.model import array as G
from sim.model.bfp import ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE
from sim.model.stats import StatState
from sim.tb import cycles as cycles_doc
from sim.tb.cocotb_stream import (WAIT_CYCLES, StreamDriver, StreamMonitor, reset, start_clock,
                                  wait_trigger)
from sim.tb.matmul_cmds import rand_matrix, random_command, start_fields
from sim.tb.payload import pack, unpack

MEMS = {"a": MEM_A, "b": MEM_B, "c": MEM_C}
COUNTERS_LAYOUT = counters_layout()


def config() -> ArrayConfig:
    return ArrayConfig.preset(os.environ.get("TESSERA_PRESET", "tiny"))


class TB:
    """Host driver (``cmd``), response monitor (``rsp``), golden model, scoreboard."""

    def __init__(self, dut, *, seed=1, idle=0.0, stall=0.0):
        self.dut = dut
        self.cfg = config()
        self.cmd_layout = cmd_layout(self.cfg)
        self.rsp_layout = rsp_layout(self.cfg)
        self.drv = StreamDriver(dut, "cmd", idle_prob=idle, rng=random.Random(seed))
        self.mon = StreamMonitor(dut, "rsp", stall_prob=stall, rng=random.Random(seed + 1))
        self.model = G.MatmulEngineModel(self.cfg)

    async def start(self):
        start_clock(self.dut)
        await reset(self.dut)
        self.mon.start()

    async def command(self, timeout=500_000, **fields) -> dict:
        await self.drv.send(pack(self.cmd_layout, fields))
        word, = await self.mon.wait_for(1, timeout_cycles=timeout)
        return unpack(self.rsp_layout, word)

    async def command_quiet(self, timeout=500_000, **fields) -> dict:
        """A command whose response is awaited without waking Python every cycle (the monitor
        is paused; we wait for ``rsp__valid`` to rise), so Verilator runs free during a pass;
        TimeoutError after ``timeout`` cycles."""
        dut = self.dut
        await self.drv.send(pack(self.cmd_layout, fields))
        self.mon.stop()
        dut.rsp__ready.value = 1
        await ReadOnly()
        if not dut.rsp__valid.value:
            await wait_trigger(RisingEdge(dut.rsp__valid), f"response to {fields}", timeout)
            await ReadOnly()
        word = dut.rsp__payload.value.to_unsigned()
        await RisingEdge(dut.clk)                     # the transfer happens at this edge
        dut.rsp__ready.value = 0
        self.mon.start()
        return unpack(self.rsp_layout, word)

    async def write_line(self, mem, addr, words):
        line = sum(int(w) << (32 * i) for i, w in enumerate(words))
        r = await self.command(op=OP_WRITE, mem=MEMS[mem], addr=addr, data=line)
        assert r["status"] == G.OK, r

    async def read_line(self, mem, addr):
        r = await self.command(op=OP_READ, mem=MEMS[mem], addr=addr)
        assert r["status"] == G.OK, r
        return [(r["data"] >> (32 * i)) & 0xFFFFFFFF for i in range(self.cfg.size)]

    async def load_all(self, rng):
        """Random FP32 contents in every line of A, B and C (model and DUT)."""
        for k in ("a", "b", "c"):
            words = rand_matrix(rng, (self.cfg.mem_depth, self.cfg.size)).view(np.uint32)
            self.model.mem[k][:] = words
            for addr in range(self.cfg.mem_depth):
                await self.write_line(k, addr, words[addr])

    async def load_matrix(self, mem, base, value):
        self.model.set_matrix(mem, base, value)
        n = G.lines_of(*value.shape, self.cfg.size)
        for addr in range(base, base + n):
            await self.write_line(mem, addr, self.model.mem[mem][addr])

    async def read_region(self, mem, base, n):
        return np.array([await self.read_line(mem, a) for a in range(base, base + n)],
                        np.uint32).reshape(n, self.cfg.size)

    async def read_matrix(self, mem, base, rows, cols) -> np.ndarray:
        """A ``rows x cols`` FP32 matrix read back from the DUT's scratchpad ``mem``."""
        n = G.lines_of(rows, cols, self.cfg.size)
        lines = await self.read_region(mem, base, n)
        return lines.reshape(rows, -1)[:, :cols].view(np.float32).copy()

    def counters(self) -> dict:
        return unpack(COUNTERS_LAYOUT, self.dut.counters.value.to_unsigned())

    async def run(self, cmd: G.MatmulCommand, *, check=True):
        """START ``cmd`` on DUT and model; check status, flags, counters and the output region."""
        status, res = self.model.run(cmd)
        t0 = time.perf_counter()
        send = self.command if self.mon.stall_prob else self.command_quiet
        r = await send(**start_fields(cmd))
        self.last_wall = time.perf_counter() - t0     # wall time of the pass alone
        if status != G.OK:
            assert r["status"] == status, f"{cmd}: status {r['status']}, expected {status}"
            return r, None
        cnt = self.counters()
        self.check_pass(cmd, status, res, r, cnt)
        assert cnt["interval"] == cnt["cycles"], cnt          # nothing overlapped it
        self.check_stats(cmd)
        if check:
            await self.check_output(cmd)
        return r, cnt

    def check_stats(self, cmd):
        """The two converters' FAST statistics (accumulated from reset) equal the model's."""
        layout = stat_layout(self.cfg.bfp(0))
        for i in range(2):
            got = StatState.of(layout.from_bits(getattr(self.dut, f"stat__{i}").value
                                                .to_unsigned()))
            assert got == self.model.stats[i].state, \
                f"{cmd}: statistic {i}: RTL {got} != model {self.model.stats[i].state}"

    def check_pass(self, cmd, status, res, r, cnt):
        """Status, flags and counters of one START's response against the model."""
        assert r["op"] == OP_START, r
        assert r["status"] == status, f"{cmd}: status {r['status']}, expected {status}"
        if status != G.OK:
            return
        S = self.cfg.size
        assert cnt["macs"] == cmd.M * cmd.K * cmd.N, cnt
        assert cnt["beats"] == G.pass_beats(cmd.mode, cmd.M, cmd.K, cmd.N, S), (cmd, cnt)
        B = self.cfg.beat_cycles(cmd.width_a, cmd.width_b)
        assert cnt["stalls"] == cnt["cycles"] - cnt["beats"] * B, cnt
        assert cnt["interval"] <= cnt["cycles"], cnt
        assert (r["invalid"], r["overflow"]) == (int(res.invalid), int(res.overflow)), (cmd, r)

    async def check_output(self, cmd):
        """The pass's output region on the DUT equals the model's (now)."""
        S = self.cfg.size
        mem, base, rows, cols = {FWD: ("c", cmd.base_c, cmd.M, cmd.N),
                                 BWD_DATA: ("a", cmd.base_a, cmd.M, cmd.K),
                                 BWD_WEIGHT: ("b", cmd.base_b, cmd.K, cmd.N)}[cmd.mode]
        n = G.lines_of(rows, cols, S)
        got = await self.read_region(mem, base, n)
        want = self.model.mem[mem][base:base + n]
        if not (got == want).all():
            bad = np.argwhere(got != want)[:4]
            raise AssertionError(f"{cmd}: output mismatch at lines/lanes {bad.tolist()}: "
                                 f"got {got[tuple(bad[0])]:#x}, want {want[tuple(bad[0])]:#x}")

    async def run_stream(self, cmds, timeout=WAIT_CYCLES):
        """Send the STARTs ``cmds`` back to back (the engine takes one while a pass runs and
        overlaps it when the settings match) while collecting the responses with the counters
        of each; every response is checked against the model run one pass after the other.
        Returns the counters per pass."""
        dut = self.dut
        expected = [self.model.run(cmd) for cmd in cmds]
        sender = cocotb.start_soon(self.drv.send_all(
            [pack(self.cmd_layout, start_fields(cmd)) for cmd in cmds]))
        self.mon.stop()
        rng, stall = self.mon.rng, self.mon.stall_prob
        got = []
        t0 = time.perf_counter()
        for _ in range(timeout):
            if len(got) == len(cmds):
                break
            dut.rsp__ready.value = int(not (stall and rng.random() < stall))
            await ReadOnly()
            if dut.rsp__valid.value == 1 and dut.rsp__ready.value == 1:
                got.append((unpack(self.rsp_layout, dut.rsp__payload.value.to_unsigned()),
                            self.counters()))
            await RisingEdge(dut.clk)
        else:
            raise TimeoutError(f"run_stream: {len(got)} of {len(cmds)} responses within "
                               f"{timeout} cycles (deadline)")
        self.last_wall = time.perf_counter() - t0
        dut.rsp__ready.value = 0
        await sender
        self.mon.start()
        prev = None
        for cmd, (status, res), (r, cnt) in zip(cmds, expected, got):
            self.check_pass(cmd, status, res, r, cnt)
            if prev is not None and status == G.OK and cnt["interval"] < cnt["cycles"]:
                # an overlapping pass started after its predecessor (counter restarts per pass)
                assert cnt["cycles"] <= prev["cycles"] + cnt["interval"], (cmd, prev, cnt)
            prev = cnt if status == G.OK else None
        return [cnt for _, cnt in got]

    async def check_all_memories(self):
        for k in ("a", "b", "c"):
            got = await self.read_region(k, 0, self.cfg.mem_depth)
            assert (got == self.model.mem[k]).all(), f"scratchpad {k} differs from the model"


@cocotb.test()
async def named_shapes_every_mode(dut):
    """1x1x1, K < S, multiples and non-multiples of S; every mode, width pair corners,
    every rounding mode, accumulate on/off."""
    tb = TB(dut, seed=2, idle=0.2, stall=0.2)
    await tb.start()
    rng = np.random.default_rng(1)
    await tb.load_all(rng)
    S = tb.cfg.size
    shapes = [(1, 1, 1), (S, S, S), (3, S - 1, 2), (S + 1, 2 * S + 1, S - 1), (2 * S, 1, S + 2)]
    i = 0
    for mode in (FWD, BWD_DATA, BWD_WEIGHT):
        for M, K, N in shapes:
            wa, wb = [(2, 2), (8, 8), (2, 8), (8, 4), (6, 2)][i % 5]
            rnd = [ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE][i % 3]
            await tb.run(G.MatmulCommand(mode, M, K, N, wa, wb, rnd, bool(i % 2),
                                         base_a=i % 3, base_b=(5 * i) % 7, base_c=i % 5))
            i += 1
    await tb.check_all_memories()


@cocotb.test()
async def random_passes(dut):
    """Random modes, shapes, widths, roundings, addresses, accumulate; random idle cycles and
    backpressure on the host streams; every scratchpad compared at the end."""
    tb = TB(dut, seed=3, idle=0.3, stall=0.3)
    await tb.start()
    rng = np.random.default_rng(int(os.environ.get("TB_SEED", "2")))
    await tb.load_all(rng)
    for i in range(int(os.environ.get("TB_PASSES", "24"))):
        cmd = random_command(rng, tb.cfg)
        dut._log.info(f"pass {i}: {cmd}")
        await tb.run(cmd)
    await tb.check_all_memories()


@cocotb.test()
async def every_width_pair(dut):
    """Each (width_a, width_b) of the config's widths in each mode, one short pass each (shape
    S x S+1 x S-1, so the last tile is ragged), rounding cycling through the three modes and
    accumulate alternating; idle cycles and backpressure on the host streams; every
    scratchpad compared at the end. The fMACs' chunk-count tables have an arm per pair, and
    the S = 8 engine's random passes reach only a few pairs (``make coverage``)."""
    tb = TB(dut, seed=21, idle=0.1, stall=0.1)
    await tb.start()
    rng = np.random.default_rng(21)
    await tb.load_all(rng)
    S = tb.cfg.size
    roundings = (ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE)
    i = 0
    for mode in (FWD, BWD_DATA, BWD_WEIGHT):
        for wa in tb.cfg.widths:
            for wb in tb.cfg.widths:
                await tb.run(G.MatmulCommand(mode, S, S + 1, S - 1, wa, wb, roundings[i % 3],
                                             bool(i % 2), base_a=i % 4, base_b=(3 * i) % 5,
                                             base_c=(5 * i) % 6))
                i += 1
    assert i == 3 * len(tb.cfg.widths) ** 2
    await tb.check_all_memories()


@cocotb.test()
async def back_to_back_passes(dut):
    """Random STARTs sent without waiting for responses, in runs that share mode, widths and
    rounding (those overlap the previous pass) and runs that change them (those wait); random
    shapes, addresses and accumulate, so later passes read and accumulate into lines earlier
    ones are still writing. Every response, flag and counter checked; every scratchpad
    compared at the end; backpressure on the responses."""
    tb = TB(dut, seed=8, stall=0.3)
    await tb.start()
    rng = np.random.default_rng(int(os.environ.get("TB_SEED", "8")))
    await tb.load_all(rng)
    cmds = []
    for _ in range(int(os.environ.get("TB_RUNS", "6"))):
        first = random_command(rng, tb.cfg, max_dim=2 * tb.cfg.size)
        cmds.append(first)
        for _ in range(int(rng.integers(1, 4))):
            nxt = random_command(rng, tb.cfg, mode=first.mode, max_dim=2 * tb.cfg.size)
            cmds.append(G.MatmulCommand(first.mode, nxt.M, nxt.K, nxt.N, first.width_a,
                                        first.width_b, first.rounding, nxt.accumulate,
                                        nxt.base_a, nxt.base_b, nxt.base_c))
    counters = await tb.run_stream(cmds)
    overlapped = [i for i, c in enumerate(counters) if c["interval"] < c["cycles"]]
    same = [i for i in range(1, len(cmds))
            if (cmds[i].mode, cmds[i].width_a, cmds[i].width_b, cmds[i].rounding)
            == (cmds[i - 1].mode, cmds[i - 1].width_a, cmds[i - 1].width_b,
                cmds[i - 1].rounding)]
    dut._log.info(f"{len(cmds)} passes, overlapped: {overlapped}")
    assert overlapped == same, (overlapped, same)
    await tb.check_all_memories()


@cocotb.test()
async def bwd_data_uses_fwd_weight_image(dut):
    """FWD then BWD_DATA with the same W: the W scratchpad image is byte-for-byte what FWD used
    (read back before and after), and the DUT's BWD_DATA result (read back) equals the golden
    dY . W^T computed directly from the matrices, bit for bit."""
    tb = TB(dut, seed=4)
    await tb.start()
    rng = np.random.default_rng(4)
    S = tb.cfg.size
    M, K, N = 2 * S + 1, 2 * S - 1, S + 3
    W = rand_matrix(rng, (K, N))
    X = rand_matrix(rng, (M, K))
    await tb.load_matrix("b", 0, W)
    await tb.load_matrix("a", 0, X)
    nb = G.lines_of(K, N, S)
    w_image = await tb.read_region("b", 0, nb)
    await tb.run(G.MatmulCommand(FWD, M, K, N, 8, 8, ROUND_NEAREST, False, 0, 0, 0))
    assert (await tb.read_region("b", 0, nb) == w_image).all()
    dY = rand_matrix(rng, (M, N))
    await tb.load_matrix("c", 0, dY)
    await tb.run(G.MatmulCommand(BWD_DATA, M, K, N, 8, 8, ROUND_NEAREST, False, 0, 0, 0))
    assert (await tb.read_region("b", 0, nb) == w_image).all()
    got = await tb.read_matrix("a", 0, M, K)                 # the DUT's dX, read back
    direct = G.matmul_pass(BWD_DATA, np.zeros((M, K), np.float32), W, dY, tb.cfg, width_a=8,
                           width_b=8, lfsrs=None).out
    assert (got.view(np.uint32) == direct.view(np.uint32)).all()
    ref = dY.astype(np.float64) @ W.astype(np.float64).T
    err = np.abs(got - ref).max() / np.abs(ref).max()
    dut._log.info(f"BWD_DATA vs float64 dY.W^T: max error {err:.2e} of max |dX|")
    assert err < 0.05


@cocotb.test()
async def pass_cycles_documented(dut):
    """Cycle counts against docs/array.md's formulas (:mod:`sim.tb.cycles`), in every mode at
    widths 2, 4 and 8 (B = 1, 4, 16), square passes of 4S per side on an idle engine: the first
    pass takes exactly ``(beats + 2S)*B + 2S + 26`` cycles (its beats, the array's fill and
    drain and the fixed front and back end); the next two, sent back to back, each add
    ``beats*B`` cycles, exactly at 4- and 8-bit beats and at most two more at 2-bit beats (the
    page says about 1 cycle per pass; measured 0 to 2). One bubble per beat, or per tile,
    fails."""
    tb = TB(dut, seed=12)
    await tb.start()
    cfg, S = tb.cfg, tb.cfg.size
    rng = np.random.default_rng(12)
    D = 4 * S
    for mem in ("a", "b", "c"):
        await tb.load_matrix(mem, 0, rand_matrix(rng, (D, D), 2))
    for mode in (FWD, BWD_DATA, BWD_WEIGHT):
        for w in (2, 4, 8):
            cmd = G.MatmulCommand(mode, D, D, D, w, w, ROUND_NEAREST, False, 0, 0, 0)
            cnts = await tb.run_stream([cmd] * 3)
            B = cycles_doc.beat_cycles(w, w, cfg.lanes)
            beats = G.pass_beats(mode, D, D, D, S)
            want = cycles_doc.matmul_pass_cycles(S, beats, B)
            assert cnts[0]["cycles"] == cnts[0]["interval"] == want, (mode, w, cnts[0], want)
            # exact at 4- and 8-bit beats; at 2-bit beats docs/array.md says about 1 cycle per
            # pass is left: measured 0 to 2 (BWD_WEIGHT's second pass adds 258 for 256 beats)
            for c in cnts[1:]:
                assert beats * B <= c["interval"] <= beats * B + 2 * int(B == 1), \
                    (mode, w, c, beats * B)
            dut._log.info(f"mode {mode} width {w}: {want} cycles single, "
                          f"{[c['interval'] for c in cnts[1:]]} back to back (counter cycles "
                          f"{[c['cycles'] for c in cnts]})")
    await tb.check_output(cmd)


@cocotb.test()
async def reset_mid_operation(dut):
    """Reset during a pass (twice: once with one pass running, once with two overlapping
    passes and a third command pending), each followed by correct runs (memories reloaded;
    LFSRs restart)."""
    tb = TB(dut, seed=5)
    await tb.start()
    rng = np.random.default_rng(5)
    S = tb.cfg.size
    for n_cmds, w in ((1, 8), (3, 2)):
        await tb.load_all(rng)
        cmd = G.MatmulCommand(FWD, 3 * S, 2 * S, 2 * S, w, w, ROUND_STOCHASTIC, True, 0, 0, 0)
        sent0 = tb.drv.sent
        sender = cocotb.start_soon(tb.drv.send_all([pack(tb.cmd_layout, start_fields(cmd))]
                                                   * n_cmds))
        if n_cmds == 1:
            await ClockCycles(dut.clk, 200)
        else:       # after the first response: the second pass runs, the third is taken
            await tb.mon.wait_for(1)
            await ClockCycles(dut.clk, 4)
            assert tb.drv.sent == sent0 + 3          # all taken: one of them is pending
        assert dut.busy.value == 1
        sender.cancel()
        tb.drv.valid.value = 0
        await reset(dut)
        await RisingEdge(dut.clk)
        assert dut.busy.value == 0
        tb.mon.queue.clear()
        tb.model.reset()
        await tb.load_all(rng)
        for mode in (FWD, BWD_DATA, BWD_WEIGHT):
            await tb.run(G.MatmulCommand(mode, S + 2, S + 1, 2 * S, 4, 8, ROUND_STOCHASTIC,
                                         True))
        await tb.run_stream([G.MatmulCommand(BWD_WEIGHT, 2 * S, S + 3, S, 2, 2, ROUND_STOCHASTIC,
                                             True, 1, 2, 3)] * 3)
        await tb.check_all_memories()


@cocotb.test()
async def invalid_commands(dut):
    """Invalid mode/shape/width/rounding/address: error status, nothing written."""
    tb = TB(dut, seed=6, idle=0.2, stall=0.2)
    await tb.start()
    rng = np.random.default_rng(6)
    await tb.load_all(rng)
    depth, S = tb.cfg.mem_depth, tb.cfg.size
    bad = [G.MatmulCommand(3, 1, 1, 1), G.MatmulCommand(FWD, 0, 4, 4),
           G.MatmulCommand(FWD, 4, 0, 4), G.MatmulCommand(BWD_DATA, 4, 4, 0),
           G.MatmulCommand(FWD, 2, 2, 2, width_a=5), G.MatmulCommand(FWD, 2, 2, 2, width_b=0),
           G.MatmulCommand(FWD, 2, 2, 2, width_a=10), G.MatmulCommand(FWD, 2, 2, 2, rounding=3),
           G.MatmulCommand(FWD, S, S, S, base_c=depth - 1),
           G.MatmulCommand(BWD_WEIGHT, S, S, S, base_b=depth),
           G.MatmulCommand(BWD_DATA, 2 * S, S, S, base_a=depth - 1)]
    for cmd in bad:
        r, _ = await tb.run(cmd)
        assert r["status"] != G.OK
    r = await tb.command(op=OP_WRITE, mem=3, addr=0, data=1)
    assert r["status"] == G.ERR_ADDR
    r = await tb.command(op=OP_WRITE, mem=0, addr=depth, data=1)
    assert r["status"] == G.ERR_ADDR
    await tb.check_all_memories()


# ---- benchmark (sim/bench/array.py runs this with TESSERA_BENCH_OUT set) ---------------------

@cocotb.test(skip=not os.environ.get("TESSERA_BENCH_OUT"))
async def bench(dut):
    """Every mode x all dims (1, 2, 4, 8) x S x widths 2/4/8 (square widths): each point runs
    ``TESSERA_BENCH_REPEAT`` (3) identical passes back to back; the first pass gives the
    isolated figures (``cycles`` = its latency, nothing before it), the last one the
    streaming figures (``interval``: cycles it adds to a sequence of passes). Results appended
    as JSON lines to ``TESSERA_BENCH_OUT``; skipped (not passed) when it is unset."""
    out = os.environ.get("TESSERA_BENCH_OUT")
    if not out:     # cocotb runs a test selected by name even with skip=True: skip it here too
        pytest.skip("TESSERA_BENCH_OUT is unset (the benchmark runs through make bench-array)")
    tb = TB(dut, seed=7)
    await tb.start()
    cfg, S = tb.cfg, tb.cfg.size
    rng = np.random.default_rng(7)
    scales = [int(x) for x in os.environ.get("TESSERA_BENCH_SCALES", "1,2,4,8").split(",")]
    widths = [int(x) for x in os.environ.get("TESSERA_BENCH_WIDTHS", "2,4,8").split(",")]
    repeat = int(os.environ.get("TESSERA_BENCH_REPEAT", "3"))
    rows = []
    for scale in scales:
        D = scale * S
        X, W, Y = rand_matrix(rng, (D, D), 2), rand_matrix(rng, (D, D), 2), \
            rand_matrix(rng, (D, D), 2)
        await tb.load_matrix("a", 0, X)
        await tb.load_matrix("b", 0, W)
        await tb.load_matrix("c", 0, Y)
        for mode in (FWD, BWD_DATA, BWD_WEIGHT):
            for w in widths:
                cmd = G.MatmulCommand(mode, D, D, D, w, w, ROUND_NEAREST, False, 0, 0, 0)
                cnts = await tb.run_stream([cmd] * repeat)
                if scale <= 2:
                    await tb.check_output(cmd)
                first, last = cnts[0], cnts[-1]
                assert first["interval"] == first["cycles"]
                wall = tb.last_wall
                B = cfg.beat_cycles(w, w)
                total = sum(c["interval"] for c in cnts)
                rows.append({
                    "size": S, "mode": MODE_NAMES[mode], "M": D, "K": D, "N": D,
                    "width": w, "beat_cycles": B, "cycles": first["cycles"],
                    "beats": first["beats"], "stalls": first["stalls"], "macs": first["macs"],
                    "utilization": round(first["macs"] / (S * S * first["cycles"] / B), 4),
                    "macs_per_cycle": round(first["macs"] / first["cycles"], 3),
                    "repeat": repeat, "stream_interval": last["interval"],
                    "stream_utilization": round(last["macs"] / (S * S * last["interval"] / B),
                                                4),
                    "stream_macs_per_cycle": round(last["macs"] / last["interval"], 3),
                    "sim_cycles_per_s": round(total / wall),
                })
                dut._log.info(json.dumps(rows[-1]))
    with open(out, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
