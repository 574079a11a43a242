"""ALLREDUCE in the golden model: the ISA check, CoreModel's execution of it (sim/model/core.py),
N cores in a ring (sim/model/multicore.py), the compiled data-parallel program
(Compiled.dataparallel_program) and DataParallel(engine=True) against the host-mediated mode."""
import dataclasses

import numpy as np
import pytest

from hdl.config import BFPConfig
from hdl.core.config import CoreConfig
from hdl.core.isa import (Op, Status, Vop, assemble, check_allreduce, check_program_for, decode,
                          disassemble, encode)
from hdl.multi.config import CollComp, CollStatus
from sim.host.compiler import MLP, allreduce_seg_lines, compile_mlp
from sim.host.dataparallel import DataParallel
from sim.host.optim import Adam, SGD
from sim.model.collective import ring_allreduce, segments, sum_order, validate
from sim.model.compress import TopK
from sim.model.core import CoreModel
from sim.model.multicore import POISON_BITS, MultiCoreModel
from sim.tb.core_cases import mlp_params

HALT = encode(Op.HALT)
S = 4                       # the tiny preset's lanes
D = 2048                    # its bank depth: line b * D is bank b


def _cfg(ranks):
    return dataclasses.replace(CoreConfig.preset("tiny"), ranks=ranks)


def _ar(a=0, lines=8, seg=4, timeout=100, comp=0, width=0, poison=0, b=0, g=0, glines=0,
        rounding=0):
    return dict(a=a, lines=lines, seg=seg, timeout=timeout, comp=comp, width=width,
                poison=poison, b=b, g=g, glines=glines, rounding=rounding)


