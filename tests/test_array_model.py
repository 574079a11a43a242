"""Golden model of the systolic array / matmul engine (sim/model/array.py) against independent
scalar implementations and a float64 reference."""
import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from hdl.array.config import ArrayConfig
from sim.model import array as G
from sim.model.bfp import LFSR, ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE, quantize_group
from sim.model.edge import edge_to_fp32


def _rne_div(mag: int, d: int) -> int:
    q = Fraction(mag, 1 << d)
    f = math.floor(q)
    rem = q - f
    return f + (1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and f % 2) else 0)


def test_align_rne_matches_exact_fractions():
    rng = np.random.default_rng(1)
    mags = rng.integers(0, 256, 500)
    shifts = rng.integers(0, 12, 500)
    got = G.align_rne(mags, shifts, 8)
    want = [_rne_div(int(m), int(d)) for m, d in zip(mags, shifts)]
    assert list(got) == want


def test_edge_fp32_matches_edge_golden():
    rng = np.random.default_rng(2)
    vals = rng.integers(-(1 << 20), 1 << 20, 300)
    exps = rng.integers(-320, 260, 300)
    vals[:5] = 0
    got = G.edge_fp32(vals, exps).view(np.uint32)
    want = [edge_to_fp32(int(v), int(e)) for v, e in zip(vals, exps)]
    assert [int(x) for x in got] == want


