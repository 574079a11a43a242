"""Fast tier: QuantStat (BFP converter + FAST statistic) in Amaranth's simulator, against
sim.model.stats (bit-exact), preset tiny (group_size 4)."""
import random

import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from hdl.bfp.stat import QuantStat
from hdl.config import BFPConfig
from sim.model import bfp
from sim.model.stats import QuantStatModel, StatState, group_terms, ratio, stat_update

TINY = BFPConfig.preset("tiny")


def run(dut, batches, *, loads=None, seed=0, idle=0.2, stall=0.2, max_cycles=20_000):
    """Stream each batch of input words through ``dut``; ``stat_load`` is pulsed before every
    batch after the first (while idle) with ``loads[b]`` (a :class:`StatState`, zeros by
    default). Returns ``(outputs, [stat after each batch])``."""
    top = Module()
    top.domains.sync = ClockDomain("sync")
    top.submodules.dut = dut
    rng = random.Random(seed)
    res = {"out": [], "stats": []}
    ipay, opay = dut.i.payload.as_value(), dut.o.payload.as_value()

    async def tb(ctx):
        cycles = 0
        for b, words in enumerate(batches):
            if b:
                ld = (loads or {}).get(b, StatState())
                ctx.set(dut.stat_in, dut.stat_in.shape().const(
                    {"exp": ld.exp, "num": ld.num, "den": ld.den, "seen": int(ld.seen)}))
                ctx.set(dut.stat_load, 1)
                await ctx.tick()
                ctx.set(dut.stat_load, 0)
            sent = got = 0
            while got < len(words):
                cycles += 1
                assert cycles < max_cycles, "deadline: outputs missing"
                v = sent < len(words) and rng.random() >= idle
                ctx.set(dut.i.valid, v)
                if v:
                    ctx.set(ipay, words[sent])
                r = rng.random() >= stall
                ctx.set(dut.o.ready, r)
                _, _, i_ready, o_valid, o_payload = await ctx.tick().sample(
                    dut.i.ready, dut.o.valid, opay)
                if v and i_ready:
                    sent += 1
                if r and o_valid:
                    res["out"].append(int(o_payload))
                    got += 1
            ctx.set(dut.i.valid, 0)
            ctx.set(dut.o.ready, 0)
            await ctx.tick().repeat(dut.stat_latency)
            res["stats"].append(StatState.of(ctx.get(dut.stat)))

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return res["out"], res["stats"]


def expected(config, batches, stat_bits, loads=None):
    model = QuantStatModel(config, stat_bits=stat_bits)
    outs, stats = [], []
    for b, words in enumerate(batches):
        if b:
            model.load((loads or {}).get(b, StatState()))
        outs += [model.accept(w) for w in words]
        stats.append(model.state)
    return outs, stats


def words_for(rng, config, n, widths, modes, *, special_prob=0.02, gaussian=False):
    if gaussian:
        vals = rng.standard_normal((n, config.group_size)).astype(np.float32)
        vals *= np.float32(2.0) ** rng.integers(-6, 6, (n, 1)).astype(np.float32)
    else:
        vals = bfp.random_fp32_groups(rng, n, config.group_size, special_prob=special_prob)
    return [bfp.pack_fp32_group(v, config, int(rng.choice(widths)), int(rng.choice(modes)))
            for v in vals]


def check(config, batches, *, stat_bits=32, seed=0, loads=None):
    dut = QuantStat(config=config, stat_bits=stat_bits)
    got, got_stats = run(dut, batches, seed=seed, loads=loads)
    want, want_stats = expected(config, batches, stat_bits, loads)
    assert got == want
    assert got_stats == want_stats
    return got_stats


@pytest.mark.parametrize("width", TINY.widths)
def test_every_width_every_mode(width):
    """Random groups (many exponents, NaN/Inf, zeros) and gaussian ones at one width, all
    rounding modes mixed: the outputs and the statistic bit-exact with the model; no statistic
    at the top width."""
    rng = np.random.default_rng(100 + width)
    batches = [words_for(rng, TINY, 60, [width], bfp.ROUNDING_MODES),
               words_for(rng, TINY, 60, [width], bfp.ROUNDING_MODES, gaussian=True)]
    stats = check(TINY, batches, seed=width)
    for s in stats:
        if width == TINY.max_mantissa:
            assert s == StatState()
        else:
            assert s.seen and s.den > 0


def test_mixed_widths_and_illegal_codes():
    """Width codes 0..15 mixed in one tensor (decoded like the converter)."""
    rng = np.random.default_rng(7)
    check(TINY, [words_for(rng, TINY, 80, list(range(16)), bfp.ROUNDING_MODES)], seed=7)


def test_clear_between_tensors():
    """``stat_load`` empties the accumulator: each batch's statistic is its own."""
    rng = np.random.default_rng(8)
    batches = [words_for(rng, TINY, 20, [2, 4], [bfp.ROUND_NEAREST], gaussian=True)
               for _ in range(3)]
    stats = check(TINY, batches, seed=8)
    assert len(set(stats)) == 3


