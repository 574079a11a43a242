"""The sequencer (hdl/core/sequencer.py) with stand-in units in the Amaranth simulator:
program check, issue order, loop offsets, the bank scoreboard (instructions that overlap in
time never share a bank), FENCE, the loss-scale wait of SOFTMAX_XENT, counters."""
import dataclasses
import random

import pytest

from amaranth.sim import Simulator

from hdl.core.config import CoreConfig
from hdl.core.isa import (LOOP_FIELDS, Acc, Op, Status, Vop, check_program, decode, encode,
                          operand_ranges)
from hdl.core.sequencer import Sequencer
from hdl.optim.config import Op as OptOp
from sim.tb.amaranth_tb import add_deadline

CFG = CoreConfig.preset("tiny")
D = CFG.bank_depth
DEADLINE = 20000       # cycles: a hang is a failure


def trace(words):
    """Sequential semantics: the unit instructions in execution order with their effective
    fields (loop offset applied) and resolved accumulate flag."""
    out, pc, loop = [], 0, None
    while True:
        op, f = decode(words[pc] if pc < len(words) else 0)
        if op == Op.HALT:
            return out
        if op == Op.LOOP:
            loop = {"start": pc + 1, "count": f["count"], "stride": f["stride"], "iter": 0}
        elif op == Op.ENDLOOP:
            loop["iter"] += 1
            if loop["iter"] < loop["count"]:
                pc = loop["start"]
                continue
            loop = None
        elif op in (Op.MATMUL, Op.VEC, Op.REDUCE, Op.SOFTMAX_XENT, Op.OPT):
            it = loop["iter"] if loop else 0
            off = it * loop["stride"] if loop else 0
            eff = dict(f)
            for bit, name in enumerate(LOOP_FIELDS.get(op, ())):
                if (f.get("loop", 0) >> bit) & 1:
                    eff[name] += off
            acc = f.get("acc", 0)
            eff["acc_resolved"] = int(acc == Acc.ON or (acc == Acc.AFTER_FIRST and it > 0))
            eff["ranges"] = operand_ranges(op, f, CFG.size, offset=off)
            out.append((op, eff))
        pc += 1


def banks_of(ranges):
    s = set()
    for r in ranges:
        s |= r.banks(D)
    return s


async def load_program(ctx, dut, words, prec=None):
    """Write ``words`` into the program memory and ``prec`` (``{(layer, mode): (width_a,
    width_b, rounding)}``) into the precision table, one per cycle, as the host does."""
    for i, w in enumerate(words):
        ctx.set(dut.prog_we, 1)
        ctx.set(dut.prog_waddr, i)
        ctx.set(dut.prog_wdata, w)
        await ctx.tick()
    ctx.set(dut.prog_we, 0)
    for (layer, mode), (wa, wb, rnd) in (prec or {}).items():
        ctx.set(dut.prec_we, 1)
        ctx.set(dut.prec_waddr, layer * 4 + mode)
        ctx.set(dut.prec_wdata, {"width_a": wa, "width_b": wb, "rounding": rnd})
        await ctx.tick()
    ctx.set(dut.prec_we, 0)


async def start_and_wait(ctx, dut):
    """Pulse ``start`` and wait for ``done`` (a hang past ``DEADLINE`` cycles fails); the run's
    status."""
    ctx.set(dut.start, 1)
    await ctx.tick()
    ctx.set(dut.start, 0)
    for _ in range(DEADLINE):
        await ctx.tick()
        if ctx.get(dut.done):
            return ctx.get(dut.status)
    raise AssertionError("sequencer did not finish within the deadline")


async def accepted(ctx, stream):
    """The payload of the next transfer on ``stream`` (its ``ready`` is driven by the caller).
    A plain tick loop: background testbenches blocked in ``.until()`` leave "generator already
    running" warnings when the simulation ends."""
    while True:
        _, _, valid, ready, payload = await ctx.tick().sample(stream.valid, stream.ready,
                                                              stream.payload)
        if valid and ready:
            return payload