def _scalar_pass(mode, A, B, C, cfg, wa, wb, rounding, accumulate):
    """Element-by-element reimplementation of the documented numerics (slow, independent)."""
    S = cfg.size
    l0, l1 = LFSR(cfg.bfp(0)), LFSR(cfg.bfp(1))
    M, K = A.shape
    N = B.shape[1]
    cd = lambda a: -(-a // S)  # noqa: E731

    def grp(vals, conf, lf, w):
        g = np.zeros(S, np.float32)
        g[:len(vals)] = vals
        return quantize_group(g, conf, w, rounding, lf.noise())

    def wtile(kt, nt):
        rows = [grp(B[kt * S + r, nt * S:(nt + 1) * S] if kt * S + r < K else [], cfg.bfp(1),
                    l1, wb) for r in range(S)]
        et = max(r[0] for r in rows)
        w = {}
        for r, (e, s, mg, _, _) in enumerate(rows):
            for c in range(S):
                v = _rne_div(int(mg[c]), min(et - e, cfg.max_mantissa + 1))
                w[r, c] = -v if s[c] else v
        return et, w

    shift = (wa - 1) + (wb - 1)
    if mode == G.FWD:
        out = C.copy() if accumulate else np.zeros_like(C)
        for kt in range(cd(K)):
            for nt in range(cd(N)):
                et, w = wtile(kt, nt)
                for m in range(M):
                    e, s, mg, _, _ = grp(A[m, kt * S:(kt + 1) * S], cfg.bfp(0), l0, wa)
                    for c in range(S):
                        n = nt * S + c
                        if n >= N:
                            continue
                        acc = sum((-int(mg[j]) if s[j] else int(mg[j])) * w[j, c]
                                  for j in range(S))
                        v = np.uint32(edge_to_fp32(acc, e + et - shift)).view(np.float32)
                        out[m, n] = np.float32(out[m, n] + v)
        return out
    if mode == G.BWD_DATA:
        out = A.copy() if accumulate else np.zeros_like(A)
        for nt in range(cd(N)):
            for kt in range(cd(K)):
                et, w = wtile(kt, nt)
                for m in range(M):
                    e, s, mg, _, _ = grp(C[m, nt * S:(nt + 1) * S], cfg.bfp(0), l0, wa)
                    for r in range(S):
                        k = kt * S + r
                        if k >= K:
                            continue
                        acc = sum((-int(mg[j]) if s[j] else int(mg[j])) * w[r, j]
                                  for j in range(S))
                        v = np.uint32(edge_to_fp32(acc, e + et - shift)).view(np.float32)
                        out[m, k] = np.float32(out[m, k] + v)
        return out
    out = B.copy() if accumulate else np.zeros_like(B)
    for mt in range(cd(M)):
        for kt in range(cd(K)):
            for nt in range(cd(N)):
                xs = [grp(A[mt * S:(mt + 1) * S, kt * S + j] if kt * S + j < K else [],
                          cfg.bfp(0), l0, wa) for j in range(S)]
                ds = [grp(C[mt * S:(mt + 1) * S, nt * S + j] if nt * S + j < N else [],
                          cfg.bfp(1), l1, wb) for j in range(S)]
                for a in range(S):
                    for b in range(S):
                        k, n = kt * S + a, nt * S + b
                        if k >= K or n >= N:
                            continue
                        ex, sx, mx = xs[a][:3]
                        ed, sd, md = ds[b][:3]
                        acc = sum((-int(mx[i]) if sx[i] else int(mx[i]))
                                  * (-int(md[i]) if sd[i] else int(md[i])) for i in range(S))
                        v = np.uint32(edge_to_fp32(acc, ex + ed - shift)).view(np.float32)
                        out[k, n] = np.float32(out[k, n] + v)
    return out


def _rand(rng, shape, scale=1.0):
    x = rng.standard_normal(shape) * scale * np.exp2(rng.integers(-3, 4, shape))
    return x.astype(np.float32)


@pytest.mark.parametrize("mode", G.MODES)
@pytest.mark.parametrize("S, shape, wa, wb, rounding, acc", [
    (2, (1, 1, 1), 2, 2, ROUND_NEAREST, False),
    (4, (5, 3, 6), 8, 4, ROUND_STOCHASTIC, True),
    (4, (9, 6, 5), 4, 8, ROUND_TRUNCATE, False),
    (8, (3, 10, 9), 6, 8, ROUND_NEAREST, True),
])
def test_vectorised_model_matches_scalar_model(mode, S, shape, wa, wb, rounding, acc):
    cfg = ArrayConfig(size=S)
    rng = np.random.default_rng(S * 100 + mode)
    M, K, N = shape
    A, B, C = _rand(rng, (M, K)), _rand(rng, (K, N)), _rand(rng, (M, N))
    got = G.matmul_pass(mode, A, B, C, cfg, width_a=wa, width_b=wb, rounding=rounding,
                        accumulate=acc).out
    want = _scalar_pass(mode, A, B, C, cfg, wa, wb, rounding, acc)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("mode", G.MODES)
def test_bfp_error_vs_float64(mode):
    """At 8-bit mantissas the BFP result stays within a few group-relative ulps of float64."""
    cfg = ArrayConfig(size=4)
    rng = np.random.default_rng(7 + mode)
    A, B, C = (rng.standard_normal(s).astype(np.float32) for s in ((12, 16, 12)[:2],
                                                                   (16, 12), (12, 12)))
    res = G.matmul_pass(mode, A, B, C, cfg, width_a=8, width_b=8).out
    ref = G.reference_f64(mode, A, B, C)
    rel = np.abs(res - ref).max() / np.abs(ref).max()
    assert rel < 0.03
    res2 = G.matmul_pass(mode, A, B, C, cfg, width_a=2, width_b=2).out
    rel2 = np.abs(res2 - ref).max() / np.abs(ref).max()
    assert rel2 > rel          # fewer mantissa bits, larger error


def test_weight_tile_shares_one_exponent_and_is_pass_independent():
    cfg = ArrayConfig(size=4)
    rng = np.random.default_rng(3)
    A, B, C = _rand(rng, (6, 7)), _rand(rng, (7, 9)), _rand(rng, (6, 9))
    f = G.matmul_pass(G.FWD, A, B, C, cfg, width_a=8, width_b=6)
    d = G.matmul_pass(G.BWD_DATA, A, B, C, cfg, width_a=8, width_b=6)
    assert f.weight_tiles.keys() == d.weight_tiles.keys()
    for key, (e, s, mg) in f.weight_tiles.items():
        e2, s2, m2 = d.weight_tiles[key]
        assert e == e2 and (s == s2).all() and (mg == m2).all()
        kt, nt = key
        tile = B[kt * 4:(kt + 1) * 4, nt * 4:(nt + 1) * 4]
        assert e == int(np.floor(np.log2(np.abs(tile).max())))   # one exponent: the tile max
        assert 32 <= mg.max() < 64                                 # width 6, leading bit 5


def test_engine_model_validation_and_memory_layout():
    cfg = ArrayConfig(size=4, mem_depth=32)
    eng = G.MatmulEngineModel(cfg)
    rng = np.random.default_rng(4)
    A = _rand(rng, (5, 6))
    eng.set_matrix("a", 3, A)
    assert (eng.get_matrix("a", 3, 5, 6) == A).all()
    assert eng.mem["a"][3, 0] == A.view(np.uint32)[0, 0]
    assert eng.mem["a"][4, 1] == A.view(np.uint32)[0, 5]
    bad = [
        (G.MatmulCommand(mode=3, M=1, K=1, N=1), G.ERR_MODE),
        (G.MatmulCommand(mode=0, M=0, K=1, N=1), G.ERR_SHAPE),
        (G.MatmulCommand(mode=0, M=1, K=1, N=1, width_a=3), G.ERR_WIDTH),
        (G.MatmulCommand(mode=0, M=1, K=1, N=1, width_b=10), G.ERR_WIDTH),
        (G.MatmulCommand(mode=0, M=1, K=1, N=1, rounding=3), G.ERR_ROUNDING),
        (G.MatmulCommand(mode=0, M=8, K=8, N=8, base_c=20), G.ERR_ADDR),
    ]
    before = {k: v.copy() for k, v in eng.mem.items()}
    for cmd, status in bad:
        assert eng.run(cmd)[0] == status
    assert all((before[k] == eng.mem[k]).all() for k in eng.mem)
    ok = G.MatmulCommand(mode=0, M=5, K=6, N=3, base_a=3, base_b=0, base_c=16)
    assert eng.run(ok)[0] == G.OK


def test_array_stream_model_bwd_weight_tile():
    cfg = ArrayConfig(size=2)
    m = G.ArrayStreamModel(cfg)
    assert m.beat(G.BWD_WEIGHT, h=[1, 2], v=[3, -1], first=True) == []
    out = m.beat(G.BWD_WEIGHT, h=[-2, 1], v=[1, 1], last=True)
    np.testing.assert_array_equal(np.array(out), np.outer([1, 2], [3, -1])
                                  + np.outer([-2, 1], [1, 1]))


def test_array_config_validation():
    with pytest.raises(ValueError, match="ArrayConfig.size.*3"):
        ArrayConfig(size=3)
    with pytest.raises(ValueError, match="ArrayConfig.lanes.*3"):
        ArrayConfig(lanes=3)
    with pytest.raises(TypeError, match="ArrayConfig.size"):
        ArrayConfig(size=4.0)
    with pytest.raises(ValueError, match="ArrayConfig.mem_depth.*100"):
        ArrayConfig(mem_depth=100)
    assert ArrayConfig.preset("tiny").size == 4 and ArrayConfig.preset("default").size == 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        ArrayConfig().size = 2
