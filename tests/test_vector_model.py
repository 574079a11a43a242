"""Golden model of the vector unit (sim/model/vector.py): layout helpers and run_vector against
the block models of sim/model/grad.py."""
import numpy as np
import pytest

from hdl.core.config import CoreConfig
from hdl.core.isa import Op, Rop, Vop, decode, encode
from hdl.grad.config import GradConfig
from sim.model.grad import bias_grad, canon, elementwise, softmax_xent, sum_squares
from sim.model.vector import (get_matrix, get_vector, matrix_lines, run_vector, set_matrix,
                              set_vector, softmax_xent_any_label)

F32 = np.float32
CFG = CoreConfig.preset("tiny")
S = CFG.size
GC = GradConfig.preset("tiny")


def _mem(seed, lines=64):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**32, size=(lines, S), dtype=np.uint32)


def _args(op, **kw):
    return decode(encode(op, **kw))[1]


def _f(bits):
    return np.asarray(bits, np.uint32).view(F32)


def test_layout_helpers_roundtrip_and_padding():
    mem = _mem(0)
    before = mem.copy()
    x = np.arange(15, dtype=F32).reshape(3, 5) - 7
    set_matrix(mem, 10, x, S)
    assert matrix_lines(3, 5, S) == 6
    assert np.array_equal(_f(get_matrix(mem, 10, 3, 5, S)), x)
    assert mem[10 + 1, 0] == F32(x[0, 4]).view(np.uint32)
    # padding lanes and other lines untouched
    for ln in range(mem.shape[0]):
        for lane in range(S):
            inside = 10 <= ln < 16 and (lane < S if (ln - 10) % 2 == 0 else lane < 1)
            if not inside:
                assert mem[ln, lane] == before[ln, lane], (ln, lane)
    set_vector(mem, 30, np.array([1, 2, 3, 0x12345], np.uint32))
    assert list(get_vector(mem, 30, 4)) == [1, 2, 3, 0x12345]
    set_vector(mem, 40, np.array([7, 8, 9, 10, 11]))           # int: raw words
    assert list(get_vector(mem, 40, 5)) == [7, 8, 9, 10, 11] and mem[41, 1] == before[41, 1]
    with pytest.raises(ValueError, match="outside"):
        get_matrix(mem, 60, 3, 5, S)
    with pytest.raises(ValueError, match="words per line"):
        get_matrix(mem, 0, 1, 1, 8)
    with pytest.raises(TypeError, match="uint32"):
        get_matrix(mem.astype(np.int64), 0, 1, 1)


def _specials():
    return np.array([0x7FC00000, 0xFFC00001, 0x7F800001, 0x00000000, 0x80000000, 0x7F800000,
                     0xFF800000, 0x00000001, 0x807FFFFF, 0x3F800000, 0xBF800000, 0x7F7FFFFF],
                    np.uint32)


@pytest.mark.parametrize("vop", Vop.ALL)
@pytest.mark.parametrize("bcast", [0, 1])
def test_vec_matches_elementwise(vop, bcast):
    rows, cols = 3, 6
    mem = _mem(vop * 2 + bcast)
    mem[0:2].flat[:12] = _specials()
    before = mem.copy()
    imm = int(F32(-0.75).view(np.uint32))
    f = _args(Op.VEC, vop=vop, bcast=bcast, rows=rows, cols=cols, a=0, b=20, d=40, imm=imm)
    run_vector(mem, Op.VEC, f, acc=0, gscale=0, config=CFG)
    a = _f(get_matrix(before, 0, rows, cols))
    b = _f(get_vector(before, 20, cols))[None, :].repeat(rows, 0) if bcast else \
        _f(get_matrix(before, 20, rows, cols))
    got = get_matrix(mem, 40, rows, cols)
    if vop == Vop.COPY:
        exp = a.view(np.uint32)
    elif vop == Vop.ZERO:
        exp = np.zeros_like(got)
    else:
        exp = canon(elementwise(vop, a, b, _f(np.uint32(imm))))
    assert np.array_equal(canon(_f(got)) if vop < Vop.COPY else got, exp)
    if vop in (Vop.RELU, Vop.RELU_GRAD, Vop.COPY):       # pass-through keeps NaN payloads
        keep = ~((got & 0x7FFFFFFF) == 0)
        assert np.all(np.isin(got[keep], a.view(np.uint32)))
    mask = np.ones(mem.shape, bool)
    mask[40:40 + matrix_lines(rows, cols, S)] = False
    mask[41::2, 2:] = True                                 # padding lanes
    assert np.array_equal(mem[mask], before[mask])


