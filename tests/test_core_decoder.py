"""The hardware decoder (hdl/core/decoder.py) against the ISA's Python definition
(hdl/core/isa.py): status, operand ranges and bank masks of random and named instructions."""
import dataclasses
import random

import pytest
from amaranth.sim import Simulator

from hdl.core.config import CoreConfig
from hdl.core.decoder import Decoder
from hdl.core.isa import (ARG_LAYOUTS, Op, Status, check_instruction, decode, disassemble,
                          encode,
                          operand_ranges)
from sim.tb.amaranth_tb import add_deadline

CFG = CoreConfig.preset("tiny")          # S = 4, 8 banks x 512 lines


def random_instruction(rng: random.Random, cfg: CoreConfig) -> int:
    """Fields biased towards the interesting cases: bank edges, scratchpad end, zero dims."""
    op = rng.choice(list(Op.ALL) + [9, 15])
    if op not in ARG_LAYOUTS:
        return encode(Op.HALT) | op
    fields = {}
    D = cfg.bank_depth
    for name, f in ARG_LAYOUTS[op]:
        width = f.shape if isinstance(f.shape, int) else f.shape.width
        if name in ("a", "b", "c", "d", "e", "w", "m", "v", "g"):
            bank = rng.randrange(cfg.banks + 1)
            fields[name] = min(bank * D + rng.choice([0, 1, D - 3, D - 1, rng.randrange(D)]),
                               (1 << width) - 1)
        elif name in ("M", "K", "N", "rows", "cols"):
            fields[name] = rng.choice([0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 33, 100, 1023, 1024,
                                       4095])
        elif name == "count":
            fields[name] = rng.choice([0, 1, 2, 5, 64, 1000, 2048, (1 << width) - 1])
        elif name == "stride":
            fields[name] = rng.choice([0, 1, 16, 300])
        elif name == "imm":
            fields[name] = rng.getrandbits(32)
        else:
            fields[name] = rng.randrange(1 << width)
    return encode(op, **fields)


def run_decoder(cases, cfg=CFG):
    dut = Decoder(config=cfg)
    got = []

    def outputs(ctx):
        ranges = [{"start": ctx.get(r.start), "lines": ctx.get(r.lines),
                   "read": ctx.get(r.read), "write": ctx.get(r.write),
                   "banks": ctx.get(r.banks)} for r in dut.ranges]
        return (ctx.get(dut.status), ctx.get(dut.banks), ranges, ctx.get(dut.acc))

    async def tb(ctx):
        for k, (word, offset, span, iter0) in enumerate(cases):
            if dut.latency:             # loaded as the sequencer loads it, then held
                ctx.set(dut.instr_next.as_value(), word)
                ctx.set(dut.load, 1)
                await ctx.tick()
                ctx.set(dut.load, 0)
                # the next word on instr_next meanwhile (the sequencer's prefetch)
                ctx.set(dut.instr_next.as_value(), cases[(k + 1) % len(cases)][0])
            ctx.set(dut.instr.as_value(), word)
            ctx.set(dut.offset, offset)
            ctx.set(dut.span, span)
            ctx.set(dut.iter0, iter0)
            if dut.latency:
                for _ in range(dut.latency):   # inputs held: the outputs are the word's
                    await ctx.tick()
                out = outputs(ctx)
                for _ in range(3):             # ... and stay while the word is held
                    await ctx.tick()
                assert outputs(ctx) == out, f"case {k}: outputs changed while the word is held"
            else:
                await ctx.delay(1e-9)
                out = outputs(ctx)
            got.append(out)

    sim = Simulator(dut)
    if dut.latency:
        sim.add_clock(1e-6)
    sim.add_testbench(tb)
    add_deadline(sim)
    sim.run()
    return got


