"""The ring all-reduce golden model (sim/model/collective.py): schedule, summation order, the
statuses, and the bound against the exact sum; the point-to-point SENDRECV."""
import numpy as np
import pytest

from hdl.config import BFPConfig
from hdl.multi.config import CollComp, CollectiveConfig, CollOp, CollStatus
from sim.model.bfp import (LFSR, ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE, ROUNDING_MODES,
                           dequantize, quantize)
from sim.model.collective import (CollectiveModel, bfp_allreduce_bound, bfp_link, link_flits,
                                  ring_allreduce,
                                  ring_sendrecv, schedule, segments, sendrecv_flits, sum_order,
                                  validate)
from sim.model.fp32 import QNAN, bits_to_f32, canon, f32_to_bits

#: unit roundoff of binary32
U = 2.0 ** -24


def _vectors(rng, ranks, n, spread=8):
    """Normal values with exponents spread over ``2**±spread`` (cancellation happens)."""
    x = rng.standard_normal((ranks, n)) * 2.0 ** rng.integers(-spread, spread + 1, (ranks, n))
    return [f32_to_bits(v.astype(np.float32)) for v in x]


def _fold(vectors, length, seg):
    """Independent formulation: every element summed left to right in sum_order."""
    ranks = len(vectors)
    out = np.zeros(length, dtype=np.uint32)
    for k, (s0, n) in enumerate(segments(length, seg, ranks)):
        for i in range(s0, s0 + n):
            acc = None
            for r in sum_order(k, ranks):
                v = bits_to_f32(vectors[r][i])
                with np.errstate(all="ignore"):
                    acc = v if acc is None else np.float32(acc + v)
            out[i] = canon(np.float32(acc).view(np.uint32))
    return out


def test_schedule_covers_every_segment_and_ends_reduced():
    for N in (2, 3, 4, 8):
        for r in range(N):
            plan = schedule(r, N)
            assert len(plan) == 2 * (N - 1)
            assert [red for _, _, red in plan] == [True] * (N - 1) + [False] * (N - 1)
            # what rank r sends in step t is what rank r + 1 receives in step t
            nxt = schedule((r + 1) % N, N)
            assert [s for s, _, _ in plan] == [rcv for _, rcv, _ in nxt]
            # after reduce-scatter rank r owns segment r + 1; all-gather receives every
            # other segment once
            assert plan[N - 2][1] == (r + 1) % N
            assert sorted(rcv for _, rcv, _ in plan[N - 1:]) == sorted(
                set(range(N)) - {(r + 1) % N})
        assert sum_order(1, N) == [(1 + j) % N for j in range(N)]


def test_bfp_schedule_has_the_local_step_between_the_phases():
    """With BFP links the ring steps are the plain ones with one local step between the
    reduce-scatter and the all-gather (step N - 1): each rank sends its own segment (the one
    it reduced) to itself, and the all-gather's first step sends it on."""
    for N in (2, 3, 4):
        for r in range(N):
            plan = schedule(r, N, CollComp.BFP)
            own = (r + 1) % N
            assert plan[:N - 1] + plan[N:] == schedule(r, N)
            assert plan[N - 1] == (own, own, False)
            assert plan[N - 2][1] == own               # the segment reduce-scatter left here
            assert plan[N][0] == own and not plan[N][2]


@pytest.mark.parametrize("length,seg,N,expect", [
    (8, 2, 4, [(0, 2), (2, 2), (4, 2), (6, 2)]),
    (7, 2, 4, [(0, 2), (2, 2), (4, 2), (6, 1)]),
    (3, 1, 4, [(0, 1), (1, 1), (2, 1), (3, 0)]),
    (5, 4, 2, [(0, 4), (4, 1)]),
    (1, 1, 2, [(0, 1), (1, 0)]),
])
def test_segments(length, seg, N, expect):
    assert segments(length, seg, N) == expect