def run_program(words, *, seed=0, lat=(1, 40), scale_exp=0, prec=None, gwin=False,
                config=CFG):
    """Run ``words``; stand-in units take a random time. Returns (status, err_pc, events,
    counters) where events are (unit, issue_cycle, done_cycle, payload dict)."""
    rng = random.Random(seed)
    dut = Sequencer(config=config)
    events = []
    cycle = [0]
    result = {}

    async def clock(ctx):
        async for _ in ctx.tick():
            cycle[0] += 1

    async def host(ctx):
        await load_program(ctx, dut, words, prec)
        ctx.set(dut.scale_exp, scale_exp)
        result["status"] = await start_and_wait(ctx, dut)
        result["err_pc"] = ctx.get(dut.err_pc)
        await ctx.tick().repeat(Sequencer.COUNTERS_LAG)     # the run's last increments
        result["counters"] = {n: ctx.get(dut.counters[n]) for n in
                              ("instructions", "cycles", "check_cycles", "stall_bank",
                               "stall_unit", "stall_fence", "stall_order", "overlap",
                               "array_beats", "flags")}
        result["gwin"] = (ctx.get(dut.gwin_lo), ctx.get(dut.gwin_hi))

    async def matmul(ctx):
        ctx.set(dut.mm_cmd.ready, 1)
        while True:
            p = await accepted(ctx, dut.mm_cmd)
            t0 = cycle[0]
            for _ in range(rng.randint(*lat)):
                await ctx.tick()
            ctx.set(dut.mm_counters.beats, 3)
            ctx.set(dut.mm_rsp.valid, 1)
            await ctx.tick()
            ctx.set(dut.mm_rsp.valid, 0)
            events.append(("mm", t0, cycle[0], {
                "mode": p.mode, "M": p.M, "K": p.K, "N": p.N, "a": p.base_a, "b": p.base_b,
                "c": p.base_c, "acc": p.accumulate, "wa": p.width_a, "wb": p.width_b,
                "rnd": p.rounding}))

    async def vector(ctx):
        ctx.set(dut.vec_cmd.ready, 1)
        while True:
            p = await accepted(ctx, dut.vec_cmd)
            t0 = cycle[0]
            ctx.set(dut.vec_cmd.ready, 0)
            for _ in range(rng.randint(*lat)):
                await ctx.tick()
            ctx.set(dut.vec_done, 1)
            await ctx.tick()
            ctx.set(dut.vec_done, 0)
            ctx.set(dut.vec_cmd.ready, 1)
            op = p.op
            a = p.args
            fields = {Op.VEC: lambda: {"a": a.vec.a, "b": a.vec.b, "d": a.vec.d},
                      Op.REDUCE: lambda: {"a": a.reduce.a, "d": a.reduce.d},
                      Op.SOFTMAX_XENT: lambda: {"a": a.softmax.a, "b": a.softmax.b,
                                                "d": a.softmax.d, "e": a.softmax.e}}[op]()
            fields.update(acc=p.acc, gscale=p.gscale)
            events.append(("vec", t0, cycle[0], {"op": op, **fields}))

    async def optim(ctx):
        ctx.set(dut.opt_cmd.ready, 1)
        n = None
        while True:
            p = await accepted(ctx, dut.opt_cmd)
            if p.op == OptOp.SETREG:
                n = p.data
                continue
            assert p.op in (OptOp.STEP, OptOp.STEP1)
            t0 = cycle[0]
            ctx.set(dut.opt_cmd.ready, 0)
            ctx.set(dut.opt_busy, 1)
            for _ in range(rng.randint(*lat)):
                await ctx.tick()
            ctx.set(dut.opt_busy, 0)
            ctx.set(dut.opt_cmd.ready, 1)
            events.append(("opt", t0, cycle[0], {"count": n, "one_pass": p.op == OptOp.STEP1, **{
                k: ctx.get(dut.opt_base[i]) for i, k in enumerate("wmvg")}}))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(host)
    sim.add_testbench(clock, background=True)
    for p in (matmul, vector, optim):
        sim.add_testbench(p, background=True)
    add_deadline(sim)
    sim.run()         # ends with the host testbench, which has its own deadline
    assert "status" in result, "no result (deadline)"
    if gwin:
        return result["status"], result["err_pc"], events, result["counters"], result["gwin"]
    return result["status"], result["err_pc"], events, result["counters"]


