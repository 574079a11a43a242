"""Fast tier: SharedConverter (one FP32 -> BFP converter and statistic for both operand paths,
``ArrayConfig.shared_converter``) in Amaranth's simulator. Each path's groups and statistic are
bit-exact with its own converter's golden model (:class:`sim.model.stats.QuantStatModel` with
``config.bfp(k)``: its own LFSR seed); one path's held output never blocks the other; a group
per cycle in all."""
import random

import numpy as np
import pytest

from hdl.array.config import ArrayConfig
from hdl.array.convpair import SharedConverter
from sim.model import bfp
from sim.model.stats import QuantStatModel, StatState
from sim.tb.amaranth_tb import run_sim

CFG = ArrayConfig(size=4, mem_depth=16, dim_bits=5)
SIDE_BITS = (3, 1)


def _path_load(loads, b, k):
    """Path ``k``'s statistic loaded before batch ``b``: ``loads[b]`` (both paths) or
    ``loads[b][k]`` (a pair), zeros if none."""
    ld = loads.get(b, StatState())
    return ld[k] if isinstance(ld, tuple) else ld


class TB:
    """Driver per input path, monitor per output path, the golden model per path and the
    scoreboard. ``batches[k]``: path ``k``'s requests as ``(values, width, rounding, col,
    side)`` tuples, in batches; ``stat_load`` (zeros, ``loads[b]``, or ``loads[b][k]`` per
    path) is pulsed between batches while both paths are idle."""

    def __init__(self, config=CFG, *, seed=0):
        self.cfg = config
        self.dut = SharedConverter(config=config, side_bits=SIDE_BITS)
        self.rng = random.Random(seed)
        self.got = [[], []]
        self.loaded = 0         # the last batch whose statistic load was sent

    def request(self, k, values, width, rounding, col, side):
        """Path ``k``'s request payload: the words rotated by ``col`` (element ``j`` is word
        ``(j + col) mod S``), as the line quantizer's block columns arrive."""
        S = self.cfg.size
        words = np.asarray(values, np.float32).view(np.uint32)
        data = sum(int(words[(w - col) % S]) << (32 * w) for w in range(S))
        return data, width, rounding, col, side

    @staticmethod
    def drive(ctx, port, req):
        """Put a :meth:`request` on ``port``'s payload."""
        data, width, rounding, col, side = req
        p = port.payload
        ctx.set(p.conv.data.as_value(), data)
        ctx.set(p.conv.width, width)
        ctx.set(p.conv.rounding.as_value(), rounding)
        ctx.set(p.col, col)
        ctx.set(p.side, side)

    def expected(self, batches, loads):
        """Each path's outputs ``(group, invalid, overflow, side, col)`` and its statistic
        after each batch, from its own :class:`QuantStatModel`."""
        outs, stats = [[], []], [[], []]
        for k in range(2):
            bcfg = self.cfg.bfp(k)
            model = QuantStatModel(bcfg)
            gmask = (1 << self.dut.o0.payload.group.shape().size) - 1
            for b, batch in enumerate(batches[k]):
                if b:
                    model.load(_path_load(loads, b, k))
                for values, width, rounding, col, side in batch:
                    out = model.accept(bfp.pack_fp32_group(values, bcfg, width, rounding))
                    f = bfp.unpack_bfp_group(out, bcfg)
                    outs[k].append((out & gmask, f["invalid"], f["overflow"], side, col))
                stats[k].append(model.state)
        return outs, stats

    def run(self, batches, *, loads=None, idle=(0.3, 0.3), stall=(0.3, 0.3), hold0_for=None,
            max_cycles=20_000):
        """Drive both paths; returns each path's outputs and statistics after each batch.
        ``hold0_for``: path 0's output is not read until path 1 has received this many."""
        loads = loads or {}
        dut, rng = self.dut, self.rng
        ins, outs = (dut.i0, dut.i1), (dut.o0, dut.o1)
        n_batches = len(batches[0])
        done = [[False] * n_batches for _ in range(2)]     # a batch's outputs all received
        stats = [[], []]
        counts = [[len(b) for b in batches[k]] for k in range(2)]

        async def driver(ctx, k):
            for b, batch in enumerate(batches[k]):
                if b:       # the load comes between batches, both paths drained
                    while not all(done[j][b - 1] for j in range(2)):
                        await ctx.tick()
                    if k == 0:
                        for j in range(2):
                            ld = _path_load(loads, b, j)
                            ctx.set(dut.stat_in[j], dut.stat_in[j].shape().const(
                                {"exp": ld.exp, "num": ld.num, "den": ld.den,
                                 "seen": int(ld.seen)}))
                        ctx.set(dut.stat_load, 1)
                        await ctx.tick()
                        ctx.set(dut.stat_load, 0)
                        self.loaded = b
                    else:
                        while self.loaded < b:
                            await ctx.tick()
                    # the registered load (cmd_reg) lands a cycle later
                    await ctx.tick().repeat(2)
                for req in batch:
                    while rng.random() < idle[k]:
                        await ctx.tick()
                    ctx.set(ins[k].valid, 1)
                    self.drive(ctx, ins[k], self.request(k, *req))
                    await ctx.tick().until(ins[k].ready)
                    ctx.set(ins[k].valid, 0)

        async def monitor(ctx, k):
            p = outs[k].payload
            for b in range(n_batches):
                for _ in range(counts[k][b]):
                    if k == 0 and hold0_for is not None:
                        while len(self.got[1]) < hold0_for:
                            await ctx.tick()
                    while rng.random() < stall[k]:
                        await ctx.tick()
                    ctx.set(outs[k].ready, 1)
                    g, inv, ovf, side, col = await ctx.tick().sample(
                        p.group, p.invalid, p.overflow, p.side, p.col).until(outs[k].valid)
                    ctx.set(outs[k].ready, 0)
                    self.got[k].append((g.as_value().value, int(inv), int(ovf), int(side),
                                        int(col)))
                await ctx.tick().repeat(dut.stat_latency + 1)
                stats[k].append(StatState.of(ctx.get(dut.stat[k])))
                done[k][b] = True

        def on_path(fn, k):
            async def bench(ctx):
                await fn(ctx, k)
            return bench

        run_sim(dut, *(on_path(fn, k) for fn in (driver, monitor) for k in range(2)),
                max_cycles=max_cycles)
        return self.got, stats


