"""hdl.core.adapt.AdaptRule against the golden model's rule (sim.model.core.adapt_raises):
one slot per cycle with random gaps, every decision checked ``latency`` cycles later; random
statistics and thresholds over the whole 32-bit ranges and named edge cases (the two sides
equal, one apart, the largest values, thresholds at and above 2**17 where the product's upper
partial products count, never, not seen). The rule is given both operands' statistics as
read and picks the slot's (``slot[0]``) after its first register: the other operand holds a
random statistic that must not count, and unwritten statistics (``present``) and thresholds
(``thr_present``: ``THRESH_NEVER``) are given random words that must not count either."""
import random

import pytest

from amaranth.sim import Simulator

from hdl.core.adapt import AdaptRule
from hdl.core.config import CoreConfig
from hdl.core.isa import THRESH_FRAC_BITS, THRESH_NEVER, stat_slots
from hdl.core.sequencer import ADAPT_STEPS
from sim.model.core import adapt_raises
from sim.model.stats import StatState
from sim.tb.amaranth_tb import add_deadline

CFG = CoreConfig.preset("tiny")
TOP = (1 << 32) - 1


def edge_cases(rng):
    """``(num, den, threshold, seen)`` at the rule's edges."""
    cases = []
    for den in (1, 3, 1 << 17, (1 << 17) + 1, 0x1234_5678, TOP):
        for thr in (1 << 16, 1 << 17, (1 << 17) + 5, 0x0003_0001, 0xABCD_1234):
            rhs = thr * den
            for num_scaled in (rhs - 1, rhs, rhs + 1):      # num * 2**16 around thr * den
                num = num_scaled >> THRESH_FRAC_BITS
                if 0 <= num <= TOP:
                    cases.append((num, den, thr, True))
                    cases.append((num + 1, den, thr, True) if num < TOP else (num, den, 0, True))
    cases += [(TOP, TOP, TOP - 1, True), (TOP, TOP, TOP, True), (TOP, 1, THRESH_NEVER, True),
              (TOP, 0, 0, True), (0, 0, 0, True), (1, 0, THRESH_NEVER, True),
              (TOP, 1, 0, False), (5, 1, 0, False), (0, TOP, 0, True)]
    return cases


def random_cases(rng, n):
    out = []
    for _ in range(n):
        den = rng.choice([rng.getrandbits(32), rng.getrandbits(17), rng.getrandbits(20)])
        thr = rng.choice([rng.getrandbits(32), rng.getrandbits(17), 1 << 16,
                          rng.randrange(1 << 16, 1 << 20)])
        # num near thr * den / 2**16 half of the time, so both decisions occur
        near = (thr * den) >> THRESH_FRAC_BITS
        num = rng.choice([rng.getrandbits(32), min(TOP, near + rng.randint(-2, 2))])
        out.append((max(0, num), den, thr, rng.random() < 0.9))
    return out


def random_stat(rng):
    """A statistic of random words (``seen`` set), for the entries the rule must not use."""
    return {"exp": rng.randint(-3, 3), "num": rng.getrandbits(32), "den": rng.getrandbits(32),
            "seen": True}


@pytest.mark.parametrize("seed", [0, 1])
def test_decisions_match_the_golden_rule(seed):
    rng = random.Random(seed)
    cases = edge_cases(rng) + random_cases(rng, 400)
    dut = AdaptRule(config=CFG)
    assert dut.latency == ADAPT_STEPS
    n_slots = stat_slots(CFG)
    expected = []                                 # (cycle the decision is due, one-hot)
    raised = 0

    async def bench(ctx):
        nonlocal raised
        t, pending = 0, list(cases)
        while pending or any(due >= t for due, _ in expected):
            assert t < 20 * len(cases), "deadline"
            give = bool(pending) and rng.random() < 0.75
            if give:
                num, den, thr, seen = pending.pop(0)
                slot = rng.randrange(n_slots)
                op = slot & 1
                ctx.set(dut.valid, 1)
                ctx.set(dut.slot, slot)
                # the slot's operand as given, or (1 in 8) unwritten: a random word that
                # reads as zero; the other operand random, never looked at
                present = rng.random() >= 0.125
                mine = {"exp": rng.randint(-3, 3), "num": num, "den": den, "seen": seen}
                if not present:
                    mine = random_stat(rng)
                    num, den, seen = 0, 0, False
                stats = [None, None]
                stats[op], stats[1 - op] = mine, random_stat(rng)
                ctx.set(dut.stat, stats)
                ctx.set(dut.present, (present << op) | (rng.getrandbits(1) << (1 - op)))
                # the threshold as read, or (1 in 8) unwritten: THRESH_NEVER
                thr_present = thr == THRESH_NEVER or rng.random() >= 0.125
                ctx.set(dut.thr_present, thr_present)
                ctx.set(dut.threshold, thr if thr_present else rng.getrandbits(32))
                state = StatState(exp=0, num=num, den=den, seen=seen)
                want = (1 << slot) if adapt_raises(state, thr if thr_present
                                                   else THRESH_NEVER) else 0
                raised += bool(want)
                expected.append((t + dut.latency, want))
            else:
                ctx.set(dut.valid, 0)
                ctx.set(dut.slot, rng.randrange(n_slots))      # ignored without valid
                ctx.set(dut.threshold, 0)
                ctx.set(dut.thr_present, 1)
                ctx.set(dut.stat, [{"num": TOP, "den": 0, "seen": 1, "exp": 0}] * 2)
                ctx.set(dut.present, 3)
            due = {d: w for d, w in expected}
            got = ctx.get(dut.raise_slots)
            assert got == due.get(t, 0), f"cycle {t}: raise_slots {got:#x} != {due.get(t, 0):#x}"
            await ctx.tick()
            t += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    add_deadline(sim)
    sim.run()
    assert 0.2 * len(cases) < raised < 0.8 * len(cases), "the cases do not exercise both ways"


def test_config_type_is_checked():
    with pytest.raises(TypeError, match="AdaptRule.config"):
        AdaptRule(config="tiny")