@pytest.mark.parametrize("N", [2, 3, 4])
@pytest.mark.parametrize("length", [1, 3, 7, 16])
def test_allreduce_equals_documented_fold_on_every_rank(N, length):
    rng = np.random.default_rng(100 * N + length)
    vecs = _vectors(rng, N, length)
    seg = -(-length // N)
    out = ring_allreduce(vecs, seg)
    ref = _fold(vecs, length, seg)
    for r in range(N):
        np.testing.assert_array_equal(out[r], ref, err_msg=f"rank {r}")


def test_order_is_observable():
    """The documented order is not just any order: a reordering changes a result."""
    big, one = np.float32(2.0 ** 24), np.float32(1.0)
    # segment 0 sums ranks 0, 1, 2: (2**24 + 1) + 1 = 2**24 (each tie rounds to even);
    # ranks 2, 1, 0 would give (1 + 1) + 2**24 = 2**24 + 2
    vecs = [f32_to_bits(np.array([v, 0, 0], dtype=np.float32)) for v in (big, one, one)]
    out = ring_allreduce(vecs, 1)
    assert bits_to_f32(out[0][0]) == big
    assert np.float32(np.float32(one + one) + big) != big


@pytest.mark.parametrize("N", [2, 4])
def test_allreduce_within_recursive_summation_bound_of_exact_sum(N):
    """Only the order differs from the plain sum: each element is a left-to-right float32 sum
    of N terms, so |result - exact| <= gamma_{N-1} * sum|x_i| with
    gamma_k = k*u / (1 - k*u) (Higham, Accuracy and Stability, Thm. 4.4 / eq. 4.4)."""
    rng = np.random.default_rng(7 + N)
    length = 257
    vecs = _vectors(rng, N, length)
    out = bits_to_f32(ring_allreduce(vecs, -(-length // N))[0]).astype(np.float64)
    x = np.stack([bits_to_f32(v).astype(np.float64) for v in vecs])
    exact, mag = x.sum(axis=0), np.abs(x).sum(axis=0)
    k = N - 1
    gamma = k * U / (1 - k * U)
    err = np.abs(out - exact)
    assert np.all(err <= gamma * mag), float(np.max(err / mag))
    # numpy's rank-order float32 sum obeys the same bound, so both are within 2*gamma
    plain = x.astype(np.float32).sum(axis=0, dtype=np.float32).astype(np.float64)
    assert np.all(np.abs(out - plain) <= 2 * gamma * mag)


def test_special_values():
    inf, ninf = np.float32(np.inf), np.float32(-np.inf)
    cols = [  # per element: rank 0, rank 1
        (0.0, -0.0), (-0.0, -0.0), (inf, 1.0), (inf, ninf), (np.nan, 1.0), (1e-45, 1e-45),
        (3.4e38, 3.4e38)]
    vecs = [f32_to_bits(np.array([c[r] for c in cols], dtype=np.float32)) for r in range(2)]
    out = ring_allreduce(vecs, 4)[1]
    assert list(out) == [0x00000000, 0x80000000, 0x7F800000, QNAN, QNAN, 0x00000002,
                         0x7F800000]


def test_validate_and_bad_commands_change_nothing():
    cfg = CollectiveConfig(ranks=4, depth=32)
    ok = dict(op=CollOp.ALLREDUCE, base=4, length=10, seg=3, timeout=100)
    assert validate(cfg, **ok) == CollStatus.OK
    bad = [({"op": 2}, CollStatus.BAD_OP), ({"op": 3}, CollStatus.BAD_OP),
           ({"length": 0}, CollStatus.BAD_LEN),
           ({"base": 23}, CollStatus.BAD_LEN), ({"seg": 0}, CollStatus.BAD_SEG),
           ({"seg": 2}, CollStatus.BAD_SEG), ({"timeout": 0}, CollStatus.BAD_TIMEOUT)]
    model = CollectiveModel(cfg)
    rng = np.random.default_rng(1)
    for r in range(4):
        model.mem[r][:] = rng.integers(0, 2**32, 32, dtype=np.uint32)
    before = [m.copy() for m in model.mem]
    for change, status in bad:
        args = {**ok, **change}
        assert validate(cfg, **args) == status
        assert model.allreduce(**args) == status
        for m, b in zip(model.mem, before):
            np.testing.assert_array_equal(m, b)
    assert validate(cfg, **{**ok, "base": 22}) == CollStatus.OK     # ends exactly at depth
    with pytest.raises(TypeError, match="CollectiveConfig"):
        CollectiveModel(object())
    with pytest.raises(ValueError, match="seg"):
        ring_allreduce([np.zeros(5, np.uint32)] * 2, 2)


@pytest.mark.parametrize("rounding", ROUNDING_MODES)
@pytest.mark.parametrize("width", [2, 4, 6, 8])
def test_bfp_link_relay_is_exact(width, rounding):
    """A decoded group quantizes to the same group: relaying in the all-gather adds no error,
    in every rounding mode (a decoded group has no bits below its last mantissa bit, so
    stochastic noise never carries into it)."""
    cfg = BFPConfig()
    rng = np.random.default_rng(width)
    x = _vectors(rng, 1, 16 * 64, spread=20)[0]
    lfsr = LFSR(cfg)
    once, _ = bfp_link(x, cfg, width, rounding=rounding, lfsr=lfsr)
    twice, _ = bfp_link(once, cfg, width, rounding=rounding, lfsr=lfsr)
    np.testing.assert_array_equal(once, twice)
    g = quantize(bits_to_f32(x), cfg, width=width, rounding=ROUND_NEAREST)
    assert not np.any(g.invalid) and not np.any(g.overflow)


def test_bfp_link_rounding_and_the_lfsr():
    """A link's groups take their noise from the sender's LFSR, one draw per group (the
    padding group of a ragged segment included), and the LFSR steps in every rounding mode,
    as the converter's does: a stochastic link equals quantize with the same LFSR state, and
    a round-to-nearest link before it moves that state."""
    cfg = BFPConfig()
    G = cfg.group_size
    rng = np.random.default_rng(7)
    x = _vectors(rng, 1, 5 * G - 3)[0]                 # five groups, the last padded
    padded = np.concatenate([x, np.zeros(3, np.uint32)])
    for rounding in ROUNDING_MODES:
        lfsr, ref = LFSR(cfg), LFSR(cfg)
        got, _ = bfp_link(x, cfg, 4, rounding=rounding, lfsr=lfsr)
        g = quantize(bits_to_f32(padded), cfg, width=4, rounding=rounding, lfsr=ref)
        want = dequantize(g, cfg, width=4).view(np.uint32)[:len(x)]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(lfsr.state, ref.state)
        assert not np.array_equal(lfsr.state, LFSR(cfg).state)     # five draws were taken
    # the state matters: after a nearest-even link, the same stochastic link rounds otherwise
    fresh, _ = bfp_link(x, cfg, 2, rounding=ROUND_STOCHASTIC, lfsr=LFSR(cfg))
    moved = LFSR(cfg)
    bfp_link(x, cfg, 2, rounding=ROUND_NEAREST, lfsr=moved)
    later, _ = bfp_link(x, cfg, 2, rounding=ROUND_STOCHASTIC, lfsr=moved)
    assert not np.array_equal(fresh, later)
    nearest, _ = bfp_link(x, cfg, 2)
    assert not np.array_equal(fresh, nearest)
    with pytest.raises(ValueError, match="needs the sender's lfsr"):
        bfp_link(x, cfg, 4, rounding=ROUND_STOCHASTIC)
    with pytest.raises(ValueError, match="rounding must be one of"):
        bfp_link(x, cfg, 4, rounding=3, lfsr=LFSR(cfg))


def test_stochastic_link_is_unbiased():
    """Stochastic rounding on a link is unbiased where nearest-even is not: one group whose
    values all sit a quarter of a 4-bit step above the grid, sent 4,000 times through one
    LFSR; the mean error over the draws is within 4 standard errors of 0 (nearest-even's is
    the whole quarter step), truncation's is a quarter step low."""
    cfg = BFPConfig()
    G = cfg.group_size
    width = 4
    step = 2.0 ** (1 - width)                          # the grid of a group with max in [1, 2)
    vals = np.full(G, 1.0 + 3 * step + step / 4, np.float32)
    vals[0] = 1.5
    x = f32_to_bits(np.tile(vals, 4000))
    errs = {}
    for rounding in ROUNDING_MODES:
        out, _ = bfp_link(x, cfg, width, rounding=rounding, lfsr=LFSR(cfg))
        e = (bits_to_f32(out).astype(np.float64) - bits_to_f32(x)).reshape(-1, G)[:, 1:]
        errs[rounding] = (e.mean(), e.std() / np.sqrt(e.size))
    m, se = errs[ROUND_STOCHASTIC]
    assert abs(m) < 4 * se, errs
    assert errs[ROUND_NEAREST][0] == pytest.approx(-step / 4)
    assert errs[ROUND_TRUNCATE][0] == pytest.approx(-step / 4)


def test_model_keeps_each_ranks_lfsr_across_commands():
    """CollectiveModel steps rank r's LFSR for every BFP group rank r sends or loops back, in
    every rounding mode and across commands: a stochastic all-reduce after a nearest-even one
    equals ring_allreduce given LFSRs advanced by that first all-reduce, and differs from one
    given fresh LFSRs; a plain FP32 command steps nothing."""
    N = 3
    cfg = CollectiveConfig(ranks=N, depth=64, bfp=BFPConfig.preset("tiny"))
    rng = np.random.default_rng(11)
    x = _vectors(rng, N, 64)
    model = CollectiveModel(cfg)
    for r in range(N):
        model.mem[r][:] = x[r]
    first = dict(base=0, length=30, seg=10, comp=CollComp.BFP, width=4)
    second = dict(base=32, length=25, seg=9, comp=CollComp.BFP, width=2,
                  rounding=ROUND_STOCHASTIC)
    assert model.allreduce(**first) == CollStatus.OK
    assert model.allreduce(base=0, length=8, seg=3) == CollStatus.OK          # FP32: no step
    lfsrs = [LFSR(cfg.bfp) for _ in range(N)]
    ring_allreduce([v[0:30] for v in x], 10, comp=CollComp.BFP, bfp=(cfg.bfp, 4), lfsrs=lfsrs)
    for r in range(N):
        np.testing.assert_array_equal(model.lfsr[r].state, lfsrs[r].state)
    assert model.allreduce(**second) == CollStatus.OK
    want = ring_allreduce([v[32:57] for v in x], 9, comp=CollComp.BFP, bfp=(cfg.bfp, 2),
                          rounding=ROUND_STOCHASTIC, lfsrs=lfsrs)
    fresh = ring_allreduce([v[32:57] for v in x], 9, comp=CollComp.BFP, bfp=(cfg.bfp, 2),
                           rounding=ROUND_STOCHASTIC)
    for r in range(N):
        np.testing.assert_array_equal(model.mem[r][32:57], want[r])
    assert not np.array_equal(want[0], fresh[0])
    # rounding 3 is no mode: BAD_COMP with BFP, ignored without
    assert model.allreduce(base=0, length=8, seg=4, comp=CollComp.BFP, width=4,
                           rounding=3) == CollStatus.BAD_COMP
    assert model.allreduce(base=0, length=8, seg=4, rounding=3) == CollStatus.OK


@pytest.mark.parametrize("N", [2, 3, 4])
def test_bfp_allreduce_same_on_every_rank(N):
    cfg = CollectiveConfig(ranks=N, depth=256)
    rng = np.random.default_rng(N)
    vecs = _vectors(rng, N, 16 * 2 * N)
    vecs[0][5] = 0x7FC00000                           # a NaN: its group goes as a NaN group
    flags = [0] * N
    out = ring_allreduce(vecs, 32, comp=CollComp.BFP, bfp=(cfg.bfp, 4), flags=flags)
    for r in range(1, N):
        np.testing.assert_array_equal(out[r], out[0])
    # the NaN's group is canonical NaNs on every rank, and every rank sent it on (flagged)
    assert np.all(out[0][:16] == 0x7FC00000) and flags == [1] * N
    assert not np.any(np.isnan(bits_to_f32(out[0][16:])))
    exact = np.sum([bits_to_f32(v).astype(np.float64) for v in vecs], axis=0)
    good = np.arange(len(exact)) >= 16                # groups without the NaN
    rel = np.abs(bits_to_f32(out[0])[good] - exact[good]) / np.max(np.abs(exact[good]))
    assert 0 < np.max(rel) < 2.0 ** -1                # 4-bit mantissas: coarse, not garbage


#: worst err / bound per (N, width), filled by test_bfp_allreduce_within_its_bound
TIGHT = {}


def _bfp_cases(rng, N, G):
    """Named edge cases of a BFP all-reduce, one group each (``G`` words per rank), then
    random groups; every value finite."""
    cases = []
    one = np.ones(G)
    # the largest element rounds up to 2**w and is clamped (one ulp short at any width);
    # the rest are zero on the other ranks
    cases.append([one * (2.0 - 2.0 ** -10)] + [one * 0.0] * (N - 1))
    # exact ties between grid points at every width (k + 1/2 ulp of w = 2..8)
    cases.append([np.linspace(1.0, 1.0 + 2.0 ** -8 * (G - 1), G) + 2.0 ** -9] * N)
    # cancellation: the ranks' values sum to about zero, the partial sums do not
    cases.append([one * 3.0 * (-1) ** r + 2.0 ** -20 * r for r in range(N)])
    # one large element beside small ones (they fall below the shared grid)
    big = np.full(G, 2.0 ** -12)
    big[3] = 1000.0
    cases.append([big] * N)
    # subnormals and the smallest normals: dequantizing rounds to 2**-149
    cases.append([rng.standard_normal(G) * 2.0 ** -130 for _ in range(N)])
    cases.append([np.zeros(G)] * N)
    for _ in range(40):                               # random, exponents over 2**±20
        cases.append([rng.standard_normal(G) * 2.0 ** rng.integers(-20, 21, G)
                      for _ in range(N)])
    return [np.stack(c) for c in cases]


@pytest.mark.parametrize("N", [2, 3, 4, 8])
def test_bfp_allreduce_within_its_bound(N):
    """``|result - exact| <= bfp_allreduce_bound`` for every element, width, rounding mode,
    rank count and the named cases (clamped maxima, ties, cancellation, values below the shared grid,
    subnormals, zeros), segments not whole groups included; and the bound is not vacuous: the
    worst element reaches 5 % of it at every width and rank count (measured 7.5 to 47 %: the
    bound counts one ulp per quantization, twice the usual half, bounds the ulp by the group's
    largest partial sum, up to twice the ulp, and at w = 2 each hop's error feeds the next
    hop's bound)."""
    import math
    cfg = BFPConfig()
    G = cfg.group_size
    rng = np.random.default_rng(100 + N)
    groups = _bfp_cases(rng, N, G)
    # one vector per rank: the groups one after the other, then cut 3 words short so the
    # last segment is ragged; the second seg leaves the last rank's segment shorter still
    x = np.concatenate(groups, axis=1)[:, :-3].astype(np.float32)
    vecs = [f32_to_bits(v) for v in x]
    length = x.shape[1]
    exact = np.array([math.fsum(col) for col in x.T.astype(np.float64)])
    for seg in (-(-length // N), -(-length // N) + 7):
        for width in cfg.widths:
            for rounding in ROUNDING_MODES:
                out = ring_allreduce(vecs, seg, comp=CollComp.BFP, bfp=(cfg, width),
                                     rounding=rounding, lfsrs=[LFSR(cfg) for _ in range(N)])
                for r in range(1, N):
                    np.testing.assert_array_equal(out[r], out[0])
                err = np.abs(bits_to_f32(out[0]).astype(np.float64) - exact)
                bound = bfp_allreduce_bound(vecs, seg, (cfg, width))
                worst = int(np.argmax(err / np.maximum(bound, 1e-300)))
                assert np.all(err <= bound), (seg, width, rounding, worst, err[worst],
                                              bound[worst])
                key = (N, width, rounding)
                TIGHT.setdefault(key, []).append((err / np.maximum(bound, 1e-300)).max())
                assert TIGHT[key][-1] > 0.05, (seg, width, rounding)


def test_bfp_allreduce_bound_refuses_what_it_does_not_cover():
    cfg = BFPConfig()
    ok = [np.zeros(8, np.uint32)] * 2
    with pytest.raises(ValueError, match="finite"):
        bfp_allreduce_bound([np.full(8, 0x7F800000, np.uint32)] * 2, 4, (cfg, 4))
    with pytest.raises(ValueError, match="overflow"):
        bfp_allreduce_bound([f32_to_bits(np.full(8, 3e38, np.float32))] * 2, 4, (cfg, 4))
    with pytest.raises(ValueError, match="at least 2 ranks"):
        bfp_allreduce_bound(ok[:1], 8, (cfg, 4))
    with pytest.raises(ValueError, match="seg"):
        bfp_allreduce_bound(ok, 3, (cfg, 4))
    with pytest.raises(ValueError, match="same length"):
        bfp_allreduce_bound([np.zeros(8, np.uint32), np.zeros(7, np.uint32)], 4, (cfg, 4))


@pytest.mark.parametrize("bad", [0x7F800000, 0xFF800000, 0x7FC00001])
def test_bfp_link_sends_a_non_finite_group_as_nans(bad):
    """An infinity or a NaN anywhere in a group: that group arrives as 16 canonical NaNs, the
    flag says which, the other groups are as without it (a relayed NaN group stays one)."""
    cfg = BFPConfig()
    rng = np.random.default_rng(7)
    x = rng.standard_normal(48).astype(np.float32).view(np.uint32)
    clean, f0 = bfp_link(x, cfg, 4)
    x[16 + 9] = bad
    got, f = bfp_link(x, cfg, 4)
    assert f0 == 0 and f == (2 if (bad & 0x7FFFFF) == 0 else 1)
    assert np.all(got[16:32] == 0x7FC00000)
    assert np.array_equal(got[:16], clean[:16]) and np.array_equal(got[32:], clean[32:])
    again, f2 = bfp_link(got, cfg, 4)
    assert np.array_equal(again, got) and f2 == 1


def test_link_flits_and_bytes_ratio():
    """Flits per all-reduce (what the RTL's counters must show) and the bytes ratio of BFP to
    FP32 words: (exp_bits + G*(w+1)) rounded up to flits, over G words; the local step adds
    no flits."""
    cfg = CollectiveConfig(ranks=4, depth=1024)     # groups of 16, exp_bits 10
    L = 1024
    plain = link_flits(cfg, 32, length=L, seg=L // 4)
    assert plain == [2 * 3 * 256] * 4
    ratios = {}
    for w, flits in [(2, 2), (4, 3), (6, 4), (8, 5)]:   # 58, 90, 122, 154 bits
        got = link_flits(cfg, 32, length=L, seg=L // 4, comp=CollComp.BFP, width=w)
        assert got == [6 * 16 * flits] * 4             # 6 ring steps of 16 groups
        ratios[w] = got[0] / plain[0]
    assert ratios[8] == pytest.approx(5 / 16)
    assert link_flits(cfg, 8, length=L, seg=L // 4) == [4 * x for x in plain]


def test_sendrecv_validate():
    """SENDRECV's statuses in the table's order; seg never counts; touching regions and a
    region ending at ``depth`` are fine."""
    cfg = CollectiveConfig(ranks=2, depth=32)
    ok = dict(op=CollOp.SENDRECV, base=0, length=4, rbase=8, rlength=6, timeout=100)
    assert validate(cfg, **ok) == CollStatus.OK
    cases = [({"comp": CollComp.BFP, "width": 4}, CollStatus.BAD_COMP),
             ({"comp": CollComp.BFP, "length": 0, "rlength": 0}, CollStatus.BAD_COMP),
             ({"length": 0, "rlength": 0}, CollStatus.BAD_LEN),
             ({"base": 29}, CollStatus.BAD_LEN), ({"rbase": 27}, CollStatus.BAD_LEN),
             ({"rbase": 3}, CollStatus.BAD_LEN), ({"base": 13}, CollStatus.BAD_LEN),
             ({"base": 9, "length": 2}, CollStatus.BAD_LEN),            # inside
             ({"base": 29, "timeout": 0}, CollStatus.BAD_LEN),
             ({"timeout": 0}, CollStatus.BAD_TIMEOUT),
             ({"rbase": 4}, CollStatus.OK), ({"base": 14}, CollStatus.OK),   # touching
             ({"base": 28}, CollStatus.OK), ({"rbase": 26}, CollStatus.OK),  # end at 32
             ({"length": 0, "rbase": 0}, CollStatus.OK),                 # receive only
             ({"rlength": 0, "base": 8}, CollStatus.OK),                 # send only
             ({"seg": 0}, CollStatus.OK), ({"width": 3}, CollStatus.OK)]
    for change, status in cases:
        assert validate(cfg, **{**ok, **change}) == status, change


def test_ring_sendrecv_copies_bits_to_the_next_rank():
    specials = np.array([0x7F800001, 0xFFC12345, 0x80000000, 0x7F800000, 0xFF800000, 1],
                        dtype=np.uint32)
    rng = np.random.default_rng(3)
    mems = [rng.integers(0, 2**32, 16, dtype=np.uint64).astype(np.uint32) for _ in range(3)]
    mems[0][2:8] = specials
    cmds = [dict(base=2, length=6, rbase=10, rlength=0),               # sends only
            dict(base=0, length=3, rbase=8, rlength=6),
            dict(base=0, length=0, rbase=13, rlength=3)]               # receives only
    out = ring_sendrecv(mems, cmds)
    expect = [m.copy() for m in mems]
    expect[1][8:14] = specials
    expect[2][13:16] = mems[1][0:3]
    for r in range(3):
        np.testing.assert_array_equal(out[r], expect[r], err_msg=f"rank {r}")
        assert out[r] is not mems[r]
    # both directions on a 2-ring, with None for a rank that does nothing
    two = ring_sendrecv(mems[:2], [dict(base=0, length=2, rbase=4, rlength=3),
                                   dict(base=5, length=3, rbase=10, rlength=2)])
    np.testing.assert_array_equal(two[0][4:7], mems[1][5:8])
    np.testing.assert_array_equal(two[1][10:12], mems[0][0:2])
    same = ring_sendrecv(mems[:2], [None, None])
    assert all(np.array_equal(a, b) for a, b in zip(same, mems[:2]))
    with pytest.raises(ValueError, match="rank 0 sends 2 words but rank 1 receives 3"):
        ring_sendrecv(mems[:2], [dict(base=0, length=2, rbase=4, rlength=0),
                                 dict(base=5, length=0, rbase=10, rlength=3)])
    with pytest.raises(ValueError, match="receives 0"):
        ring_sendrecv(mems[:2], [dict(base=0, length=2, rbase=4, rlength=0), None])
    with pytest.raises(ValueError, match="overlaps"):
        ring_sendrecv(mems[:2], [dict(base=0, length=2, rbase=1, rlength=2),
                                 dict(base=5, length=2, rbase=10, rlength=2)])
    with pytest.raises(ValueError, match="outside"):
        ring_sendrecv(mems[:2], [dict(base=15, length=2, rbase=0, rlength=2),
                                 dict(base=5, length=2, rbase=10, rlength=2)])
    with pytest.raises(ValueError, match="2 ranks"):
        ring_sendrecv(mems[:1], [None])
    assert sendrecv_flits(8, [5, 0, 2]) == [20, 0, 8]


def test_model_execute_per_rank_commands():
    """``execute`` takes one command per rank; a rank answering BAD_* moves nothing (so its
    partners must not expect words); ALLREDUCE still needs the same command everywhere."""
    cfg = CollectiveConfig(ranks=2, depth=16)
    model = CollectiveModel(cfg)
    rng = np.random.default_rng(9)
    for m in model.mem:
        m[:] = rng.integers(0, 2**32, 16, dtype=np.uint64).astype(np.uint32)
    before = [m.copy() for m in model.mem]
    sr = dict(op=CollOp.SENDRECV, timeout=50)
    assert model.execute([dict(base=0, length=3, rbase=8, rlength=0, **sr),
                          dict(base=0, length=0, rbase=4, rlength=3, **sr)]) == [0, 0]
    np.testing.assert_array_equal(model.mem[1][4:7], before[0][0:3])
    assert model.flags == [0, 0]
    after = [m.copy() for m in model.mem]
    # both BAD: nothing changes
    assert model.execute(dict(base=0, length=0, rbase=0, rlength=0, **sr)) == [
        CollStatus.BAD_LEN] * 2
    assert model.allreduce(base=0, length=4, rbase=2, rlength=4, **sr) == CollStatus.BAD_LEN
    for m, b in zip(model.mem, after):
        np.testing.assert_array_equal(m, b)
    # N = 3: rank 0 BAD (overlap), ranks 1 -> 2 expecting nothing from it: fine
    three = CollectiveModel(CollectiveConfig(ranks=3, depth=16))
    three.mem[1][:] = np.arange(16, dtype=np.uint32)
    assert three.execute([dict(base=0, length=2, rbase=1, rlength=2, **sr),
                          dict(base=3, length=2, rbase=0, rlength=0, **sr),
                          dict(base=0, length=0, rbase=6, rlength=2, **sr)]) == [
        CollStatus.BAD_LEN, CollStatus.OK, CollStatus.OK]
    assert list(three.mem[2]) == [0] * 6 + [3, 4] + [0] * 8
    assert not three.mem[0].any()
    with pytest.raises(ValueError, match="receives 0"):
        model.execute([dict(base=0, length=2, rbase=8, rlength=0, **sr),
                       dict(base=0, length=0, rbase=0, rlength=0, **sr)])
    with pytest.raises(ValueError, match="same command"):
        model.execute([dict(base=0, length=4, seg=2), dict(base=1, length=4, seg=2)])
    with pytest.raises(ValueError, match="different opcodes"):
        model.execute([dict(base=0, length=4, seg=2), dict(base=0, length=0, rbase=0,
                                                           rlength=4, **sr)])
    with pytest.raises(ValueError, match="3 commands"):
        model.execute([dict(base=0, length=4, seg=2)] * 3)
    # the same SENDRECV on every rank (length == rlength) through allreduce()
    assert model.allreduce(base=0, length=4, rbase=8, rlength=4, **sr) == CollStatus.OK
    np.testing.assert_array_equal(model.mem[0][8:12], after[1][0:4])
    np.testing.assert_array_equal(model.mem[1][8:12], after[0][0:4])