def test_load_continues_a_saved_statistic():
    """Loading a saved statistic and streaming more groups equals one long stream (how the
    core keeps one statistic per layer across passes)."""
    rng = np.random.default_rng(13)
    a, b = (words_for(rng, TINY, 30, [2, 4, 6], [bfp.ROUND_NEAREST], gaussian=True)
            for _ in range(2))
    (whole,) = expected(TINY, [a + b], 32)[1]
    saved = expected(TINY, [a], 32)[1][0]
    stats = check(TINY, [b, b], loads={1: saved}, seed=13)
    assert stats[1] == whole != saved


def test_renormalisation():
    """With 12-bit ``num``/``den`` the sums overflow and are renormalised (exp grows)."""
    rng = np.random.default_rng(9)
    vals = (rng.uniform(1.0, 1.9, (40, TINY.group_size)).astype(np.float32)
            * rng.choice(np.float32([-1, 1]), (40, TINY.group_size)))
    words = [bfp.pack_fp32_group(v, TINY, 2, bfp.ROUND_STOCHASTIC) for v in vals]
    (s,) = check(TINY, [words], stat_bits=TINY.max_mantissa + 4, seed=9)
    q = QuantStatModel(TINY, stat_bits=TINY.max_mantissa + 4)
    exps = [bfp.unpack_bfp_group(q.accept(w), TINY)["exp"] for w in words]
    assert s.exp > max(exps)


def test_default_preset_group16():
    """Group size 16 (default preset), fewer groups."""
    cfg = BFPConfig.preset("default")
    rng = np.random.default_rng(10)
    check(cfg, [words_for(rng, cfg, 24, list(cfg.widths), bfp.ROUNDING_MODES, gaussian=True)])