def step_program():
    """A training-step-shaped program: micro-batch loop, units that may overlap, a fence."""
    return [
        encode(Op.LOOP, count=3, stride=16),
        encode(Op.MATMUL, mode=0, M=8, K=8, N=8, a=4 * D, b=0, c=5 * D, layer=0, loop=0b001),
        encode(Op.VEC, vop=4, bcast=1, rows=8, cols=8, a=5 * D, b=64, d=5 * D),
        encode(Op.MATMUL, mode=0, M=8, K=8, N=4, a=5 * D, b=128, c=6 * D, layer=1),
        encode(Op.SOFTMAX_XENT, rows=8, cols=4, a=6 * D, b=4 * D + 200, d=7 * D,
               e=4 * D + 300, imm=0x3E000000, loop=0b1010),
        encode(Op.MATMUL, mode=2, M=8, K=8, N=4, a=5 * D, b=D + 128, c=7 * D, acc=Acc.AFTER_FIRST,
               layer=1),
        encode(Op.REDUCE, rop=0, rows=8, cols=4, a=7 * D, d=D + 200, acc=Acc.AFTER_FIRST),
        encode(Op.MATMUL, mode=1, M=8, K=8, N=4, a=6 * D, b=128, c=7 * D, layer=1),
        encode(Op.VEC, vop=2, rows=8, cols=8, a=6 * D, b=5 * D, d=6 * D),
        encode(Op.MATMUL, mode=2, M=8, K=8, N=8, a=4 * D, b=D, c=6 * D, acc=Acc.AFTER_FIRST,
               loop=0b001),
        encode(Op.REDUCE, rop=0, rows=8, cols=8, a=6 * D, d=D + 64, acc=Acc.AFTER_FIRST),
        encode(Op.ENDLOOP),
        encode(Op.OPT, count=256, w=0, m=2 * D, v=3 * D, g=D),
        encode(Op.FENCE),
        encode(Op.VEC, vop=6, rows=2, cols=4, d=7 * D),
        encode(Op.HALT),
    ]


def check_run(words, events, counters, scale_exp=0):
    want = trace(words)
    issued = sorted(events, key=lambda e: e[1])
    assert len(issued) == len(want), (len(issued), len(want))
    for (unit, t0, t1, got), (op, eff) in zip(issued, want):
        if op == Op.MATMUL:
            assert unit == "mm"
            for k in ("mode", "M", "K", "N", "a", "b", "c"):
                assert got[k] == eff[k], (k, got, eff)
            assert got["acc"] == eff["acc_resolved"]
        elif op == Op.OPT:
            assert unit == "opt" and got == {"count": eff["count"], "w": eff["w"],
                                             "m": eff["m"], "v": eff["v"], "g": eff["g"],
                                             "one_pass": bool(eff["one_pass"])}
        else:
            assert unit == "vec" and got["op"] == op
            for k in ("a", "b", "d", "e"):
                if k in got and k in eff and not (op == Op.VEC and k == "e"):
                    assert got[k] == eff[k], (k, got, eff)
            if op == Op.REDUCE:
                assert got["acc"] == eff["acc_resolved"]
            if op == Op.SOFTMAX_XENT:
                assert got["gscale"] == (eff["imm"] + (scale_exp << 23)) & 0xFFFFFFFF
    # the scoreboard: instructions running at the same time own disjoint banks
    spans = [(t0, t1, banks_of(eff["ranges"]), unit)
             for (unit, t0, t1, _), (_, eff) in zip(issued, want)]
    overlapped = 0
    for i, (a0, a1, ab, au) in enumerate(spans):
        for b0, b1, bb, bu in spans[i + 1:]:
            if a0 < b1 and b0 < a1:
                overlapped += 1
                assert au != bu, "one unit ran two instructions at once"
                assert not (ab & bb), f"banks {ab & bb} shared by overlapping instructions"
    # FENCE (index 13): the VEC after it starts after everything before it finished
    return overlapped


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_step_program_order_scoreboard_and_overlap(seed):
    words = step_program()
    assert check_program(words, S=CFG.size, lines=CFG.lines, bank_depth=D, layers=CFG.layers,
                         dim_max=1023, prog_depth=CFG.prog_depth) == (Status.OK, 0)
    status, pc, events, counters = run_program(words, seed=seed, scale_exp=3)
    assert (status, pc) == (Status.OK, 0)
    overlapped = check_run(words, events, counters, scale_exp=3)
    assert overlapped > 0, "independent instructions never overlapped"
    # instructions: every executed one, loop bodies per iteration
    body = 10
    assert counters["instructions"] == 1 + 3 * (body + 1) + 4
    assert counters["overlap"] > 0
    # the last VEC follows the FENCE: it starts after the OPT finished
    issued = sorted(events, key=lambda e: e[1])
    opt_end = [e for e in issued if e[0] == "opt"][0][2]
    assert issued[-1][1] >= opt_end