def test_vec_in_place():
    mem = _mem(7)
    before = mem.copy()
    f = _args(Op.VEC, vop=Vop.ADD, rows=2, cols=5, a=8, b=0, d=8)
    run_vector(mem, Op.VEC, f, acc=0, gscale=0, config=CFG)
    exp = canon(elementwise(Vop.ADD, _f(get_matrix(before, 8, 2, 5)),
                            _f(get_matrix(before, 0, 2, 5))))
    assert np.array_equal(get_matrix(mem, 8, 2, 5), exp)


@pytest.mark.parametrize("acc", [0, 1])
def test_bias_grad(acc):
    rng = np.random.default_rng(3)
    mem = _mem(3)
    set_matrix(mem, 0, rng.standard_normal((5, 7)).astype(F32))
    before = mem.copy()
    f = _args(Op.REDUCE, rop=Rop.BIAS_GRAD, acc=1 - acc, rows=5, cols=7, a=0, d=30)
    run_vector(mem, Op.REDUCE, f, acc=acc, gscale=0, config=CFG)
    db = bias_grad(_f(get_matrix(before, 0, 5, 7)))
    if acc:
        db = (_f(get_vector(before, 30, 7)) + db).astype(F32)
    assert np.array_equal(get_vector(mem, 30, 7), canon(db))
    assert mem[31, 3] == before[31, 3]


def test_sumsq_word0_only():
    rng = np.random.default_rng(4)
    mem = _mem(4)
    x = rng.standard_normal((3, 6)).astype(F32)
    set_matrix(mem, 0, x)
    before = mem.copy()
    for acc in (0, 1):
        f = _args(Op.REDUCE, rop=Rop.SUMSQ, rows=3, cols=6, a=0, d=50)
        run_vector(mem, Op.REDUCE, f, acc=acc, gscale=0, config=CFG, grad_config=GC)
        assert mem[50, 0] == canon(np.array([sum_squares(x.ravel(), GC)], F32))[0]
        assert np.array_equal(mem[50, 1:], before[50, 1:])


def test_softmax_and_out_of_range_label():
    rng = np.random.default_rng(5)
    mem = _mem(5)
    z = (rng.standard_normal((5, 6)) * 3).astype(F32)
    labels = np.array([0, 5, 2, 3, 1], np.uint32) | 0xABCD0000     # high bits ignored
    set_matrix(mem, 0, z)
    set_vector(mem, 20, labels)
    gs = int(F32(0.2).view(np.uint32))
    f = _args(Op.SOFTMAX_XENT, rows=5, cols=6, a=0, b=20, d=0, e=20)   # in place, e over b
    run_vector(mem, Op.SOFTMAX_XENT, f, acc=0, gscale=gs, config=CFG, grad_config=GC)
    g, _, _, loss = softmax_xent(z, labels & 0xFFFF, F32(0.2), GC)
    assert np.array_equal(get_matrix(mem, 0, 5, 6), canon(g))
    assert np.array_equal(get_vector(mem, 20, 5), canon(loss))
    # label >= C: no onehot, z_y = +0; the other rows as softmax_xent
    lab = np.array([0, 9, 2], np.int64)
    g2, l2 = softmax_xent_any_label(z[:3], lab, F32(1.0), GC)
    g1, _, _, l1 = softmax_xent(z[:3], np.array([0, 0, 2]), F32(1.0), GC)
    assert np.array_equal(canon(g2[[0, 2]]), canon(g1[[0, 2]]))
    assert np.all(g2[1] > 0) and abs(g2[1].sum() - 1) < 1e-5
    with np.errstate(all="ignore"):
        assert l2[1] > l1[1] - 100     # finite, computed


def test_rejects_bad_commands():
    mem = _mem(0)
    with pytest.raises(ValueError, match="op must be"):
        run_vector(mem, Op.MATMUL, {"rows": 1, "cols": 1}, acc=0, gscale=0, config=CFG)
    with pytest.raises(ValueError, match="rows and cols"):
        run_vector(mem, Op.VEC, _args(Op.VEC, rows=0, cols=1), acc=0, gscale=0, config=CFG)
    with pytest.raises(ValueError, match="max_classes"):
        run_vector(mem, Op.SOFTMAX_XENT, _args(Op.SOFTMAX_XENT, rows=1, cols=65),
                   acc=0, gscale=0, config=CFG, grad_config=GC)