def test_ratio_falls_with_width():
    """On gaussian data r(m) falls about 4x per 2 bits (a property of the statistic itself,
    model only)."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((400, TINY.group_size)).astype(np.float32)
    r = []
    for w in (2, 4, 6):
        model = QuantStatModel(TINY)
        for v in x:
            model.accept(bfp.pack_fp32_group(v, TINY, w, bfp.ROUND_NEAREST))
        r.append(ratio(model.state))
    assert r[0] > 2 * r[1] > 4 * r[2] > 0


def test_update_rule_against_fractions():
    """The accumulator against exact rational sums: with no truncation (equal exponents) it is
    exact; with mixed exponents num/den stays within the truncation bound."""
    rng = np.random.default_rng(12)
    s = StatState()
    tot_d = tot_n = 0
    for _ in range(200):
        D, N = int(rng.integers(0, 48)), int(rng.integers(1, 1 << 10))
        s = stat_update(s, 3, D, N)
        tot_d, tot_n = tot_d + D, tot_n + N
    assert (s.exp, s.num, s.den) == (3, tot_d, tot_n)
    assert group_terms([3, 2, 0, 1], [12, 9, 1, 3], 2, 8) == ((0 + 1 + 1 + 1) << 4, 6 << 6)


def test_invalid_stat_bits():
    with pytest.raises(ValueError, match="stat_bits"):
        QuantStat(config=TINY, stat_bits=8)
    with pytest.raises(TypeError, match="config"):
        QuantStat(config=None)


def test_group_residual_sum_of_four_per_element():
    """Named edge case: a truncated (or stochastic) element can be 4 away from the m + 2
    value (x' = 2.9 at m = 2: M = 2, H = 12), so a group's sum of |H - 4M| reaches 4 G. The
    group sum was sized for 3 G and wrapped to 0 here (num = 0 against the model's 256)."""
    x = np.full(TINY.group_size, 2.9 * 2.0 ** -1, np.float32)
    w = bfp.pack_fp32_group(x, TINY, 2, bfp.ROUND_TRUNCATE)
    stats = check(TINY, [[w]])
    assert stats[-1].num != 0


def test_winning_and_renormalising_back_to_back():
    """Named edge case, 12-bit sums, groups back to back: each group's exponent is the
    accumulator's (the sums grow and renormalise every few groups) or, every fifth group, one
    above it (the group's exponent wins), so the exponent compare made a cycle ahead must take
    the accumulator's exponent, its plus one and the group's. A winning group itself never
    renormalises (its terms are below half the range, ``check_stat_bits``): checked on the
    model's updates."""
    rng = np.random.default_rng(21)
    bits = TINY.max_mantissa + 4
    q = QuantStatModel(TINY, stat_bits=bits)
    words, wins, renorms = [], 0, 0
    for k in range(120):
        before = q.state
        e = before.exp + (k % 5 == 4) if before.seen else 0
        v = (rng.uniform(1.5, 1.99, TINY.group_size).astype(np.float32)
             * np.float32(2.0) ** e)
        words.append(bfp.pack_fp32_group(v, TINY, 2, bfp.ROUND_NEAREST))
        assert bfp.unpack_bfp_group(q.accept(words[-1]), TINY)["exp"] == e
        after = q.state
        if before.seen and e > before.exp:
            wins += 1
            assert after.exp == e
        elif before.seen and after.exp == before.exp + 1:
            renorms += 1
    assert wins > 20 and renorms > 20
    for seed in range(3):
        check(TINY, [words], stat_bits=bits, seed=seed)


@pytest.mark.parametrize("seed", [31, 32])
def test_load_while_streaming(seed):
    """``stat_load`` at random cycles while groups stream (random idle and backpressure),
    with random saved statistics: every cycle the statistic equals the model's, where a load
    drops the groups still staged in its cycle (delivered in the ``stat_latency - 1`` cycles
    before it) and the groups delivered from that cycle on are added to the loaded value (the
    core loads a layer's statistic as it issues a pass)."""
    rng = np.random.default_rng(seed)
    prng = random.Random(seed)
    words = words_for(rng, TINY, 150, [2, 4, 6], [bfp.ROUND_NEAREST, bfp.ROUND_STOCHASTIC],
                      gaussian=True)
    dut = QuantStat(config=TINY, stat_bits=16)
    model = QuantStatModel(TINY, stat_bits=16)
    top = Module()
    top.domains.sync = ClockDomain("sync")
    top.submodules.dut = dut
    ipay, opay = dut.i.payload.as_value(), dut.o.payload.as_value()
    counts = {"loads": 0, "dropped": 0, "checked": 0}

    lag = dut.stat_latency - 1           # a group delivered at edge t counts at edge t + lag

    async def tb(ctx):
        sent = got = 0
        staged = []                      # [edge it counts at, output index, payload, dropped]
        for cycle in range(5_000):
            if got == len(words) and not staged:
                break
            v = sent < len(words) and prng.random() >= 0.2
            ctx.set(dut.i.valid, v)
            if v:
                ctx.set(ipay, words[sent])
            ctx.set(dut.o.ready, prng.random() >= 0.2)
            load = prng.random() < 0.06
            if load:
                ld = StatState(exp=int(rng.integers(-8, 8)), num=int(rng.integers(0, 1 << 14)),
                               den=int(rng.integers(1, 1 << 16)), seen=bool(rng.integers(2)))
                ctx.set(dut.stat_in, dut.stat_in.shape().const(
                    {"exp": ld.exp, "num": ld.num, "den": ld.den, "seen": int(ld.seen)}))
            ctx.set(dut.stat_load, load)
            _, _, i_ready, o_valid, o_ready, o_payload = await ctx.tick().sample(
                dut.i.ready, dut.o.valid, dut.o.ready, opay)
            if staged and staged[0][0] == cycle:
                _, idx, payload, dropped = staged.pop(0)
                before = model.state
                assert model.accept(words[idx]) == int(payload)    # the LFSR's order
                if dropped or load:      # a load while it was staged drops it
                    model.load(before)
                    counts["dropped"] += 1
            if load:
                for entry in staged:
                    entry[3] = True
                model.load(ld)
                counts["loads"] += 1
            if v and i_ready:
                sent += 1
            if o_valid and o_ready:
                staged.append([cycle + lag, got, o_payload, False])
                got += 1
            assert StatState.of(ctx.get(dut.stat)) == model.state, f"cycle {cycle}"
            counts["checked"] += 1
        else:
            raise AssertionError("deadline: outputs missing")

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    assert counts["loads"] > 10 and counts["dropped"] > 2


@pytest.mark.parametrize("seed", [41, 42])
def test_exponent_offsets_around_renormalisation(seed):
    """Named edge case, 12-bit sums, groups back to back: each group's exponent is the
    accumulator's plus a random offset in -16..16 (beyond the 12-bit range both ways: the
    accumulator or the group shifted out entirely), so group and accumulator win, lose and
    tie right after renormalisations (the accumulator is held before its renormalisation and
    the shifts are registered a cycle ahead as one-hot selects, for either ``ovf``). Checked
    on the model's updates that every case occurs."""
    rng = np.random.default_rng(seed)
    bits = TINY.max_mantissa + 4
    q = QuantStatModel(TINY, stat_bits=bits)
    words, cases = [], set()
    for k in range(160):
        before = q.state
        off = int(rng.integers(-16, 17)) if k % 3 else int(rng.integers(-1, 2))
        e = int(np.clip(before.exp + off, -100, 100)) if before.seen else 0
        v = (rng.uniform(1.0, 1.99, TINY.group_size).astype(np.float32)
             * np.float32(2.0) ** e)
        words.append(bfp.pack_fp32_group(v, TINY, int(rng.choice([2, 4])),
                                         bfp.ROUND_NEAREST))
        q.accept(words[-1])
        after = q.state
        if before.seen:
            d = e - before.exp
            cases.add("flush_acc" if d >= bits else "flush_grp" if -d >= bits
                      else "win" if d > 0 else "tie" if d == 0 else "lose")
            if after.exp == max(e, before.exp) + 1:
                cases.add("renorm")
    assert cases >= {"flush_acc", "flush_grp", "win", "tie", "lose", "renorm"}
    check(TINY, [words], stat_bits=bits, seed=seed)