ORDER_CASES = {
    # OPT then SOFTMAX_XENT in disjoint banks: the softmax waits (it reads the loss scale)
    "softmax_after_opt": ([encode(Op.OPT, count=64, w=0, m=D, v=2 * D, g=3 * D),
                           encode(Op.SOFTMAX_XENT, rows=4, cols=4, a=4 * D, b=5 * D, d=6 * D,
                                  e=7 * D, imm=0x3E800000)], "opt", "vec"),
    # MATMUL then OPT in disjoint banks: OPT waits (converter flags -> skip_in)
    "opt_after_matmul": ([encode(Op.MATMUL, mode=0, M=4, K=4, N=4, a=4 * D, b=5 * D, c=6 * D),
                          encode(Op.OPT, count=64, w=0, m=D, v=2 * D, g=3 * D)], "mm", "opt"),
    # VEC then a one-pass OPT in disjoint banks: OPT waits (gradient-write snoop -> skip_in)
    "one_pass_opt_after_vec": ([encode(Op.VEC, vop=Vop.ZERO, rows=4, cols=4, d=4 * D),
                                encode(Op.OPT, count=64, w=0, m=D, v=2 * D, g=3 * D,
                                       one_pass=1)], "vec", "opt"),
}


#: ``optim_shared_units`` (the optimizer's multiplier, adder and divider are the vector unit's)
#: on eight banks: OPT and a vector instruction in disjoint banks take turns. (In the FPGA
#: build's four banks an OPT owns all four, so nothing runs beside it anyway.)
SHARED = dataclasses.replace(CFG, vector_lanes=1, vector_shared_units=True,
                             optim_shared_units=True)
DF = SHARED.bank_depth
SHARED_CASES = {
    "vec_after_opt": ([encode(Op.OPT, count=64, w=0, m=DF, v=2 * DF, g=3 * DF),
                       encode(Op.VEC, vop=Vop.ADD, rows=4, cols=4, a=4 * DF, b=5 * DF,
                              d=6 * DF)], "opt", "vec"),
    "opt_after_vec": ([encode(Op.VEC, vop=Vop.SCALE, rows=4, cols=4, a=4 * DF, d=5 * DF,
                              imm=0x3F000000),
                       encode(Op.OPT, count=64, w=0, m=DF, v=2 * DF, g=3 * DF)], "vec", "opt"),
}


@pytest.mark.parametrize("name", sorted(SHARED_CASES))
def test_fpga_build_opt_and_vector_take_turns(name):
    """With ``optim_shared_units`` the second instruction waits for the first (counted in
    ``stall_order``); without it the same program overlaps the two, so the case tests the
    rule."""
    words, first, second = SHARED_CASES[name]
    words = words + [encode(Op.HALT)]
    _, _, events, _ = run_program(words, lat=(30, 30),
                                  config=dataclasses.replace(SHARED, optim_shared_units=False))
    a, b = ([e for e in events if e[0] == u][0] for u in (first, second))
    assert b[1] < a[2], "the case does not test the rule: the two never overlap"
    status, _, events, counters = run_program(words, lat=(30, 30), config=SHARED)
    assert status == Status.OK
    a, b = ([e for e in events if e[0] == u][0] for u in (first, second))
    assert b[1] >= a[2], f"{second} started at {b[1]} before {first} ended at {a[2]}"
    assert counters["stall_order"] > 0


@pytest.mark.parametrize("name", sorted(ORDER_CASES))
def test_ordering_rules_beyond_banks(name):
    words, first, second = ORDER_CASES[name]
    status, _, events, counters = run_program(words + [encode(Op.HALT)], lat=(30, 30))
    assert status == Status.OK
    a = [e for e in events if e[0] == first][0]
    b = [e for e in events if e[0] == second][0]
    assert b[1] >= a[2], f"{second} started at {b[1]} before {first} ended at {a[2]}"
    assert counters["stall_order"] > 0