def expected(word, offset, span, cfg=CFG):
    op, f = decode(word)
    status = check_instruction(op, f, S=cfg.size, lines=cfg.lines, bank_depth=cfg.bank_depth,
                               layers=cfg.layers, dim_max=(1 << cfg.dim_bits) - 1, span=span,
                               max_classes=cfg.max_classes, collective=cfg.collective,
                               sumsq=cfg.vector_sumsq)
    banks = 0
    ranges = []
    if status == Status.OK and op in ARG_LAYOUTS:
        ranges = operand_ranges(op, f, cfg.size, offset=offset, span=span)
        for r in ranges:
            for b in r.banks(cfg.bank_depth):
                banks |= 1 << b
    return op, status, banks, ranges


@pytest.mark.parametrize("seed,stages", [(1, 0), (2, 0), (3, 0), (4, 2), (5, 2)])
def test_decoder_matches_isa_on_random_words(seed, stages):
    """Without and with the decoder's register stages (``CoreConfig.decode_stages``): each
    word is held for ``latency`` cycles, so a stage that took longer would show the word
    before's results."""
    rng = random.Random(seed)
    cases = []
    for _ in range(300):
        offset = rng.choice([0, 0, 16, 300])
        span = rng.choice([0, 0, 0, 64, 600])
        cases.append((random_instruction(rng, CFG), offset if not span else 0, span,
                      rng.randrange(2)))
    got = run_decoder(cases, dataclasses.replace(CFG, decode_stages=stages))
    seen = set()
    for (word, offset, span, _), (status, banks, hw_ranges, _) in zip(cases, got):
        op, st, bk, ranges = expected(word, offset, span)
        seen.add(st)
        if offset == 0:     # the status is the static check's (run time adds an offset)
            assert status == st, f"{word:#x} span={span}: status {status} != {st}"
        if st == Status.OK and (offset == 0 or status == Status.OK):
            assert banks == bk, f"{word:#x}: banks {banks:#x} != {bk:#x}"
            by_kind = [(r.start, r.lines) for r in ranges]
            hw = [(r["start"], r["lines"]) for r in hw_ranges if r["read"] or r["write"]]
            assert sorted(hw) == sorted(by_kind), f"{word:#x}: ranges {hw} != {by_kind}"
    # the random words reach every instruction-level status
    assert {Status.OK, Status.ERR_OPCODE, Status.ERR_FIELD, Status.ERR_SHAPE, Status.ERR_ADDR,
            Status.ERR_BANK} <= seen, seen


@pytest.mark.parametrize("vector_sumsq", [True, False])
def test_decoder_reduce_sumsq_follows_the_config(vector_sumsq):
    """REDUCE words of both sub-ops: a core built without ``REDUCE SUMSQ`` (the FPGA build,
    ``CoreConfig.vector_sumsq = False``) gives ``ERR_FIELD`` for every SUMSQ, as the ISA's
    Python check does, and still decodes BIAS_GRAD; with it, SUMSQ is accepted."""
    cfg = dataclasses.replace(CFG, vector_sumsq=vector_sumsq)
    rng = random.Random(17)
    words = []
    for rop in (0, 1):
        for _ in range(40):
            words.append(encode(Op.REDUCE, rop=rop, rows=rng.choice([1, 3, 8]),
                                cols=rng.choice([1, 4, 9]), a=rng.randrange(cfg.bank_depth),
                                d=cfg.bank_depth + rng.randrange(cfg.bank_depth),
                                acc=rng.choice([0, 1, 2])))
    got = run_decoder([(w, 0, 0, 1) for w in words], cfg)
    by_rop = {0: set(), 1: set()}
    for word, (status, *_rest) in zip(words, got):
        op, st, _, _ = expected(word, 0, 0, cfg)
        assert status == st, f"{disassemble(word)}: status {status} != {st}"
        by_rop[decode(word)[1]["rop"]].add(st)
    assert by_rop[0] == {Status.OK}
    assert by_rop[1] == ({Status.OK} if vector_sumsq else {Status.ERR_FIELD})