def _wide(rng, shape):
    """Finite FP32 values over many decades and both signs (the sum order changes bits)."""
    mag = rng.random(shape) * 2.0 ** rng.integers(-20, 20, shape)
    return (mag * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


# ---- the ISA check ------------------------------------------------------------------------------
# (fields, status) on a tiny core with ranks = 4: S = 4, groups of 16 words, widths 2..8,
# 16-bit timeouts, 65536 words
CHECK_TABLE = [
    (_ar(), Status.OK),
    (_ar(seg=2), Status.OK),
    (_ar(lines=5, seg=2), Status.OK),                                   # ragged, one empty
    (_ar(lines=8, seg=4, comp=1, width=4), Status.OK),
    (_ar(comp=3), Status.ERR_FIELD),                                    # unknown comp
    # top-k: 32 words, one segment of TopK(): 16 pairs = 4 index + 16 value words, 4 ranks
    # -> 80 words = 20 lines of buffer; residual and buffer in banks 1 and 2 (2048 lines each)
    (_ar(comp=2, b=2048, g=4096, glines=20), Status.OK),
    (_ar(comp=2, b=2048, g=4096, glines=20, seg=0, width=9), Status.OK),    # unused fields
    (_ar(comp=2, a=100, b=50, g=4096, glines=20), Status.ERR_FIELD),         # b before a
    (_ar(comp=2, a=100, b=2048, g=99, glines=20), Status.ERR_FIELD),         # g before a
    (_ar(comp=2, b=2048, g=4096, glines=20, timeout=0), Status.ERR_FIELD),
    (_ar(comp=2, b=2048, g=4096, glines=19), Status.ERR_SHAPE),              # buffer short
    (_ar(comp=2, lines=0, b=2048, g=4096, glines=20), Status.ERR_SHAPE),
    (_ar(comp=2, b=2048, g=16365, glines=20), Status.ERR_SHAPE),             # hull > 65536
    (_ar(lines=8, seg=4, comp=1, width=5), Status.ERR_FIELD),           # width not in widths
    (_ar(lines=8, seg=4, comp=1, width=0), Status.ERR_FIELD),
    (_ar(timeout=0), Status.ERR_FIELD),
    (_ar(lines=8, seg=1), Status.ERR_FIELD),                            # seg * ranks < lines
    (_ar(lines=6, seg=4, comp=1, width=4), Status.OK),                  # 24 words: not groups
    (_ar(lines=8, seg=3, comp=1, width=4), Status.OK),                  # 12-word segments
    (_ar(lines=13, seg=3, comp=1, width=4), Status.ERR_FIELD),          # seg * ranks < lines
    (_ar(lines=0, seg=1), Status.ERR_SHAPE),
    (_ar(lines=0, seg=0), Status.ERR_SHAPE),
    (_ar(lines=16385, seg=4097), Status.ERR_SHAPE),                     # 65540 words > depth
    (_ar(lines=0, seg=0, timeout=0), Status.ERR_FIELD),                 # ERR_FIELD first
]


@pytest.mark.parametrize("fields,status", CHECK_TABLE)
def test_check_allreduce_table(fields, status):
    coll = _cfg(4).collective
    assert check_allreduce(fields, S=S, collective=coll) == status
    assert check_allreduce(fields, S=S, collective=None) == Status.ERR_OPCODE
    if fields["comp"] <= 1:          # encodable (a 1-bit field, as the engine's command's)
        # the engine answers OK exactly for what the check accepts (it never sees BAD_*)
        eng = validate(coll, op=0, base=0, length=fields["lines"] * S, seg=fields["seg"] * S,
                       timeout=fields["timeout"], comp=fields["comp"], width=fields["width"])
        assert (eng == CollStatus.OK) == (status == Status.OK)
        # the program check gives the same status, at the ALLREDUCE's pc
        prog = [encode(Op.FENCE), encode(Op.ALLREDUCE, **fields), HALT]
        assert check_program_for(prog, _cfg(4)) == (status, 1 if status else 0)
    elif fields["comp"] == 2 and status == Status.OK:
        f = fields
        eng = validate(coll, op=0, base=0, length=f["lines"] * S, rbase=(f["b"] - f["a"]) * S,
                       gbase=(f["g"] - f["a"]) * S, timeout=f["timeout"], comp=2)
        assert eng == CollStatus.OK
        prog = [encode(Op.FENCE), encode(Op.ALLREDUCE, **fields), HALT]
        assert check_program_for(prog, _cfg(4)) == (Status.OK, 0)


def test_allreduce_rejected_on_a_one_rank_core():
    """ranks = 1: ERR_OPCODE at the ALLREDUCE's pc, and CoreModel.run executes nothing."""
    prog = [encode(Op.VEC, vop=Vop.ZERO, rows=1, cols=4, d=0), encode(Op.ALLREDUCE, **_ar()),
            HALT]
    one = CoreModel(CoreConfig.preset("tiny"))
    assert check_program_for(prog, one.config) == (Status.ERR_OPCODE, 1)
    one.mem[0] = 7
    one.load_program(prog)
    assert one.run() == (Status.ERR_OPCODE, 1)
    assert np.all(one.mem[0] == 7) and one.counters["instructions"] == 0
    assert check_program_for(prog, _cfg(2)) == (Status.OK, 0)


def test_allreduce_assemble_round_trip():
    f = _ar(a=0x1803, lines=300, seg=75, timeout=0xFFFF, comp=1, width=6, poison=1,
            rounding=1)
    word = encode(Op.ALLREDUCE, **f)
    text = disassemble(word)
    assert text == ("ALLREDUCE a=0x1803 lines=300 seg=75 timeout=65535 comp=1 width=6 "
                    "poison=1 b=0x0 g=0x0 glines=0 rounding=1")
    assert decode(word) == (Op.ALLREDUCE, f)
    f2 = _ar(a=3, lines=30, timeout=9, comp=2, poison=1, b=0x800, g=0x1000, glines=21, seg=0)
    w2 = encode(Op.ALLREDUCE, **f2)
    assert assemble(disassemble(w2)) == w2 and decode(w2) == (Op.ALLREDUCE, f2)
    assert assemble(text) == word
    assert decode(word) == (Op.ALLREDUCE, f)


# ---- CoreModel alone ---------------------------------------------------------------------------
def test_single_core_run_raises_and_executes_nothing():
    core = CoreModel(_cfg(2))
    prog = [encode(Op.VEC, vop=Vop.ZERO, rows=1, cols=4, d=0), encode(Op.ALLREDUCE, **_ar()),
            HALT]
    core.mem[0] = 7
    core.load_program(prog)
    with pytest.raises(RuntimeError, match="ALLREDUCE at pc 1.*MultiCoreModel"):
        core.run()
    assert np.all(core.mem[0] == 7) and core.counters["instructions"] == 0
    # an ALLREDUCE after the HALT is never executed: the run is a plain run
    core.load_program([prog[0], HALT, prog[1]])
    assert core.run() == (Status.OK, 0)
    assert np.all(core.mem[0] == 0) and core.counters["allreduces"] == 0


# ---- N cores -----------------------------------------------------------------------------------
def _load(multi, prog, bases, vectors, lines):
    for core, base, v in zip(multi.cores, bases, vectors):
        core.load_program(prog)
        core.write_lines(base, v.view(np.uint32).reshape(lines, S))


@pytest.mark.parametrize("ranks", [2, 4])
def test_allreduce_sum_order_and_layout(ranks):
    """FP32 links: every core's lines hold, for word i of segment k = i // (seg * S), the sum
    ((x_k + x_{k+1}) + ...) + x_{k-1} (ranks mod N) of the ranks' word i, computed here
    independently; ragged and empty segments; the region at another line on each core; the
    lines around it untouched."""
    rng = np.random.default_rng(ranks)
    lines, seg = 5, 2 if ranks == 4 else 3
    multi = MultiCoreModel(_cfg(ranks))
    bases = [3 * D + 10 + 7 * r for r in range(ranks)]       # `a` is per core
    xs = [_wide(rng, lines * S) for _ in range(ranks)]
    for core in multi.cores:
        core.mem[:] = 0x3F800000                               # 1.0 around the region
    for core, base, x in zip(multi.cores, bases, xs):
        core.load_program([encode(Op.ALLREDUCE, **_ar(a=base, lines=lines, seg=seg)), HALT])
        core.write_lines(base, x.view(np.uint32).reshape(lines, S))
    assert multi.run() == [(Status.OK, 0)] * ranks
    want = np.empty(lines * S, np.float32)
    naive = np.empty(lines * S, np.float32)
    for k, (s0, n) in enumerate(segments(lines * S, seg * S, ranks)):
        order = sum_order(k, ranks)
        assert order == [(k + j) % ranks for j in range(ranks)]
        for i in range(s0, s0 + n):
            acc = xs[order[0]][i]
            for r in order[1:]:
                acc = np.float32(acc + xs[r][i])
            want[i] = acc
            acc = xs[0][i]
            for r in range(1, ranks):
                acc = np.float32(acc + xs[r][i])
            naive[i] = acc
    if ranks > 2:             # (two ranks' sums commute)
        assert not np.array_equal(want, naive)    # the order matters on these values
    for core, base in zip(multi.cores, bases):
        got = core.read_lines(base, lines).reshape(-1)
        assert np.array_equal(got, want.view(np.uint32))
        assert np.all(core.read_lines(base - 1, 1) == 0x3F800000)
        assert np.all(core.read_lines(base + lines, 1) == 0x3F800000)
        assert core.counters["allreduces"] == 1 and core.counters["instructions"] == 2
        assert [op for op, _ in core.trace] == [Op.ALLREDUCE, Op.HALT]
        assert core.trace[0][1] == _ar(a=base, lines=lines, seg=seg)
        assert core.coll_flags == 0
    assert multi.allreduces == 1 and multi.flags == [0] * ranks
    assert multi.poisoned == [False] * ranks and len(multi.history) == 1


def test_allreduce_bfp_equals_ring_allreduce_with_flags():
    """BFP-4 links, N = 2: the cores hold ring_allreduce's result (not the FP32 one); a rank
    whose vector holds an infinity reports it in its flags (bit 1), its group crossing as a
    NaN group: that group is canonical NaNs on every rank (the rest as if it were zeros), and
    the rank that relays it flags a NaN (bit 0)."""
    rng = np.random.default_rng(7)
    lines, ranks = 8, 2
    multi = MultiCoreModel(_cfg(ranks))
    xs = [_wide(rng, lines * S) for _ in range(ranks)]
    xs[1][20] = np.inf
    prog = [encode(Op.ALLREDUCE, **_ar(a=D, lines=lines, seg=4, comp=1, width=4)), HALT]
    _load(multi, prog, [D] * ranks, xs, lines)
    assert multi.run() == [(Status.OK, 0)] * ranks
    words = [x.view(np.uint32) for x in xs]
    flags = [0, 0]
    want = ring_allreduce(words, 16, comp=CollComp.BFP, bfp=(BFPConfig(), 4), flags=flags)
    fp32 = ring_allreduce(words, 16)
    got = [c.read_lines(D, lines).reshape(-1) for c in multi.cores]
    assert all(np.array_equal(g, want[0]) for g in got)
    assert not np.array_equal(got[0], fp32[0])
    zeroed = [words[0], words[1].copy()]
    zeroed[1][16:32] = 0
    rest = ring_allreduce(zeroed, 16, comp=CollComp.BFP, bfp=(BFPConfig(), 4))[0]
    assert np.all(got[0][16:32] == POISON_BITS)
    assert np.array_equal(got[0][:16], rest[:16]) and np.array_equal(got[0][32:], rest[32:])
    assert multi.flags == flags and flags == [1, 2]
    assert [c.coll_flags for c in multi.cores] == flags
    assert multi.coll_state(1) == {"coll_status": CollStatus.OK, "coll_flags": flags[1]}


def _poison_program(poison, comp=0, width=0):
    """MATMUL FWD of A (4 x 4 at line 0) by B (line D) into C (line 2D), then ALLREDUCE of
    lines 3D .. 3D + 7 (separate from the matmul's)."""
    return [encode(Op.MATMUL, mode=0, M=4, K=4, N=4, a=0, b=D, c=2 * D),
            encode(Op.ALLREDUCE, **_ar(a=3 * D, lines=8, seg=4, comp=comp, width=width,
                                       poison=poison)),
            HALT]


@pytest.mark.parametrize("poison", [0, 1])
def test_poison_fp32(poison):
    """A NaN reaches rank 1's matmul converter (run flag bit 0; the converter sends its group as
    zeros, so C stays finite). poison = 1: rank 1 contributes the canonical NaN as word 0, so
    every rank's word 0 is the canonical NaN and the rest is the plain sum; poison = 0: all
    finite."""
    rng = np.random.default_rng(11)
    multi = MultiCoreModel(_cfg(2))
    xs = [_wide(rng, 32) for _ in range(2)]
    _load(multi, _poison_program(poison), [3 * D] * 2, xs, 8)
    for r, core in enumerate(multi.cores):
        A = rng.random((4, 4)).astype(np.float32)
        if r == 1:
            A[2, 1] = np.nan
        core.set_matrix(0, A)
        core.set_matrix(D, rng.random((4, 4)).astype(np.float32))
    assert multi.run() == [(Status.OK, 0)] * 2
    assert [c.run_flags for c in multi.cores] == [0, 1]
    assert np.all(np.isfinite(multi.cores[1].get_matrix(2 * D, 4, 4).view(np.float32)))
    plain = ring_allreduce([x.view(np.uint32) for x in xs], 16)[0]
    for core in multi.cores:
        got = core.read_lines(3 * D, 8).reshape(-1)
        assert np.array_equal(got[1:], plain[1:])
        assert got[0] == (POISON_BITS if poison else plain[0])
    assert multi.poisoned == [False, bool(poison)]


def test_poison_bfp_group_crosses_as_nans():
    """With BFP links the poisoned word's group crosses as a NaN group: every rank holds
    ring_allreduce of the poisoned vectors, that group canonical NaNs (the rest finite), and
    every rank flags a NaN (bit 0): the poisoned one sent it, the other relayed it."""
    rng = np.random.default_rng(12)
    multi = MultiCoreModel(_cfg(2))
    xs = [_wide(rng, 32) for _ in range(2)]
    _load(multi, _poison_program(1, comp=1, width=8), [3 * D] * 2, xs, 8)
    for r, core in enumerate(multi.cores):
        A = rng.random((4, 4)).astype(np.float32)
        A[0, 0] = np.nan if r == 0 else A[0, 0]
        core.set_matrix(0, A)
    assert multi.run() == [(Status.OK, 0)] * 2
    vecs = [x.view(np.uint32).copy() for x in xs]
    vecs[0][0] = POISON_BITS
    flags = [0, 0]
    want = ring_allreduce(vecs, 16, comp=CollComp.BFP, bfp=(BFPConfig(), 8), flags=flags)
    for core in multi.cores:
        got = core.read_lines(3 * D, 8).reshape(-1)
        assert np.array_equal(got, want[0]) and np.all(got[:16] == POISON_BITS)
        assert np.all(np.isfinite(got[16:].view(np.float32)))
    assert multi.flags == flags == [1, 1]
    assert multi.poisoned == [True, False]


def test_allreduce_in_program_order_and_in_a_loop():
    """The ALLREDUCE's result is what the next instructions read (program order); inside a loop
    it runs once per iteration (small integers: every sum exact)."""
    ranks, lines = 4, 2
    multi = MultiCoreModel(_cfg(ranks))
    prog = [encode(Op.ALLREDUCE, **_ar(a=D, lines=lines, seg=1)),
            encode(Op.VEC, vop=Vop.COPY, rows=1, cols=lines * S, a=D, d=2 * D),
            encode(Op.LOOP, count=2, stride=0),
            encode(Op.ALLREDUCE, **_ar(a=D, lines=lines, seg=1)),
            encode(Op.ENDLOOP), HALT]
    xs = [np.arange(8, dtype=np.float32) + 10 * r for r in range(ranks)]
    _load(multi, prog, [D] * ranks, xs, lines)
    assert multi.run() == [(Status.OK, 0)] * ranks
    total = sum(xs)
    for core in multi.cores:
        assert np.array_equal(core.read_lines(2 * D, lines).reshape(-1).view(np.float32),
                              total)
        assert np.array_equal(core.read_lines(D, lines).reshape(-1).view(np.float32),
                              total * ranks * ranks)
        assert core.counters["allreduces"] == 3
    assert multi.allreduces == 3


def test_apply_runs_the_cores_together():
    """apply: one action list per rank; each rank's k-th run with the others' k-th; results per
    core as CoreModel.apply's."""
    multi = MultiCoreModel(_cfg(2))
    prog = [encode(Op.ALLREDUCE, **_ar(a=0, lines=1, seg=1)), HALT]
    ones = np.full((1, S), 0x3F800000, np.uint32)
    acts = [[("write", 0, ones), ("program", prog), ("run",), ("read", "x", 0, 1), ("run",),
             ("read", "y", 0, 1), ("counters",)] for _ in range(2)]
    res = multi.apply(acts)
    for r in res:
        assert r["run"] == [(Status.OK, 0), (Status.OK, 0)]
        assert np.all(r["x"].view(np.float32) == 2) and np.all(r["y"].view(np.float32) == 4)
        assert r["counters"]["allreduces"] == 2
    with pytest.raises(ValueError, match="one list per rank"):
        multi.apply(acts[:1])
    with pytest.raises(ValueError, match="takes no arguments"):
        multi.apply([[("run", 1)], []])


@pytest.mark.parametrize("field,value", [("lines", 4), ("seg", 3), ("comp", 1)])
def test_mismatched_fields_raise(field, value):
    ranks = 4
    multi = MultiCoreModel(_cfg(ranks))
    base = _ar(a=0, lines=8, seg=4, comp=0, width=4)
    for r, core in enumerate(multi.cores):
        f = dict(base, **({field: value} if r == 2 else {}))
        core.load_program([encode(Op.ALLREDUCE, **f), HALT])
    with pytest.raises(ValueError, match=f"{field!r} differs between rank 0.*rank 2"):
        multi.run()


def test_per_core_fields_and_missing_peers():
    """`a`, `timeout` and `poison` may differ; a rank that halts, is not running or had its
    program rejected while the others wait is an error (the hardware would time out)."""
    multi = MultiCoreModel(_cfg(2))
    multi.cores[0].load_program([encode(Op.ALLREDUCE, **_ar(a=5, lines=2, timeout=9)), HALT])
    multi.cores[1].load_program([encode(Op.ALLREDUCE, **_ar(a=9, lines=2, poison=1)), HALT])
    assert multi.run() == [(Status.OK, 0)] * 2
    with pytest.raises(ValueError, match="rank 1 not running"):
        multi.run([0])
    multi.cores[1].load_program([HALT])
    with pytest.raises(ValueError, match="rank 1 halted.*ERR_LINK"):
        multi.run()
    multi.cores[1].load_program([encode(Op.ALLREDUCE, **_ar(timeout=0)), HALT])
    with pytest.raises(ValueError, match="rank 1 rejected its program"):
        multi.run()
    multi.cores[0].load_program([encode(Op.ALLREDUCE, **_ar(timeout=0)), HALT])
    assert multi.run() == [(Status.ERR_FIELD, 0)] * 2
    with pytest.raises(ValueError, match="ranks >= 2"):
        MultiCoreModel(CoreConfig.preset("tiny"))


# ---- compiler -----------------------------------------------------------------------------------
LAYERS = (16, 12, 4)      # grads: 48 + 3 + 12 + 1 = 64 lines of 4 words (whole BFP groups)


def test_dataparallel_program():
    cfg = _cfg(4)
    c = compile_mlp(MLP(layers=LAYERS, batch=4, one_pass=False, micro_batches=2), cfg)
    line, lines = c.regions["grads"]
    assert lines == 64
    for comp, width, seg in ((0, 8, 16), (1, 4, 16)):
        prog = c.dataparallel_program(comp=comp, width=width, timeout=500)
        assert check_program_for(prog, cfg) == (Status.OK, 0)
        pc = [decode(w)[0] for w in prog].index(Op.ALLREDUCE)
        assert decode(prog[pc + 1])[0] == Op.OPT
        assert prog[:pc] + prog[pc + 1:] == c.program
        assert decode(prog[pc])[1] == _ar(a=line, lines=lines, seg=seg, timeout=500,
                                          comp=comp, width=width, poison=1)
    # 43 lines over 4 ranks: 11 lines; BFP rounds to whole groups of 16 words (4 lines): 12
    assert allreduce_seg_lines(43, 4, 4) == 11 and allreduce_seg_lines(43, 4, 4, 16) == 12
    assert allreduce_seg_lines(326, 4, 8, 16) == 82 and allreduce_seg_lines(5, 4, 6, 16) == 8
    prog = c.dataparallel_program(seg=64)
    assert decode(prog[[decode(w)[0] for w in prog].index(Op.ALLREDUCE)])[1]["seg"] == 64
    # the split programs still work on a ranks >= 2 config
    back, opt = c.split_programs()
    assert [decode(w)[0] for w in opt] == [Op.OPT, Op.HALT]
    with pytest.raises(ValueError, match="ranks >= 2"):
        compile_mlp(MLP(layers=LAYERS, batch=4, one_pass=False),
                    CoreConfig.preset("tiny")).dataparallel_program()
    with pytest.raises(ValueError, match="one_pass=False"):
        compile_mlp(MLP(layers=LAYERS, batch=4), cfg).dataparallel_program()
    odd = compile_mlp(MLP(layers=(16, 8, 4), batch=4, one_pass=False), cfg)   # 43 lines
    odd.dataparallel_program(comp=0)
    # 172 words, not whole groups of 16: the engine pads the last segment's group on the link
    assert check_program_for(odd.dataparallel_program(comp=1, width=4), cfg) == (Status.OK, 0)
    with pytest.raises(ValueError, match="ERR_FIELD"):
        c.dataparallel_program(seg=15)          # 15 * 4 < 64 lines


# ---- data parallelism on the engine ------------------------------------------------------------
def _params(seed, layers=LAYERS):
    return mlp_params(seed, layers)


@pytest.mark.parametrize("ranks,compression,layers,rounding", [
    (2, "none", LAYERS, 0), (4, "none", LAYERS, 0), (2, "bfp", LAYERS, 0),
    (4, "bfp", LAYERS, 0),
    # 62 gradient lines (248 words) over 4 ranks: segments of 16 lines, not 62 words
    (4, "none", (16, 10, 4), 0),
    # BFP: the 62 lines padded to 64 (whole groups of 16 words, compile_mlp param_align)
    (2, "bfp", (16, 10, 4), 0),
    # stochastic rounding and truncation on the links: each rank's LFSR carried over steps
    (4, "bfp", LAYERS, 1), (2, "bfp", (16, 10, 4), 2)])
def test_engine_equals_host_mediated(ranks, compression, layers, rounding):
    """One program with the ALLREDUCE per core (MultiCoreModel) == the host's all-reduce between
    a backward and an optimizer program, bit for bit: losses, optimizer status, and every
    core's parameters, gradients and Adam state, over 4 finite steps (BFP: 4-bit links, in
    the rounding given; stochastic rounding and truncation end with other parameters than
    nearest-even)."""
    rng, W, b = _params(ranks * 3 + len(compression), layers)
    desc = MLP(layers=layers, batch=16, optimizer=Adam(lr=0.01))
    host = DataParallel(desc, CoreConfig.preset("tiny"), ranks, compression=compression,
                        width=4, rounding=rounding)
    eng = DataParallel(desc, CoreConfig.preset("tiny"), ranks, compression=compression,
                       width=4, engine=True, rounding=rounding)
    nearest = DataParallel(desc, CoreConfig.preset("tiny"), ranks, compression=compression,
                           width=4) if rounding else None
    assert eng.config.ranks == ranks and eng.seg == host.seg
    if compression == "bfp":
        assert eng.length % 16 == 0 and host.length == eng.length
    ops = [decode(w)[0] for w in eng.program]
    assert ops.count(Op.ALLREDUCE) == 1 and ops[ops.index(Op.ALLREDUCE) + 1] == Op.OPT
    host.init(W, b)
    eng.init(W, b)
    if nearest:
        nearest.init(W, b)
    for t in range(1, 5):
        x, y = rng.random((16, 16)).astype(np.float32), rng.integers(0, 4, 16)
        x[:, :2] *= 100                     # a wide range of gradients: the order matters
        h, e = host.step(x, y, t), eng.step(x, y, t)
        if nearest:
            nearest.step(x, y, t)
        assert e["runs"] == [(Status.OK, 0)] * ranks
        assert not h["poisoned"] and not e["poisoned"] and not e["skipped"]
        assert np.array_equal(h["losses"].view(np.uint32), e["losses"].view(np.uint32))
        assert h["status"] == e["status"]
        for r in range(ranks):
            a, c = host.read(r), eng.read(r)
            assert a.keys() == c.keys() == {"params", "grads", "m", "v"}
            for k in a:
                assert np.array_equal(a[k], c[k]), (t, r, k)
    assert eng.multi.allreduces == 4 and eng.bytes_ratio == host.bytes_ratio
    if nearest:
        assert not np.array_equal(nearest.read(0)["params"], eng.read(0)["params"])


def _nan_step(engine, compression="none", poison=True):
    rng, W, b = _params(5)
    desc = MLP(layers=LAYERS, batch=16, optimizer=SGD(lr=0.1))
    dp = DataParallel(desc, CoreConfig.preset("tiny"), 2, compression=compression, width=8,
                      engine=engine)
    if engine and not poison:
        dp.program = [encode(Op.ALLREDUCE, **dict(decode(w)[1], poison=0))
                      if decode(w)[0] == Op.ALLREDUCE else w for w in dp.program]
    dp.init(W, b)
    before = dp.read(0)["params"]
    x, y = rng.random((16, 16)).astype(np.float32), rng.integers(0, 4, 16)
    x[15, 3] = np.nan                                      # rank 1's shard only
    out = dp.step(x, y, 1)
    return dp, out, before


def test_engine_poison_makes_every_core_skip():
    """FP32 links: a NaN in rank 1's input reaches its matmul converters (a run flag; the groups
    go as zeros, so its gradients stay finite); its poisoned ALLREDUCE makes every core skip:
    parameters unchanged and equal on all cores, as the host-mediated mode (whose state the
    engine's equals bit for bit). Without the poison only rank 1 (its own flags) skips."""
    dp, out, before = _nan_step(engine=True)
    assert out["poisoned"] and out["skipped"] and dp.multi.poisoned == [False, True]
    assert np.all(np.isfinite(dp.cores[1].read_lines(*dp._grads)[1:].view(np.float32)))
    host, hout, _ = _nan_step(engine=False)
    assert hout["skipped"]
    for r in range(2):
        got = dp.read(r)
        assert np.array_equal(got["params"], before)
        assert got["grads"].reshape(-1)[0] == POISON_BITS
        assert all(np.array_equal(got[k], host.read(r)[k]) for k in got)
    dp0, out0, before0 = _nan_step(engine=True, poison=False)
    assert not out0["poisoned"] and not out0["skipped"]          # rank 0's status
    assert not np.array_equal(dp0.read(0)["params"], before0)
    assert np.array_equal(dp0.read(1)["params"], before0)


def test_engine_bfp_poison_makes_every_core_skip():
    """BFP links: the poisoned group crosses as a NaN group (flagged by rank 1, which reduces
    segment 0 and sends it on; rank 0 only receives it), so every core's two-pass OPT sees
    NaNs and skips: parameters
    unchanged and equal on both cores, and the optimizer state equal to the host-mediated
    mode's (its gradients differ: it poisons word 0 alone, the link a whole group)."""
    dp, out, before = _nan_step(engine=True, compression="bfp")
    assert dp.multi.poisoned == [False, True] and dp.multi.flags == [0, 1]
    assert out["skipped"]
    host, hout, _ = _nan_step(engine=False, compression="bfp")
    assert hout["skipped"]
    for r in range(2):
        got, want = dp.read(r), host.read(r)
        assert np.array_equal(got["params"], before)
        assert np.all(got["grads"].reshape(-1)[:16] == POISON_BITS)
        for k in got:
            if k != "grads":
                assert np.array_equal(got[k], want[k]), (r, k)


@pytest.mark.parametrize("ranks", [2, 4])
def test_engine_topk_equals_host_mediated(ranks):
    """Top-k on the engine (one ALLREDUCE comp=2 per program, the residual and message buffer
    in free banks of their own) == the host's topk_allreduce between a backward and an
    optimizer program, bit for bit over 4 steps: losses, optimizer status, every core's
    parameters, gradients, Adam state, and its residual (the host's TopKState)."""
    rng, W, b = _params(40 + ranks)
    desc = MLP(layers=LAYERS, batch=16, optimizer=Adam(lr=0.01))
    host = DataParallel(desc, CoreConfig.preset("tiny"), ranks, compression="topk")
    eng = DataParallel(desc, CoreConfig.preset("tiny"), ranks, compression="topk", engine=True)
    tr = eng.topk_regions
    (ar, f), = [decode(w) for w in eng.program if decode(w)[0] == Op.ALLREDUCE]
    assert f["comp"] == 2 and (f["b"], f["g"], f["glines"]) == (tr["b"], tr["g"], tr["glines"])
    D = eng.config.bank_depth
    banks = [set(range(s // D, (s + n - 1) // D + 1))
             for s, n in ((f["a"], f["lines"]), (f["b"], f["lines"]), (f["g"], f["glines"]))]
    assert not (banks[0] & banks[1] or banks[0] & banks[2] or banks[1] & banks[2]), banks
    c = eng.compiled
    for s0, n in ((f["b"], f["lines"]), (f["g"], f["glines"])):     # lines no buffer uses
        assert s0 >= f["a"] and all(s0 + n <= c.place[k] or c.place[k] + bf.lines <= s0
                                    for k, bf in c._b.bufs.items())
    host.init(W, b)
    eng.init(W, b)
    line, lines = eng._grads
    for t in range(1, 5):
        x, y = rng.random((16, 16)).astype(np.float32), rng.integers(0, 4, 16)
        x[:, :2] *= 100
        h, e = host.step(x, y, t), eng.step(x, y, t)
        assert e["runs"] == [(Status.OK, 0)] * ranks
        assert not e["poisoned"] and not e["skipped"]
        assert np.array_equal(h["losses"].view(np.uint32), e["losses"].view(np.uint32))
        assert h["status"] == e["status"]
        for r in range(ranks):
            a, c = host.read(r), eng.read(r)
            for k in a:
                assert np.array_equal(a[k], c[k]), (t, r, k)
            res = eng.cores[r].read_lines(tr["b"], lines).reshape(-1)
            assert np.array_equal(res, host.states[0][r].residual), (t, r)   # one block
            assert np.any(res != 0)              # something was held back
    assert eng.multi.allreduces == 4 and 0 < eng.bytes_ratio < 0.5


def test_engine_topk_poison_makes_every_core_skip():
    """A NaN in rank 1's input raises its run flags; its poisoned top-k ALLREDUCE reads word
    0 as NaN, which has the largest magnitude and is sent, so every core's sum holds NaN at
    word 0 and every two-pass OPT skips: parameters unchanged and equal on all cores."""
    dp, out, before = _nan_step(engine=True, compression="topk")
    assert out["poisoned"] and out["skipped"] and dp.multi.poisoned == [False, True]
    for r in range(2):
        got = dp.read(r)
        assert np.array_equal(got["params"], before)
        assert got["grads"].reshape(-1)[0] == POISON_BITS


def test_engine_topk_config_errors():
    desc = MLP(layers=LAYERS, batch=16)
    with pytest.raises(ValueError, match="top-k engine"):
        DataParallel(desc, CoreConfig.preset("tiny"), 2, compression="topk", engine=True,
                     topk=TopK(seg=64, k=4))
    c = DataParallel(desc, CoreConfig.preset("tiny"), 2, engine=True).compiled
    # per layer needs micro_batches = 1 with top-k as with any link
    loop = compile_mlp(desc.replace(one_pass=False, micro_batches=2),
                       dataclasses.replace(CoreConfig.preset("tiny"), ranks=2))
    with pytest.raises(ValueError, match="micro_batches = 1"):
        loop.dataparallel_program(comp=2, per_layer=True)
    assert c.dataparallel_program(comp=2, per_layer=True)
    one = compile_mlp(desc.replace(one_pass=False), CoreConfig.preset("tiny"))
    with pytest.raises(ValueError, match="top-k collective engine"):
        one.topk_regions()
    # a scratchpad that holds the step but has no free banks of their own for the residual
    full = compile_mlp(MLP(layers=LAYERS, batch=16, optimizer=Adam(lr=0.01)),
                       CoreConfig(size=4, banks=8, bank_depth=64, ranks=2, layers=4,
                                  max_classes=16))
    with pytest.raises(ValueError, match=r"no 64 free lines in banks of their own after line "
                                         r"64 within the engine's reach"):
        full.topk_regions()