def test_two_pass_opt_overlaps_vector_and_gradient_window():
    """A two-pass OPT does not wait for the vector unit (its check pass reads G itself); the
    program check collects the one-pass OPTs' g lines (hull) into ``gwin_lo .. gwin_hi``,
    empty without one."""
    vec = encode(Op.VEC, vop=Vop.ZERO, rows=4, cols=4, d=4 * D)
    two = encode(Op.OPT, count=64, w=0, m=D, v=2 * D, g=3 * D)
    status, _, events, counters = run_program([vec, two, encode(Op.HALT)], lat=(30, 30))
    assert status == Status.OK and counters["stall_order"] == 0
    a = [e for e in events if e[0] == "vec"][0]
    b = [e for e in events if e[0] == "opt"][0]
    assert b[1] < a[2], "the two-pass OPT waited for the vector unit"
    assert not b[3]["one_pass"]
    _, _, _, _, gwin = run_program([vec, two, encode(Op.HALT)], lat=(1, 1), gwin=True)
    assert gwin[0] >= gwin[1]                           # empty
    S = CFG.size
    prog = [encode(Op.OPT, count=64, w=0, m=D, v=2 * D, g=3 * D + 5, one_pass=1),
            encode(Op.OPT, count=8 * S, w=0, m=D, v=2 * D, g=3 * D + 40, one_pass=1),
            two, encode(Op.HALT)]
    status, _, events, counters, gwin = run_program(prog, lat=(1, 1), gwin=True)
    assert status == Status.OK
    assert gwin == (3 * D + 5, 3 * D + 48)
    assert [e[3]["one_pass"] for e in sorted(events, key=lambda e: e[1])] == [True, True, False]
    assert counters["flags"] == 0


def test_precision_table_reaches_matmul():
    words = [encode(Op.MATMUL, mode=m, M=4, K=4, N=4, a=0, b=D, c=2 * D, layer=l)
             for l in (0, 3) for m in (0, 1, 2)] + [encode(Op.HALT)]
    prec = {(3, 1): (2, 6, 1), (0, 2): (4, 2, 2), (3, 0): (6, 8, 0)}
    status, _, events, _ = run_program(words, prec=prec)
    assert status == Status.OK
    got = [(e[3]["wa"], e[3]["wb"], e[3]["rnd"]) for e in sorted(events, key=lambda e: e[1])]
    want = [prec.get((l, m), (8, 8, 0)) for l in (0, 3) for m in (0, 1, 2)]
    assert got == want


BAD_PROGRAMS = {
    "unknown_opcode": ([encode(Op.FENCE), 11], (Status.ERR_OPCODE, 1)),
    "bank_conflict": ([encode(Op.MATMUL, M=4, K=4, N=4, a=0, b=8, c=2 * D)],
                      (Status.ERR_BANK, 0)),
    "nested_loop": ([encode(Op.LOOP, count=2), encode(Op.LOOP, count=2), encode(Op.ENDLOOP),
                     encode(Op.ENDLOOP)], (Status.ERR_LOOP, 1)),
    "endloop_alone": ([encode(Op.FENCE), encode(Op.ENDLOOP)], (Status.ERR_LOOP, 1)),
    "halt_in_loop": ([encode(Op.LOOP, count=2), encode(Op.HALT)], (Status.ERR_LOOP, 1)),
    # the loop's last iteration would run past the scratchpad
    "loop_past_end": ([encode(Op.LOOP, count=40, stride=D),
                       encode(Op.VEC, vop=6, rows=1, cols=4, d=0, loop=0b100),
                       encode(Op.ENDLOOP), encode(Op.HALT)], (Status.ERR_ADDR, 1)),
    "no_halt": ([encode(Op.FENCE)] * CFG.prog_depth, (Status.ERR_NO_HALT, CFG.prog_depth - 1)),
    # a valid MATMUL before the bad instruction must not run
    "late_error": ([encode(Op.MATMUL, M=4, K=4, N=4, a=0, b=D, c=2 * D),
                    encode(Op.VEC, vop=7, rows=1, cols=1)], (Status.ERR_FIELD, 1)),
}


