"""Top-k link compression with error feedback (sim/model/compress.py)."""
import numpy as np
import pytest

from sim.model.collective import add_f32
from sim.model.compress import TopK, TopKState, topk_allreduce, topk_link_bits, topk_select
from sim.model.fp32 import bits_to_f32


def _bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def test_select_ties_and_specials():
    """Largest |.| per segment; equal magnitudes (also -x / +x, -0 / +0) go to the lower
    index; NaN > Inf > finite."""
    w = _bits([1.0, -3.0, 3.0, 0.5, -0.0, 0.0, 2.0, 2.0])
    assert list(np.flatnonzero(topk_select(w, TopK(seg=4, k=2)))) == [1, 2, 6, 7]
    assert list(np.flatnonzero(topk_select(w, TopK(seg=4, k=1)))) == [1, 6]
    w = _bits([np.inf, 1e30, np.nan, -np.inf, 0.0])
    assert list(np.flatnonzero(topk_select(w, TopK(seg=8, k=2)))) == [0, 2]
    # a short last segment sends all of it when k exceeds it
    assert topk_select(_bits([1, 2, 3]), TopK(seg=2, k=2)).sum() == 3


def test_residual_bookkeeping_exact():
    """Over several rounds: sent (dense) and residual are the two halves of grad + old
    residual: selection exact everywhere, FP32 sum exact except acc = -0 unsent."""
    rng = np.random.default_rng(4)
    n, topk = 1000, TopK(seg=128, k=8)
    st = TopKState(n, topk)
    for _ in range(5):
        g = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 3, n)).astype(np.float32)
        g[rng.integers(0, n, 20)] = -0.0
        g = _bits(g)
        acc = add_f32(g, st.residual)
        idx, val = st.compress(g)
        sent = np.zeros(n, np.uint32)
        sent[idx] = val
        mask = np.zeros(n, bool)
        mask[idx] = True
        assert np.array_equal(np.where(mask, sent, st.residual), acc)
        assert np.all(st.residual[mask] == 0) and np.all(sent[~mask] == 0)
        total = add_f32(sent, st.residual)
        neg0 = (acc == 0x80000000) & ~mask
        assert np.array_equal(total[~neg0], acc[~neg0]) and np.all(total[neg0] == 0)
        segs = -(-n // topk.seg)
        assert len(idx) == segs * topk.k and np.all(np.diff(idx) > 0)
        # every sent magnitude is >= every unsent one in its segment
        mag = acc & 0x7FFFFFFF
        for s0 in range(0, n, topk.seg):
            m, k = mag[s0:s0 + topk.seg], mask[s0:s0 + topk.seg]
            assert m[k].min() >= m[~k].max()


def test_error_feedback_delivers_everything_eventually():
    """With a constant gradient, what was sent over R rounds plus the residual is R times the
    gradient (up to FP32 rounding of the sums)."""
    rng = np.random.default_rng(8)
    g = rng.standard_normal(64).astype(np.float32)
    st = TopKState(64, TopK(seg=64, k=4))
    total = np.zeros(64, np.float64)
    for _ in range(32):
        idx, val = st.compress(_bits(g))
        total[idx] += bits_to_f32(val)
    got = total + bits_to_f32(st.residual)
    assert np.allclose(got, 32 * g.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_allreduce_bytes_and_determinism():
    rng = np.random.default_rng(2)
    N, n, topk = 4, 1024, TopK(seg=256, k=16)
    grads = [_bits(rng.standard_normal(n)) for _ in range(N)]
    outs = []
    for _ in range(2):
        states = [TopKState(n, topk) for _ in range(N)]
        out, bits = topk_allreduce(grads, states)
        assert all(np.array_equal(out[0], o) for o in out)
        outs.append(out[0])
        # 4 segments x 16 pairs of (8 + 32) bits per rank, N - 1 messages per link
        assert bits == [3 * 64 * 40] * N
    assert np.array_equal(outs[0], outs[1])
    # the result is the rank-order FP32 sum of the sent sparse vectors
    states = [TopKState(n, topk) for _ in range(N)]
    want = None
    for g, st in zip(grads, states):
        idx, val = st.compress(g)
        d = np.zeros(n, np.uint32)
        d[idx] = val
        want = d if want is None else add_f32(want, d)
    assert np.array_equal(outs[0], want)
    assert topk_link_bits([1, 2, 3], TopK(seg=4, k=1)) == [(1 + 3) * 34, (2 + 1) * 34,
                                                          (3 + 2) * 34]


def test_topk_rejects_bad_parameters():
    # TopK's fields: tests/test_config_errors.py
    with pytest.raises(TypeError, match="topk"):
        topk_select(np.zeros(4, np.uint32), (4, 1))
    with pytest.raises(ValueError, match="grad"):
        TopKState(8, TopK(seg=4, k=1)).compress(np.zeros(9, np.uint32))
    with pytest.raises(ValueError, match="ranks"):
        topk_allreduce([np.zeros(4, np.uint32)], [TopKState(4, TopK(seg=4, k=1))])