def random_allreduce(rng: random.Random, cfg: CoreConfig) -> int:
    """An ALLREDUCE with fields at the edges of every check (check_allreduce)."""
    G = cfg.collective.bfp.group_size if cfg.collective else 16
    lines = rng.choice([0, 1, 3, 4, 8, G, 100, cfg.bank_depth, (1 << 16) // cfg.size,
                        (1 << 16) // cfg.size + 1, (1 << 16) - 1])
    seg = rng.choice([0, 1, 2, 4, max(1, -(-lines // cfg.ranks)), lines, lines + 1,
                      (1 << 16) - 1]) % (1 << 16)
    return encode(Op.ALLREDUCE, a=rng.choice([0, 5, cfg.bank_depth, cfg.lines - lines % 97,
                                              cfg.lines - 1]) % (1 << 16),
                  lines=lines, seg=seg, timeout=rng.choice([0, 1, 0xFFFF]),
                  comp=rng.choice([0, 1, 1]), width=rng.choice([0, 2, 3, 4, 8, 10]),
                  poison=rng.randrange(2))


def check_collective_words(words, cfg, ranks):
    """Decode ``words`` (ALLREDUCE or SENDRECV) in hardware: each status equals the Python
    check's; for an accepted one the bank mask and every present range (start, lines, read,
    write) equal :func:`operand_ranges`'; the statuses seen include every one the engine's
    checks can give (only ERR_OPCODE without the engine)."""
    got = run_decoder([(w, 0, 0, 1) for w in words], cfg)
    seen = set()
    for word, (status, banks, hw_ranges, _) in zip(words, got):
        op, st, bk, ranges = expected(word, 0, 0, cfg)
        seen.add(st)
        assert status == st, f"{disassemble(word)}: status {status} != {st}"
        if st == Status.OK:
            assert banks == bk, f"{disassemble(word)}: banks {banks:#x} != {bk:#x}"
            hw = sorted((r["start"], r["lines"], r["read"], r["write"]) for r in hw_ranges
                        if r["read"] or r["write"])
            want = sorted((r.start, r.lines, int("r" in r.kind), int("w" in r.kind))
                          for r in ranges)
            assert hw == want, f"{disassemble(word)}: {hw} != {want}"
    want = {Status.ERR_OPCODE} if ranks == 1 else \
        {Status.OK, Status.ERR_FIELD, Status.ERR_SHAPE, Status.ERR_ADDR}
    assert want <= seen, seen


@pytest.mark.parametrize("ranks,stages", [(1, 0), (2, 0), (4, 0), (2, 2), (4, 2)])
def test_decoder_allreduce_matches_isa(ranks, stages):
    """ALLREDUCE: every status of check_allreduce (ERR_OPCODE on a core without the engine),
    the range (both ports of its banks) and the bank mask, against the ISA's Python check;
    without and with the decoder's register stages."""
    cfg = dataclasses.replace(CFG, ranks=ranks, decode_stages=stages)
    rng = random.Random(ranks)
    check_collective_words([random_allreduce(rng, cfg) for _ in range(400)], cfg, ranks)


def random_topk_allreduce(rng: random.Random, cfg: CoreConfig) -> int:
    """A top-k ALLREDUCE (comp 2) with fields at the edges of its checks: residual and buffer
    before, at, inside or after the gradient lines; buffers one line short of the messages,
    exact, or larger; hulls at the engine's reach."""
    D, S = cfg.bank_depth, cfg.size
    tk = cfg.collective.topk if cfg.collective else None
    lines = rng.choice([0, 1, 3, 32, 100, 300])
    need = -(-cfg.ranks * tk.message_words(lines * S) // S) if tk else 1
    a = rng.choice([0, 5, D - 1, D, 3 * D])
    b = rng.choice([a, a + 1, max(a - 1, 0), a + D, a + 2 * D, (1 << 16) // S - lines])
    g = rng.choice([a + 2 * D, a + D, b, max(a - 2, 0), a + 3 * D, (1 << 16) // S - need])
    glines = rng.choice([need, max(need - 1, 0), need + 5, 0])
    return encode(Op.ALLREDUCE, a=a % (1 << 16), lines=lines, b=b % (1 << 16),
                  g=g % (1 << 16), glines=glines, comp=2, seg=rng.choice([0, 7]),
                  timeout=rng.choice([0, 1, 0xFFFF]), width=rng.choice([0, 9]),
                  poison=rng.randrange(2))


@pytest.mark.parametrize("ranks,stages", [(1, 0), (2, 0), (4, 0), (2, 2), (4, 2)])
def test_decoder_topk_allreduce_matches_isa(ranks, stages):
    """Top-k ALLREDUCE: its three ranges (gradient, residual, buffer: each both ports of its
    banks), ERR_FIELD for a residual or buffer before the gradient, ERR_SHAPE for a short
    buffer or a hull past the engine, ERR_BANK for ranges sharing a bank, against the ISA;
    without and with the decoder's register stages (the hull and message checks span both)."""
    cfg = dataclasses.replace(CFG, ranks=ranks, bank_depth=2048, decode_stages=stages)
    rng = random.Random(20 + ranks)
    words = [random_topk_allreduce(rng, cfg) for _ in range(400)]
    check_collective_words(words, cfg, ranks)
    if ranks > 1:
        seen = {expected(w, 0, 0, cfg)[1] for w in words}
        assert Status.ERR_BANK in seen, seen


def random_sendrecv(rng: random.Random, cfg: CoreConfig) -> int:
    """A SENDRECV with fields at the edges of every check (check_sendrecv, the overlap rule)."""
    D, L = cfg.bank_depth, cfg.lines
    starts = [0, 1, D - 1, D, 2 * D + 3, L - 8, L - 1, L]
    counts = [0, 0, 1, 2, 7, 8, D, (1 << 16) // cfg.size, (1 << 16) - 1]
    a = rng.choice(starts)
    b = rng.choice(starts + [a, a + 1, a + 7, max(a - 1, 0)])
    return encode(Op.SENDRECV, a=a % (1 << 16), lines=rng.choice(counts), b=b % (1 << 16),
                  rlines=rng.choice(counts), timeout=rng.choice([0, 1, 0xFFFF, (1 << 24) - 1]),
                  sdir=int(rng.random() < 0.2), rdir=int(rng.random() < 0.2))


@pytest.mark.parametrize("ranks,reverse,stages", [(1, False, 0), (2, False, 0), (3, True, 0),
                                                  (2, False, 2), (3, True, 2)])
def test_decoder_sendrecv_matches_isa(ranks, reverse, stages):
    """SENDRECV: every status (ERR_OPCODE without the engine; ERR_FIELD, ERR_SHAPE, ERR_ADDR
    for overlapping or out-of-range ranges, ERR_FIELD for a direction bit without reverse
    links), its two ranges (read-only, write-only; an empty one absent) and the bank mask,
    against the ISA's Python check; without and with the decoder's register stages."""
    cfg = dataclasses.replace(CFG, ranks=ranks, reverse_links=reverse, decode_stages=stages)
    rng = random.Random(10 + ranks)
    check_collective_words([random_sendrecv(rng, cfg) for _ in range(500)], cfg, ranks)


def test_sendrecv_named_cases():
    """The SENDRECV rules by name, in the Python check and the decoder alike: ranges that
    touch are legal, any overlap (also exact) is not, one empty range is legal, both are not,
    the hull of the two ranges must fit the engine's 65,536 words."""
    cfg = dataclasses.replace(CFG, ranks=2, bank_depth=4096)     # 131,072 words
    S, D = cfg.size, cfg.bank_depth
    full = (1 << 16) // S          # lines the engine's word addresses reach
    cases = {
        "touching": (dict(a=0, lines=8, b=8, rlines=8), Status.OK),
        "send_only": (dict(a=5, lines=3), Status.OK),
        "recv_only": (dict(b=5, rlines=3), Status.OK),
        "nothing": (dict(a=5, b=9), Status.ERR_SHAPE),
        "exact_overlap": (dict(a=0, lines=8, b=0, rlines=8), Status.ERR_ADDR),
        "one_line_overlap": (dict(a=0, lines=8, b=7, rlines=8), Status.ERR_ADDR),
        "hull_fits": (dict(a=0, lines=1, b=full - 1, rlines=1), Status.OK),
        "hull_too_wide": (dict(a=0, lines=1, b=full, rlines=1), Status.ERR_SHAPE),
        "zero_timeout": (dict(a=0, lines=1, b=D, rlines=1, timeout=0), Status.ERR_FIELD),
        "send_back_without_reverse_links": (dict(a=0, lines=1, b=D, rlines=1, sdir=1),
                                            Status.ERR_FIELD),
        "receive_from_next_without_reverse_links": (dict(b=D, rlines=1, rdir=1),
                                                    Status.ERR_FIELD),
    }
    assert cfg.lines > full, "the hull case needs a scratchpad wider than the engine's reach"
    words = [encode(Op.SENDRECV, **{"timeout": 100, **f}) for f, _ in cases.values()]
    got = run_decoder([(w, 0, 0, 1) for w in words], cfg)
    for (name, (_, want)), word, (status, *_rest) in zip(cases.items(), words, got):
        assert expected(word, 0, 0, cfg)[1] == want, name
        assert status == want, f"{name}: {status} != {want}"


@pytest.mark.parametrize("stages", [0, 2])
def test_decoder_named_cases(stages):
    D = CFG.bank_depth
    cases = {
        # FWD with A, B, C in banks 0, 1, 2: legal
        "fwd_ok": (encode(Op.MATMUL, mode=0, M=8, K=8, N=8, a=0, b=D, c=2 * D), Status.OK),
        # A and C in one bank: both need its read port
        "fwd_same_bank": (encode(Op.MATMUL, mode=0, M=8, K=8, N=8, a=0, b=D, c=100),
                          Status.ERR_BANK),
        # C runs past the end of the scratchpad
        "fwd_past_end": (encode(Op.MATMUL, mode=0, M=8, K=8, N=8, a=0, b=D,
                                c=CFG.lines - 3), Status.ERR_ADDR),
        # in-place ReLU (d == a): legal
        "relu_in_place": (encode(Op.VEC, vop=1, rows=4, cols=8, a=0, d=0), Status.OK),
        # d overlaps a shifted by one line: rejected
        "relu_shifted": (encode(Op.VEC, vop=1, rows=4, cols=8, a=0, d=1), Status.ERR_ADDR),
        # bias add reading a and b from one bank: rejected
        "add_same_bank": (encode(Op.VEC, vop=0, bcast=1, rows=4, cols=8, a=0, b=64, d=0),
                          Status.ERR_BANK),
        # softmax writing d and e into one bank: rejected
        "sx_de_bank": (encode(Op.SOFTMAX_XENT, rows=4, cols=10, a=0, b=D, d=2 * D,
                              e=2 * D + 100, imm=0x3F800000), Status.ERR_BANK),
        # the gradient scale must be a normal number
        "sx_imm_zero": (encode(Op.SOFTMAX_XENT, rows=4, cols=10, a=0, b=D, d=2 * D,
                               e=3 * D), Status.ERR_FIELD),
        "sx_too_many_classes": (encode(Op.SOFTMAX_XENT, rows=4, cols=CFG.max_classes + 1,
                                       a=0, b=D, d=2 * D, e=3 * D, imm=0x3F800000),
                                Status.ERR_SHAPE),
        "opt_too_long": (encode(Op.OPT, count=(1 << 16) + 1, w=0, m=D, v=2 * D, g=3 * D),
                         Status.ERR_SHAPE),
        "opt_ok": (encode(Op.OPT, count=100, w=0, m=D, v=2 * D, g=3 * D), Status.OK),
        "opt_shared": (encode(Op.OPT, count=100, w=0, m=D, v=2 * D, g=2 * D + 50),
                       Status.ERR_BANK),
        "bad_mode": (encode(Op.MATMUL, mode=3, M=1, K=1, N=1), Status.ERR_FIELD),
        "bad_layer": (encode(Op.MATMUL, layer=CFG.layers, M=1, K=1, N=1, b=D, c=2 * D),
                      Status.ERR_FIELD),
        "zero_loop": (encode(Op.LOOP, count=0), Status.ERR_SHAPE),
        "bad_opcode": (12, Status.ERR_OPCODE),
    }
    got = run_decoder([(w, 0, 0, 1) for w, _ in cases.values()],
                      dataclasses.replace(CFG, decode_stages=stages))
    for (name, (word, want)), (status, *_rest) in zip(cases.items(), got):
        assert expected(word, 0, 0)[1] == want, name
        assert status == want, f"{name}: {status} != {want}"


@pytest.mark.parametrize("stages", [0, 2])
def test_decoder_overlap_edges(stages):
    """A read-only range against a write-only range at every offset around it, with equal and
    unequal lengths (a broadcast bias b of one line against d of ``rows`` lines; a against d
    of the same length): starts equal with ends apart, ends equal with starts apart, touching
    and one line apart, each status as the ISA's check gives it (ERR_ADDR unless the ranges
    coincide or are disjoint)."""
    D = CFG.bank_depth
    d0 = 40
    words = []
    for rows in (1, 2, 3, 5):
        for k in range(-rows - 2, rows + 3):
            # b (1 line) at d0 + k against d (rows lines); a in another bank
            words.append(encode(Op.VEC, vop=0, bcast=1, rows=rows, cols=4, a=3 * D,
                                b=d0 + k, d=d0))
            # a (rows lines) at d0 + k against d (rows lines)
            words.append(encode(Op.VEC, vop=1, rows=rows, cols=4, a=d0 + k, d=d0))
    got = run_decoder([(w, 0, 0, 1) for w in words],
                      dataclasses.replace(CFG, decode_stages=stages))
    seen = set()
    for word, (status, *_rest) in zip(words, got):
        want = expected(word, 0, 0)[1]
        seen.add(want)
        assert status == want, f"{disassemble(word)}: {status} != {want}"
    assert {Status.OK, Status.ERR_ADDR} <= seen


@pytest.mark.parametrize("cfg", [dataclasses.replace(CFG, decode_stages=2), CFG.fpga()],
                         ids=["tiny-staged", "tiny-fpga"])
def test_decoder_ranges_and_banks_of_every_word(cfg):
    """Every present range (start, lines) and its bank mask, and their union, against
    :func:`operand_ranges` for every word, whatever its status: ranges past the scratchpad's
    end (an end, start, product or loop span of ``lines`` or more), zero lines, large loop
    offsets and spans (the decoder sums a range's end from its parts in two stages)."""
    rng = random.Random(99)
    L, D = cfg.lines, cfg.bank_depth
    cases = []
    for _ in range(500):
        word = random_instruction(rng, cfg)
        offset = rng.choice([0, 0, 1, D - 1, L - 1, L, L + 1, 1 << 20, (1 << 32) - 1])
        span = rng.choice([0, 0, 1, D, L - 1, L, (1 << 31) + 5])
        cases.append((word, offset, span, 1))
    got = run_decoder(cases, cfg)
    checked = 0
    for (word, offset, span, _), (_, banks, hw_ranges, _) in zip(cases, got):
        op, f = decode(word)
        if op not in ARG_LAYOUTS:
            continue
        want = []
        union = 0
        for r in operand_ranges(op, f, cfg.size, offset=offset, span=span):
            mask = sum(1 << b for b in r.banks(D) if b < cfg.banks)
            union |= mask
            want.append((r.start, r.lines, mask))
        hw = [(r["start"], r["lines"], r["banks"]) for r in hw_ranges if r["read"] or r["write"]]
        assert sorted(hw) == sorted(want), f"{disassemble(word)} +{offset} ~{span}: {hw} != {want}"
        assert banks == union, f"{disassemble(word)}: banks {banks:#x} != {union:#x}"
        checked += bool(want)
    assert checked > 200