@pytest.mark.parametrize("name", sorted(BAD_PROGRAMS))
def test_bad_program_rejected_and_nothing_runs(name):
    words, want = BAD_PROGRAMS[name]
    assert check_program(words, S=CFG.size, lines=CFG.lines, bank_depth=D, layers=CFG.layers,
                         dim_max=1023, prog_depth=CFG.prog_depth) == want
    status, pc, events, counters = run_program(words)
    assert (status, pc) == want
    assert events == [] and counters["instructions"] == 0


# ---- FAST statistics and thresholds (memories with written bits, docs/fast.md) -------------

ZERO_STAT = {"num": 0, "den": 0, "exp": 0, "seen": 0}
W0 = 8 if CFG.max_mantissa >= 8 else CFG.max_mantissa       # the precision table's reset width


def _stat_value(rng):
    return {"num": rng.randrange(1 << 32), "den": rng.randrange(1, 1 << 32),
            "exp": rng.randrange(-(1 << CFG.exp_bits), 1 << CFG.exp_bits),
            "seen": rng.randrange(2)}


def _stat_dict(v):
    return {"num": int(v.num), "den": int(v.den), "exp": int(v.exp), "seen": int(v.seen)}


def _stats_reference(seq, outs, thr, widths, capped=None):
    """What the sequencer must load into each MATMUL and hold at the end: ``seq`` is the run's
    ``(layer, mode)`` pairs and ``"ADAPT"``; pass ``n`` saves ``outs[n]``; ``ADAPT`` raises
    the width of each slot whose ``num * 2**16 > threshold * den`` (unwritten: never), up to
    ``max_mantissa`` (a raise at it goes on ``capped``), and clears every statistic. Returns
    (loads, saved)."""
    from hdl.core.isa import stat_slot
    saved, loads, n = {}, [], 0
    for item in seq:
        if item == "ADAPT":
            for (layer, mode, op), st in sorted(saved.items()):
                t = thr.get(stat_slot(layer, mode, op), 0xFFFFFFFF)
                if st["seen"] and (st["num"] << 16) > t * st["den"]:
                    w = list(widths.get((layer, mode), (W0, W0)))
                    if capped is not None and w[op] == CFG.max_mantissa:
                        capped.append((layer, mode, op))
                    w[op] = min(w[op] + 2, CFG.max_mantissa)
                    widths[(layer, mode)] = tuple(w)
            saved.clear()
            continue
        wa, wb = widths.get(item, (W0, W0))
        loads.append((wa, wb, saved.get((*item, 0), ZERO_STAT), saved.get((*item, 1), ZERO_STAT)))
        saved[(*item, 0)], saved[(*item, 1)] = outs[n]
        n += 1
    return loads, saved