def random_requests(rng, cfg, n, widths, modes, *, special_prob=0.03):
    vals = bfp.random_fp32_groups(rng, n, cfg.size, special_prob=special_prob)
    return [(v, int(rng.choice(widths)), int(rng.choice(modes)), int(rng.integers(cfg.size)),
             int(rng.integers(2 ** 1)))
            for v in vals]


def check(tb, batches, **kw):
    got, stats = tb.run(batches, **kw)
    want, want_stats = tb.expected(batches, kw.get("loads") or {})
    for k in range(2):
        assert len(got[k]) == len(want[k]), f"path {k}: {len(got[k])} of {len(want[k])} groups"
        for n, (g, w) in enumerate(zip(got[k], want[k])):
            assert g == w, f"path {k}, group {n}: got {g}, want {w}"
        assert stats[k] == want_stats[k], f"path {k}: FAST statistic"
    return got, stats


@pytest.mark.parametrize("cmd_reg", [False, True], ids=["plain", "cmd_reg"])
def test_both_paths_bit_exact(cmd_reg):
    """Random groups (many exponents, NaN/Inf, subnormals) on both paths at their own widths
    (path 0 at 2/4, path 1 at 4/6/8), every rounding mode (stochastic: each path's own LFSR),
    random block columns, random idle cycles and backpressure on all four streams, two batches
    with a statistic load between them (a different one per path): every group, flag, side and column and both
    statistics bit-exact with each path's own model."""
    cfg = ArrayConfig(size=4, mem_depth=16, dim_bits=5, cmd_reg=cmd_reg)
    rng = np.random.default_rng(3)
    batches = [[random_requests(rng, cfg, 60, [2, 4], bfp.ROUNDING_MODES) for _ in range(2)],
               [random_requests(rng, cfg, 45, [4, 6, 8], bfp.ROUNDING_MODES)
                for _ in range(2)]]
    for k in range(2):       # side values within the path's field
        batches[k] = [[(v, w, r, c, s & ((1 << SIDE_BITS[k]) - 1)) for v, w, r, c, s in b]
                      for b in batches[k]]
    # a statistic per path, at the largest exponent of the path's second batch (so its
    # groups add to the loaded sums instead of shifting them out)
    def e_max(batch):
        a = np.abs(np.array([v for v, *_ in batch], np.float32))
        return int(np.floor(np.log2(a[np.isfinite(a) & (a != 0)])).max())

    saved = tuple(StatState(exp=e_max(batches[k][1]), num=1000 + 7 * k, den=50_000 - 11 * k,
                            seen=True) for k in range(2))
    _, stats = check(TB(cfg, seed=int(cmd_reg)), batches, loads={1: saved})
    assert all(s.seen and s.den > 0 for s in stats[0])     # the statistic really moved