@pytest.mark.parametrize("seed,lat", [(0, (1, 1)), (1, (1, 3)), (2, (1, 40))])
def test_fast_statistics_saved_loaded_adapted_and_reset(seed, lat):
    """Every MATMUL is loaded with the statistics its ``(layer, mode)`` last saved (zero when
    never saved or cleared since), also when the same pair runs back to back (the memory's read
    port is transparent for the save); ``ADAPT`` compares every slot with its threshold
    (unwritten: never), raises exactly those widths and clears; the host reads every slot;
    reset clears the statistics and the thresholds (the written bits), not the memories' words:
    afterwards every slot reads zero and ``ADAPT`` raises nothing, also where a threshold of 0
    is written beside a stale seen word."""
    from amaranth.hdl import ClockDomain, Module
    from hdl.core.isa import stat_slot, stat_slots
    rng = random.Random(seed)

    def mm(layer, mode):
        return encode(Op.MATMUL, mode=mode, M=4, K=4, N=4, a=0, b=D, c=2 * D, layer=layer)

    pairs = [(0, 0), (0, 0), (0, 0), (1, 2), (CFG.layers - 1, 1), (1, 2), (0, 1)]
    seq1 = pairs + ["ADAPT"] + pairs[::-1]
    # after reset: (0, 0) saved, ADAPT, then every pair again (their widths show a raise)
    seq2 = [(0, 0), "ADAPT", (0, 0), (0, 0), (1, 2), (CFG.layers - 1, 1), (0, 1)]
    prec2 = {p: (2, 2) for p in seq2 if p != "ADAPT"}     # below max_mantissa: a raise shows
    prec = {p: (2, 4) for p in set(pairs)}
    prec[(0, 0)] = (CFG.max_mantissa, 4)            # its raise below stays at the cap
    # thresholds: about half of the slots get one, drawn so that some r are above, some below
    thr = {stat_slot(l, m, op): rng.choice([0, rng.randrange(1 << 17), rng.randrange(1 << 32)])
           for (l, m) in set(pairs) for op in range(2) if rng.random() < 0.7}
    thr[stat_slot(0, 0, 0)] = 0                     # a seen statistic there raises
    thr[stat_slot(0, 1, 0)] = 0
    dut = Sequencer(config=CFG)
    top = Module()
    top.submodules.dut = dut
    top.domains.sync = cd = ClockDomain("sync")
    loads, outs = [], []

    async def matmul(ctx):
        ctx.set(dut.mm_cmd.ready, 1)
        while True:
            _, _, valid, ready, load, p = await ctx.tick().sample(
                dut.mm_cmd.valid, dut.mm_cmd.ready, dut.mm_stat_load, dut.mm_cmd.payload)
            assert not load, "a statistics load without a MATMUL issued the cycle before"
            if not (valid and ready):
                continue
            # the load leaves from registers: the cycle after the issue
            _, _, load, s0, s1 = await ctx.tick().sample(
                dut.mm_stat_load, dut.mm_stat_in[0], dut.mm_stat_in[1])
            assert load, "a MATMUL issued without loading its statistics the cycle after"
            loads.append((int(p.width_a), int(p.width_b), _stat_dict(s0), _stat_dict(s1)))
            for _ in range(rng.randint(*lat) - 1):
                await ctx.tick()
            out = (_stat_value(rng), _stat_value(rng))
            # seen: the first pass, and the last (0, 0) and (0, 1) before ADAPT (their raises:
            # one at the cap, one that shows)
            out[0]["seen"] = 1 if len(outs) in (0, 2, 6) else out[0]["seen"]
            outs.append(out)
            ctx.set(dut.mm_stat[0], out[0])
            ctx.set(dut.mm_stat[1], out[1])
            ctx.set(dut.mm_rsp.valid, 1)
            await ctx.tick()
            ctx.set(dut.mm_rsp.valid, 0)

    async def read_all(ctx):
        got = {}
        for k in range(stat_slots(CFG)):
            ctx.set(dut.stat_raddr, k)
            ctx.set(dut.stat_ren, 1)
            await ctx.tick()
            ctx.set(dut.stat_ren, 0)
            ctx.set(dut.stat_raddr, (k * 7 + 3) % stat_slots(CFG))   # held without stat_ren
            await ctx.tick().repeat(Sequencer.STAT_READ_LATENCY - 1)
            got[k] = _stat_dict(ctx.get(dut.stat_rdata))
        return got

    async def run(ctx, seq, thr, prec):
        words = [encode(Op.ADAPT) if p == "ADAPT" else mm(*p) for p in seq] + [encode(Op.HALT)]
        await load_program(ctx, dut, words, {k: (wa, wb, 0) for k, (wa, wb) in prec.items()})
        for k, t in thr.items():
            ctx.set(dut.thr_we, 1)
            ctx.set(dut.thr_waddr, k)
            ctx.set(dut.thr_wdata, t)
            await ctx.tick()
        ctx.set(dut.thr_we, 0)
        return await start_and_wait(ctx, dut)

    result = {}

    async def host(ctx):
        result["status"] = await run(ctx, seq1, thr, prec)
        result["loads"] = list(loads)
        result["outs"] = list(outs)
        result["after_run"] = await read_all(ctx)
        ctx.set(cd.rst, 1)
        await ctx.delay(2e-6)                  # two clock edges in reset
        ctx.set(cd.rst, 0)
        result["after_reset"] = await read_all(ctx)
        loads.clear()
        outs.clear()
        # thresholds of 0 where the memories still hold a seen word with num > 0 (pairs other
        # than (0, 0), which run 2 saves again): only the cleared written bits keep them down
        stale = {k: 0 for k, v in result["after_run"].items()
                 if v["seen"] and v["num"] and k not in (stat_slot(0, 0, 0), stat_slot(0, 0, 1))}
        result["stale"] = stale
        result["status2"] = await run(ctx, seq2, stale, prec2)
        result["loads2"], result["outs2"] = list(loads), list(outs)

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(host)
    sim.add_testbench(matmul, background=True)
    add_deadline(sim)
    sim.run()
    assert result["status"] == Status.OK and result["status2"] == Status.OK
    capped = []
    want_loads, saved = _stats_reference(seq1, result["outs"], thr, dict(prec), capped)
    assert result["loads"] == want_loads
    assert (0, 0, 0) in capped, "no raise at max_mantissa: the cap is not tested"
    raised = [l[:2] for l in want_loads[len(pairs):]] != [prec[p] for p in pairs[::-1]]
    assert raised, "the thresholds raised no width: the case tests nothing"
    assert result["after_run"] == {stat_slot(l, mo, op): saved.get((l, mo, op), ZERO_STAT)
                                   for l in range(CFG.layers) for mo in range(4)
                                   for op in range(2)}
    assert any(v != ZERO_STAT for v in result["after_run"].values())
    assert all(v == ZERO_STAT for v in result["after_reset"].values())
    # after reset: thresholds only beside stale words, so ADAPT raises nothing, but it still
    # clears
    assert result["stale"], "no stale seen word: the written bits after reset are not tested"
    want2, _ = _stats_reference(seq2, result["outs2"], {}, dict(prec2))
    assert result["loads2"] == want2
    assert [l[:2] for l in result["loads2"]] == [(2, 2)] * 6


@pytest.mark.parametrize("decode_stages", [0, 2], ids=["no_decoder_stages", "decoder_stages"])
@pytest.mark.parametrize("body", [0, 1], ids=["empty_body", "one_instruction"])
@pytest.mark.parametrize("count", [1, 2, 5])
def test_short_loop_bodies(count, body, decode_stages):
    """ENDLOOP right after LOOP (or one instruction later), and consecutive loops: the
    iteration decision and the next offset come from registers a cycle old, so the tightest
    LOOP -> ENDLOOP and ENDLOOP -> ENDLOOP spacings are the ones to check."""
    cfg = dataclasses.replace(CFG, decode_stages=decode_stages)
    inner = [encode(Op.VEC, vop=2, rows=2, cols=4, a=0, b=D, d=2 * D, loop=0b101)][:body]
    words = ([encode(Op.LOOP, count=count, stride=8), *inner, encode(Op.ENDLOOP)]
             + [encode(Op.LOOP, count=3, stride=4), *inner, encode(Op.ENDLOOP),
                encode(Op.HALT)])
    assert check_program(words, S=cfg.size, lines=cfg.lines, bank_depth=D, layers=cfg.layers,
                         dim_max=1023, prog_depth=cfg.prog_depth) == (Status.OK, 0)
    status, pc, events, counters = run_program(words, lat=(1, 3), config=cfg)
    assert (status, pc) == (Status.OK, 0)
    check_run(words, events, counters)
    assert counters["instructions"] == 2 + (count + 3) * (1 + body) + 1


@pytest.mark.parametrize("decode_stages", [0, 2], ids=["no_decoder_stages", "decoder_stages"])
@pytest.mark.parametrize("count,want", [(128, (Status.OK, 0)), (129, (Status.ERR_ADDR, 1))],
                         ids=["last_line", "one_line_past"])
def test_loop_span_at_the_scratchpad_end(count, want, decode_stages):
    """The check pass's loop span, ``(count - 1) * stride`` (with decoder stages a
    RegisteredMul loaded with the word at LOAD): a loop whose last iteration writes the
    scratchpad's last line runs, one more iteration is refused before anything runs."""
    cfg = dataclasses.replace(CFG, decode_stages=decode_stages)
    stride = 129
    assert (128 - 1) * stride + 1 == cfg.lines          # iteration 127 writes the last line
    words = [encode(Op.LOOP, count=count, stride=stride),
             encode(Op.VEC, vop=6, rows=1, cols=4, d=0, loop=0b100), encode(Op.ENDLOOP),
             encode(Op.HALT)]
    assert check_program(words, S=cfg.size, lines=cfg.lines, bank_depth=D, layers=cfg.layers,
                         dim_max=1023, prog_depth=cfg.prog_depth) == want
    status, pc, events, counters = run_program(words, lat=(1, 3), config=cfg)
    assert (status, pc) == want
    if want[0] == Status.OK:
        check_run(words, events, counters)
        assert len(events) == count
    else:
        assert events == [] and counters["instructions"] == 0