def test_a_held_output_does_not_block_the_other_path():
    """Path 0's consumer takes nothing until path 1 has received all its groups (a beat needs
    both operands, but a weight tile or a dW row can wait on the other path): path 1 streams
    through, path 0 stops issuing once its FIFO_DEPTH credits are spent (its ``ready`` low,
    nothing dropped), and both end bit-exact."""
    rng = np.random.default_rng(5)
    n0, n1 = 2 * SharedConverter.FIFO_DEPTH + 3, 40
    batches = [[random_requests(rng, CFG, n0, [2], [bfp.ROUND_NEAREST], special_prob=0)],
               [[(v, w, r, c, s & 1) for v, w, r, c, s in
                 random_requests(rng, CFG, n1, [2, 4], bfp.ROUNDING_MODES)]]]
    tb = TB(seed=5)
    check(tb, batches, idle=(0.0, 0.1), stall=(0.0, 0.1), hold0_for=n1)
    assert len(tb.got[1]) == n1 and len(tb.got[0]) == n0


def test_held_path_issues_exactly_its_credits():
    """While path 0's output is held, exactly ``FIFO_DEPTH + 1`` of its requests are taken
    (the FIFO's entries and the output register): one more would overflow the FIFO, one fewer
    would waste an entry."""
    rng = np.random.default_rng(6)
    reqs = random_requests(rng, CFG, SharedConverter.FIFO_DEPTH + 5, [2], [0], special_prob=0)
    tb = TB(seed=6)
    dut = tb.dut
    taken = []

    async def bench(ctx):
        for n, req in enumerate(reqs):
            ctx.set(dut.i0.valid, 1)
            tb.drive(ctx, dut.i0, tb.request(0, *req[:4], 0))
            for _ in range(60):
                _, _, ready = await ctx.tick().sample(dut.i0.ready)
                if ready:
                    taken.append(n)
                    break
            else:
                break
        ctx.set(dut.i0.valid, 0)
        await ctx.tick().repeat(10)
        assert ctx.get(dut.o0.valid) and ctx.get(dut.busy) == 0b01
        ctx.set(dut.o0.ready, 1)            # release: every group taken comes out
        for _ in range(3 * SharedConverter.FIFO_DEPTH):
            _, _, valid = await ctx.tick().sample(dut.o0.valid)
            delivered.append(valid)

    delivered = []
    run_sim(dut, bench, max_cycles=5_000)
    assert len(taken) == SharedConverter.FIFO_DEPTH + 1
    assert sum(delivered) == len(taken)


@pytest.mark.parametrize("paths", [(0,), (1,), (0, 1)], ids=["path0", "path1", "both"])
def test_a_group_per_cycle(paths):
    """Requests offered every cycle and outputs always read: one path alone gets a group per
    cycle, both together alternate (round robin) at a group per two cycles each; the last
    group leaves ``latency + 2`` cycles after the last request (``SharedConverter.latency``,
    then the FIFO and the output register)."""
    n = 24
    rng = np.random.default_rng(7)
    reqs = random_requests(rng, CFG, n, [2], [0], special_prob=0)
    tb = TB(seed=7)
    dut = tb.dut
    log = {"in": [], "out": []}

    async def bench(ctx):
        left = {k: n for k in paths}
        ctx.set(dut.o0.ready, 1)
        ctx.set(dut.o1.ready, 1)
        got = 0
        for cyc in range(4 * n + 40):
            for k in (0, 1):
                port = (dut.i0, dut.i1)[k]
                ctx.set(port.valid, left.get(k, 0) > 0)
                if left.get(k, 0):
                    tb.drive(ctx, port, tb.request(k, *reqs[n - left[k]][:4], 0))
            sampled = await ctx.tick().sample(dut.i0.valid, dut.i0.ready, dut.i1.valid,
                                              dut.i1.ready, dut.o0.valid, dut.o1.valid)
            v0, r0, v1, r1, ov0, ov1 = sampled[2:]
            for k, (v, r) in enumerate(((v0, r0), (v1, r1))):
                if v and r:
                    left[k] -= 1
                    log["in"].append((cyc, k))
            for k, ov in enumerate((ov0, ov1)):
                if ov:
                    log["out"].append((cyc, k))
            if len(log["out"]) == n * len(paths):
                break

    run_sim(dut, bench, max_cycles=5_000)
    ins = log["in"]
    total = n * len(paths)
    assert len(ins) == total and len(log["out"]) == total
    assert [c for c, _ in ins] == list(range(total)), "a request every cycle"
    if len(paths) == 2:
        assert [k for _, k in ins] == [j % 2 for j in range(total)], "round robin"
    assert log["out"][-1][0] - ins[-1][0] == dut.latency + 2


def test_config_type():
    with pytest.raises(TypeError, match="SharedConverter.config"):
        SharedConverter(config=CFG.bfp(0), side_bits=SIDE_BITS)
