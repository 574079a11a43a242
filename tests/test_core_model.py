"""Golden model of the training core (sim/model/core.py): hand-written programs checked against
direct calls of the blocks' golden models (sim.model.array.matmul_pass, sim.model.grad,
sim.model.optim.OptimEngineModel)."""
from __future__ import annotations

import numpy as np
import pytest

from hdl.array.config import BWD_DATA, BWD_WEIGHT, FWD
from hdl.core.config import CoreConfig
from hdl.core.isa import Acc, Op, Rop, Status, Vop, encode
from hdl.optim.config import STATUS_FIELDS, Mem, OptimConfig, Reg
from sim.host.optim import AdamW, Clip, LossScale, Momentum, optimizer_registers, reg_word
from sim.model.array import matmul_pass, pass_beats
from sim.model.bfp import LFSR, ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE
from sim.model.core import CoreModel, gscale_bits
from sim.model.optim import OptimEngineModel, f32_bits

CFG = CoreConfig.preset("tiny")          # S = 4, 8 banks of 512 lines
S = CFG.size
BANK = CFG.bank_depth
F32 = np.float32


def cdiv(a, b):
    return -(-a // b)


def rnd(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32)


def put(model, base, mat):
    model.set_matrix(base, np.asarray(mat, F32))


def get(model, base, rows, cols):
    return model.get_matrix(base, rows, cols).view(F32)


def fresh_lfsrs(cfg=CFG):
    return (LFSR(cfg.array.bfp(0)), LFSR(cfg.array.bfp(1)))


def mm(mode, M, K, N, a, b, c, *, acc=Acc.OFF, layer=0, loop=0):
    return encode(Op.MATMUL, mode=mode, acc=acc, layer=layer, loop=loop, M=M, K=K, N=N,
                  a=a, b=b, c=c)


HALT = encode(Op.HALT)


def bits(x):
    return np.asarray(x, F32).view(np.uint32)


# ---- matmul -------------------------------------------------------------------------------

def test_matmul_three_modes_match_matmul_pass():
    rng = np.random.default_rng(1)
    M, K, N = 6, 7, 9                       # ragged: padding lanes in every matrix
    a, b, c = 0 * BANK + 3, 1 * BANK + 5, 2 * BANK + 1
    X, W, dY = rnd(rng, M, K), rnd(rng, K, N), rnd(rng, M, N)
    core = CoreModel(CFG)
    # Padding lanes hold a marker that must survive every pass.
    for base, rows, cols in ((a, M, K), (b, K, N), (c, M, N)):
        core.mem[base:base + rows * cdiv(cols, S)] = 0xDEADBEEF
    put(core, a, X)
    put(core, b, W)
    put(core, c, dY)
    core.set_precision(0, FWD, 6, 4, ROUND_NEAREST)
    core.set_precision(0, BWD_DATA, 8, 2, ROUND_TRUNCATE)
    core.set_precision(0, BWD_WEIGHT, 4, 6, ROUND_STOCHASTIC)
    # BWD_DATA overwrites A (X) and BWD_WEIGHT overwrites B, so run them in an order that
    # keeps the reference simple: BWD_WEIGHT (writes B), FWD (reads it, writes C),
    # BWD_DATA (reads C and B, writes A).
    core.load_program([mm(BWD_WEIGHT, M, K, N, a, b, c), mm(FWD, M, K, N, a, b, c),
                       mm(BWD_DATA, M, K, N, a, b, c), HALT])
    assert core.run() == (Status.OK, 0)

    l = fresh_lfsrs()
    z = lambda r, c_: np.zeros((r, c_), F32)
    W1 = matmul_pass(BWD_WEIGHT, X, W, dY, CFG.array, width_a=4, width_b=6,
                     rounding=ROUND_STOCHASTIC, lfsrs=l).out
    Y = matmul_pass(FWD, X, W1, z(M, N), CFG.array, width_a=6, width_b=4, lfsrs=l).out
    dX = matmul_pass(BWD_DATA, z(M, K), W1, Y, CFG.array, width_a=8, width_b=2,
                     rounding=ROUND_TRUNCATE, lfsrs=l).out
    assert np.array_equal(bits(get(core, b, K, N)), bits(W1))
    assert np.array_equal(bits(get(core, c, M, N)), bits(Y))
    assert np.array_equal(bits(get(core, a, M, K)), bits(dX))
    for base, rows, cols in ((a, M, K), (b, K, N), (c, M, N)):
        blk = core.mem[base:base + rows * cdiv(cols, S)].reshape(rows, -1)
        assert np.all(blk[:, cols:] == 0xDEADBEEF)
    assert core.counters["matmuls"] == 3
    assert core.counters["macs"] == 3 * M * K * N
    assert core.counters["beats"] == sum(pass_beats(m, M, K, N, S)
                                         for m in (FWD, BWD_DATA, BWD_WEIGHT))
    assert core.counters["instructions"] == 4
    assert core.lfsrs[0].state.tolist() == l[0].state.tolist()
    assert core.lfsrs[1].state.tolist() == l[1].state.tolist()


def test_loop_offsets_and_after_first_accumulation():
    """dW accumulated over 3 micro-batches: X and dY move with the loop (bits a, c), dW does
    not; acc = AFTER_FIRST overwrites in iteration 0 and adds in 1 and 2. A FWD pass inside the
    same loop writes one Y per micro-batch (bits a and c)."""
    rng = np.random.default_rng(2)
    mb, K, N, iters = 4, 8, 4, 3
    stride = 16
    xa, wb, dyc, yc = 0 * BANK, 1 * BANK, 2 * BANK, 3 * BANK
    Xs = [rnd(rng, mb, K) for _ in range(iters)]
    dYs = [rnd(rng, mb, N) for _ in range(iters)]
    W = rnd(rng, K, N)
    core = CoreModel(CFG)
    for i in range(iters):
        put(core, xa + i * stride, Xs[i])
        put(core, dyc + i * stride, dYs[i])
    put(core, wb, W)
    put(core, wb + 64, rnd(rng, K, N))          # stale dW, must be overwritten in iteration 0
    core.load_program([
        encode(Op.LOOP, count=iters, stride=stride),
        mm(FWD, mb, K, N, xa, wb, yc, loop=0b101),
        mm(BWD_WEIGHT, mb, K, N, xa, wb + 64, dyc, acc=Acc.AFTER_FIRST, loop=0b101),
        encode(Op.FENCE),
        encode(Op.ENDLOOP),
        HALT])
    assert core.run() == (Status.OK, 0)

    l = fresh_lfsrs()
    dW = np.zeros((K, N), F32)
    for i in range(iters):
        Y = matmul_pass(FWD, Xs[i], W, np.zeros((mb, N), F32), CFG.array, width_a=8,
                        width_b=8, lfsrs=l).out
        assert np.array_equal(bits(get(core, yc + i * stride, mb, N)), bits(Y))
        dW = matmul_pass(BWD_WEIGHT, Xs[i], dW, dYs[i], CFG.array, width_a=8, width_b=8,
                         accumulate=i > 0, lfsrs=l).out
    assert np.array_equal(bits(get(core, wb + 64, K, N)), bits(dW))
    # LOOP + 3 x (MATMUL, MATMUL, FENCE, ENDLOOP) + HALT
    assert core.counters["instructions"] == 1 + 3 * 4 + 1
    assert core.counters["matmuls"] == 6


def test_acc_on_and_off_outside_loop():
    rng = np.random.default_rng(3)
    M, K, N = 4, 4, 4
    X, W, C0 = rnd(rng, M, K), rnd(rng, K, N), rnd(rng, M, N)
    core = CoreModel(CFG)
    put(core, 0, X)
    put(core, BANK, W)
    put(core, 2 * BANK, C0)
    put(core, 2 * BANK + 32, C0)
    put(core, 2 * BANK + 64, C0)
    core.load_program([mm(FWD, M, K, N, 0, BANK, 2 * BANK, acc=Acc.ON),
                       mm(FWD, M, K, N, 0, BANK, 2 * BANK + 32, acc=Acc.AFTER_FIRST),
                       mm(FWD, M, K, N, 0, BANK, 2 * BANK + 64, acc=Acc.OFF), HALT])
    assert core.run()[0] == Status.OK
    l = fresh_lfsrs()
    ref_on = matmul_pass(FWD, X, W, C0, CFG.array, width_a=8, width_b=8, accumulate=True,
                         lfsrs=l).out
    ref_af = matmul_pass(FWD, X, W, C0, CFG.array, width_a=8, width_b=8, lfsrs=l).out
    ref_off = matmul_pass(FWD, X, W, C0, CFG.array, width_a=8, width_b=8, lfsrs=l).out
    assert np.array_equal(bits(get(core, 2 * BANK, M, N)), bits(ref_on))
    assert np.array_equal(bits(get(core, 2 * BANK + 32, M, N)), bits(ref_af))
    assert np.array_equal(bits(get(core, 2 * BANK + 64, M, N)), bits(ref_off))


def test_precision_table_per_layer_and_mode():
    rng = np.random.default_rng(4)
    M, K, N = 5, 8, 8
    X, W = rnd(rng, M, K), rnd(rng, K, N)
    core = CoreModel(CFG)
    put(core, 0, X)
    put(core, BANK, W)
    core.set_precision(1, FWD, 2, 4, ROUND_NEAREST)
    core.set_precision(2, FWD, 4, 2, ROUND_TRUNCATE)
    core.set_precision(1, BWD_DATA, 8, 8, ROUND_STOCHASTIC)     # must not be used
    outs = [2 * BANK, 2 * BANK + 64, 2 * BANK + 128]
    core.load_program([mm(FWD, M, K, N, 0, BANK, outs[layer], layer=layer)
                       for layer in range(3)] + [HALT])
    assert core.run()[0] == Status.OK
    l = fresh_lfsrs()
    for layer, (wa, wb, r) in enumerate([(8, 8, 0), (2, 4, 0), (4, 2, 2)]):
        ref = matmul_pass(FWD, X, W, np.zeros((M, N), F32), CFG.array, width_a=wa,
                          width_b=wb, rounding=r, lfsrs=l).out
        assert np.array_equal(bits(get(core, outs[layer], M, N)), bits(ref)), layer
    outs_differ = {bits(get(core, o, M, N)).tobytes() for o in outs}
    assert len(outs_differ) == 3


@pytest.mark.parametrize("bad", [
    dict(layer=CFG.layers), dict(mode=3), dict(width_a=3), dict(width_b=10),
    dict(width_a=0), dict(rounding=3), dict(layer=-1)])
def test_set_precision_rejects(bad):
    args = dict(layer=0, mode=FWD, width_a=8, width_b=8, rounding=0) | bad
    core = CoreModel(CFG)
    with pytest.raises(ValueError):
        core.set_precision(**args)


def test_lfsr_continuity_across_programs():
    """Stochastic rounding: two programs of one pass each give the same bits as one program
    with both passes (the LFSRs run on); after reset() the first program repeats exactly."""
    rng = np.random.default_rng(5)
    M, K, N = 8, 8, 8
    X, W = rnd(rng, M, K), rnd(rng, K, N)
    p1 = mm(FWD, M, K, N, 0, BANK, 2 * BANK)
    p2 = mm(FWD, M, K, N, 0, BANK, 2 * BANK + 64)

    def setup():
        core = CoreModel(CFG)
        put(core, 0, X)
        put(core, BANK, W)
        core.set_precision(0, FWD, 4, 4, ROUND_STOCHASTIC)
        return core

    one = setup()
    one.load_program([p1, p2, HALT])
    assert one.run() == (Status.OK, 0)
    two = setup()
    two.load_program([p1, HALT])
    assert two.run()[0] == Status.OK
    two.load_program([p2, HALT])
    assert two.run()[0] == Status.OK
    assert np.array_equal(one.mem, two.mem)
    y1 = get(one, 2 * BANK, M, N)
    y2 = get(one, 2 * BANK + 64, M, N)
    assert not np.array_equal(bits(y1), bits(y2))       # fresh noise for the second pass
    # Reset restarts the LFSRs (and the precision table): set it again, rerun p1 into p2's
    # output: it reproduces the first pass.
    two.reset()
    two.set_precision(0, FWD, 4, 4, ROUND_STOCHASTIC)
    two.load_program([p2, HALT])
    assert two.run()[0] == Status.OK
    assert np.array_equal(bits(get(two, 2 * BANK + 64, M, N)), bits(y1))


# ---- rejected programs ---------------------------------------------------------------------

def _busy_core():
    rng = np.random.default_rng(6)
    core = CoreModel(CFG)
    core.mem[:] = rng.integers(0, 2**32, size=core.mem.shape, dtype=np.uint64).astype(np.uint32)
    core.mem[:4 * BANK] = rnd(rng, 4 * BANK, S).view(np.uint32)
    core.set_precision(0, FWD, 4, 4, ROUND_STOCHASTIC)
    core.load_program([mm(FWD, 4, 4, 4, 0, BANK, 2 * BANK), HALT])
    assert core.run() == (Status.OK, 0)
    return core


@pytest.mark.parametrize("prog, expect", [
    ([mm(FWD, 4, 4, 4, 0, 8, 2 * BANK), HALT], (Status.ERR_BANK, 0)),
    ([mm(FWD, 4, 4, 4, 0, BANK, 2 * BANK), mm(FWD, 4, 0, 4, 0, BANK, 2 * BANK), HALT],
     (Status.ERR_SHAPE, 1)),
    ([mm(FWD, 4, 4, 4, 0, BANK, 2 * BANK, layer=CFG.layers), HALT], (Status.ERR_FIELD, 0)),
    ([mm(FWD, 4, 4, 4, 0, BANK, CFG.lines - 1), HALT], (Status.ERR_ADDR, 0)),
    ([encode(Op.ENDLOOP), HALT], (Status.ERR_LOOP, 0)),
    ([encode(Op.LOOP, count=2, stride=1), HALT], (Status.ERR_LOOP, 1)),
    ([encode(Op.FENCE)] * CFG.prog_depth, (Status.ERR_NO_HALT, CFG.prog_depth - 1)),
    ([mm(FWD, 4, 4, 4, 0, BANK, 2 * BANK), 15], (Status.ERR_OPCODE, 1)),
])
def test_rejected_program_changes_nothing(prog, expect):
    core = _busy_core()
    mem = core.mem.copy()
    counters = dict(core.counters)
    lfsr = [x.state.copy() for x in core.lfsrs]
    status = core.optim_status()
    core.load_program(prog)
    assert core.run() == expect
    assert np.array_equal(core.mem, mem)
    assert core.counters == counters
    assert all(np.array_equal(x.state, s) for x, s in zip(core.lfsrs, lfsr))
    assert core.optim_status() == status


# ---- optimizer ---------------------------------------------------------------------------

def _opt_regions():
    # W, M, V, G in four different banks; odd count: the last line is partly padding.
    return 4 * BANK + 2, 5 * BANK + 7, 6 * BANK, 7 * BANK + 100


@pytest.mark.parametrize("opt, clip", [(Momentum(0.05, 0.9), None),
                                       (AdamW(1e-2, weight_decay=0.1), Clip(0.5))])
def test_opt_matches_optim_engine_model(opt, clip):
    rng = np.random.default_rng(7)
    n = 37
    scale = LossScale(init_exp=5, growth_interval=2)
    w0, m0, v0 = rnd(rng, n), rnd(rng, n, scale=0.1), np.abs(rnd(rng, n, scale=0.01))
    rw, rm, rv, rg = _opt_regions()
    core = CoreModel(CFG)
    ref = OptimEngineModel(OptimConfig(depth=64))
    core.mem[rw:rw + 20] = 0xDEADBEEF                    # padding marker after word n - 1
    core.set_words(rw, bits(w0))
    core.set_words(rm, bits(m0))
    core.set_words(rv, bits(v0))
    ref.write(Mem.W, 0, w0)
    ref.write(Mem.M, 0, m0)
    ref.write(Mem.V, 0, v0)
    prog = [encode(Op.OPT, count=n, w=rw, m=rm, v=rv, g=rg), HALT]
    for t in range(1, 5):
        g = rnd(rng, n) * F32(2.0 ** ref.scale_exp)
        if t == 3:
            g[4] = np.inf                                # skipped step
        core.set_words(rg, bits(g))
        ref.write(Mem.G, 0, g)
        for reg, val in optimizer_registers(opt, t, n, scale, clip, first=t == 1).items():
            core.optim_setreg(reg, reg_word(val))
            ref.setreg(reg, val)
        core.load_program(prog)
        assert core.run() == (Status.OK, 0)
        ref.step()
        for mem, base in ((Mem.W, rw), (Mem.M, rm), (Mem.V, rv), (Mem.G, rg)):
            assert np.array_equal(core.get_words(base, n), bits(ref.mems[mem][:n])), (t, mem)
        st = core.optim_status()
        assert list(st) == [name for name, _ in STATUS_FIELDS]
        assert st == ref.status()
    assert core.optim.skip_count == 1 and core.optim.step_count == 3
    assert core.counters["opt"] == 4
    # Words after the region's count in its last line are not touched.
    assert np.all(core.mem[rw:rw + cdiv(n, S)].reshape(-1)[n:] == 0xDEADBEEF)


def test_optim_setreg_validation_and_reset():
    core = CoreModel(CFG)
    with pytest.raises(ValueError):
        core.optim_setreg(99, 0)
    with pytest.raises(ValueError):
        core.optim_setreg(Reg.MODE, 3)
    core.optim_setreg(Reg.SCALE_EXP, 7)
    core.optim_setreg(Reg.LR, f32_bits(0.5))
    core.set_precision(0, FWD, 2, 2, 1)
    assert core.optim_status()["scale_exp"] == 7
    core.reset()
    assert core.optim_status()["scale_exp"] == 0
    assert core.optim.regs == [0] * len(Reg.ALL)
    assert core.prec[(0, FWD)] == (8, 8, 0)
    assert all(v == 0 for v in core.counters.values())


def test_gscale_bits():
    assert gscale_bits(f32_bits(0.125), 5) == f32_bits(4.0)
    assert gscale_bits(f32_bits(1 / 3), 0) == f32_bits(1 / 3)
    with pytest.raises(ValueError):
        gscale_bits(0, 3)                                   # zero imm: not an exponent add
    with pytest.raises(ValueError):
        gscale_bits(f32_bits(2.0 ** 120), 10)               # overflow


# ---- host actions ------------------------------------------------------------------------

def test_apply_actions():
    rng = np.random.default_rng(8)
    M, K, N = 4, 8, 4
    X, W = rnd(rng, M, K), rnd(rng, K, N)
    xl = X.view(np.uint32).reshape(M * cdiv(K, S), S)
    wl = W.view(np.uint32).reshape(K * cdiv(N, S), S)
    prog = [mm(FWD, M, K, N, 0, BANK, 2 * BANK, layer=1), HALT]
    actions = [("write", 0, xl), ("write", BANK, wl), ("prec", 1, FWD, 6, 6, 0),
               ("setreg", Reg.SCALE_EXP, 3), ("program", prog), ("run",), ("status",),
               ("read", "y", 2 * BANK, M),
               ("program", [mm(FWD, M, K, N, 0, 8, 2 * BANK)]),     # pc 1 keeps its HALT
               ("run",), ("read", "y2", 2 * BANK, M), ("setreg", Reg.SCALE_EXP, 4),
               ("status",), ("counters",)]
    core = CoreModel(CFG)
    res = core.apply(actions)
    assert res["run"] == [(Status.OK, 0), (Status.ERR_BANK, 0)]
    assert res["status"]["scale_exp"] == 4                    # the last one
    assert list(res["status"]) == [name for name, _ in STATUS_FIELDS]
    ref = matmul_pass(FWD, X, W, np.zeros((M, N), F32), CFG.array, width_a=6, width_b=6).out
    assert np.array_equal(res["y"].view(F32), ref)
    assert np.array_equal(res["y2"], res["y"])
    assert res["counters"]["instructions"] == 2 and res["counters"]["macs"] == M * K * N
    assert res["counters"]["array_beats"] == res["counters"]["beats"] == pass_beats(FWD, M, K,
                                                                                      N, S)
    assert res["counters"]["flags"] == 0
    assert CoreModel(CFG).apply(actions[:6])["run"] == [(Status.OK, 0)]
    with pytest.raises(ValueError):
        CoreModel(CFG).apply([("jump", 3)])


def test_load_program_keeps_later_words():
    core = CoreModel(CFG)
    core.load_program([encode(Op.FENCE)] * 3 + [HALT])
    core.load_program([encode(Op.FENCE)] * 2)
    assert core.prog[:4] == [encode(Op.FENCE)] * 3 + [HALT]
    assert core.run() == (Status.OK, 0)
    assert core.counters["instructions"] == 4
    core.load_program([encode(Op.FENCE)] * CFG.prog_depth)
    assert core.run() == (Status.ERR_NO_HALT, CFG.prog_depth - 1)


def test_nan_flags():
    core = CoreModel(CFG)
    X = np.ones((4, 4), F32)
    X[1, 2] = np.nan
    put(core, 0, X)
    put(core, BANK, np.ones((4, 4), F32))
    core.load_program([mm(FWD, 4, 4, 4, 0, BANK, 2 * BANK), HALT])
    assert core.run() == (Status.OK, 0)
    assert core.flags == 1
    core.reset()
    assert core.flags == 0


# ---- vector unit -------------------------------------------------------------------------

def test_vector_ops_match_sim_grad():
    """VEC ADD_RELU (bcast bias, in place), RELU_GRAD (in place), SCALE; REDUCE BIAS_GRAD over
    two micro-batches (loop, AFTER_FIRST); SOFTMAX_XENT per micro-batch with gscale =
    imm * 2**scale_exp; SUMSQ. Each checked bit for bit against sim.model.grad."""
    from sim.model.grad import (EW_ADD_RELU, EW_RELU_GRAD, EW_SCALE, bias_grad, elementwise,
                                softmax_xent, sum_squares)
    from hdl.grad.config import GradConfig
    rng = np.random.default_rng(9)
    mb, H, C, iters = 4, 8, 6, 2
    B = mb * iters
    h, bias, dh = 0, BANK, 2 * BANK
    z, lab, dz, loss = 3 * BANK, 4 * BANK, 5 * BANK, 6 * BANK
    db, ss, hs = 7 * BANK, 7 * BANK + 8, 4 * BANK + 64
    Hm, bv, dHm = rnd(rng, B, H), rnd(rng, H), rnd(rng, B, H)
    Z = rnd(rng, B, C, scale=3.0)
    labels = rng.integers(0, C, B)
    core = CoreModel(CFG)
    put(core, h, Hm)
    core.set_words(bias, bv)
    put(core, dh, dHm)
    put(core, z, Z)
    core.optim_setreg(Reg.SCALE_EXP, 4)
    imm = f32_bits(1.0 / B)
    zl, ll = mb * cdiv(C, S), cdiv(mb, S)        # per-micro-batch strides (lines)
    assert ll == 1 and zl == 8
    core.load_program([
        encode(Op.VEC, vop=Vop.ADD_RELU, bcast=1, rows=B, cols=H, a=h, b=bias, d=h),
        encode(Op.VEC, vop=Vop.RELU_GRAD, rows=B, cols=H, a=dh, b=h, d=dh),
        encode(Op.VEC, vop=Vop.SCALE, rows=B, cols=H, a=h, d=hs, imm=f32_bits(0.75)),
        encode(Op.LOOP, count=iters, stride=8),   # zl == 8 lines; labels/loss move 8 too
        encode(Op.REDUCE, rop=Rop.BIAS_GRAD, acc=Acc.AFTER_FIRST, loop=0b01, rows=mb, cols=H,
               a=dh, d=db),
        encode(Op.ENDLOOP),
        encode(Op.LOOP, count=iters, stride=zl),
        encode(Op.SOFTMAX_XENT, loop=0b1111, rows=mb, cols=C, a=z, b=lab, d=dz, e=loss,
               imm=imm),
        encode(Op.ENDLOOP),
        encode(Op.REDUCE, rop=Rop.SUMSQ, rows=B, cols=H, a=dh, d=ss),
        HALT])
    # labels / losses of micro-batch i at lab + zl * i / loss + zl * i (one stride for all)
    for i in range(iters):
        core.set_words(lab + zl * i, labels[i * mb:(i + 1) * mb].astype(np.uint32))
    assert core.run() == (Status.OK, 0)

    Hr = elementwise(EW_ADD_RELU, Hm, np.broadcast_to(bv, (B, H)))
    assert np.array_equal(core.get_matrix(h, B, H), bits(Hr))
    dHr = elementwise(EW_RELU_GRAD, dHm, Hr)
    assert np.array_equal(core.get_matrix(dh, B, H), bits(dHr))
    assert np.array_equal(core.get_matrix(hs, B, H), bits(elementwise(EW_SCALE, Hr, None,
                                                                        F32(0.75))))
    dbr = (bias_grad(dHr[:mb]) + bias_grad(dHr[mb:])).astype(F32)
    assert np.array_equal(core.get_words(db, H), bits(dbr))
    assert core.get_words(ss, 1)[0] == bits(sum_squares(dHr, GradConfig()))
    for i in range(iters):
        g, _, _, lo = softmax_xent(Z[i * mb:(i + 1) * mb], labels[i * mb:(i + 1) * mb],
                                   F32(16.0 / B), GradConfig())
        assert np.array_equal(core.get_matrix(dz + zl * i, mb, C), bits(g))
        assert np.array_equal(core.get_words(loss + zl * i, mb), bits(lo))
    assert core.counters["vec"] == 3 and core.counters["reduce"] == 3
    assert core.counters["softmax"] == 2
    assert core.counters["instructions"] == 3 + (1 + 2 * 2) * 2 + 1 + 1


def test_opt_count_beyond_engine_range():
    cfg = CoreConfig(size=16, banks=16, bank_depth=4096)     # 2**20 words
    core = CoreModel(cfg)
    n = 65536 + 16                                            # 4097 lines: two banks each
    D = cfg.bank_depth
    core.load_program([encode(Op.OPT, count=n, w=0, m=2 * D, v=4 * D, g=6 * D), HALT])
    # the program check rejects it (ERR_SHAPE) before anything runs
    assert core.check() == (Status.ERR_SHAPE, 0)
    assert core.run() == (Status.ERR_SHAPE, 0)


# ---- one-pass OPT: the gradient-write snoop --------------------------------------------

@pytest.mark.parametrize("where", ["window", "outside", "two_pass"])
def test_one_pass_opt_skip_from_snooped_write(where):
    """A VEC ADD overflowing to Inf into the gradient lines of a one-pass OPT sets flag bit 2
    and skips the step (nothing written); the same Inf written outside the window, or a
    two-pass OPT (its check pass decides), leaves bit 2 clear. A one-pass OPT never tests G
    itself: with the Inf outside the window it updates. A one-pass count that is not a whole
    number of lines is rejected (ERR_FIELD)."""
    n = 8 * S
    w0, m0, v0, g0, d2 = 0, BANK, 2 * BANK, 3 * BANK, 4 * BANK
    core = CoreModel(CFG)
    rng = np.random.default_rng(2)
    core.set_words(w0, rng.standard_normal(n).astype(F32))
    for reg, v in optimizer_registers(AdamW(), 1, n).items():
        core.optim_setreg(reg, reg_word(v))
    big = np.full((1, S), 3e38, F32)
    put(core, d2, big)
    put(core, 6 * BANK, big)
    put(core, g0, rng.standard_normal((8, S)).astype(F32))
    dst = g0 + 3 if where != "outside" else 5 * BANK
    prog = [encode(Op.VEC, vop=Vop.ADD, rows=1, cols=S, a=d2, b=6 * BANK, d=dst),
            encode(Op.OPT, count=n, w=w0, m=m0, v=v0, g=g0, one_pass=int(where != "two_pass")),
            HALT]
    w_before = core.get_words(w0, n).copy()
    core.load_program(prog)
    assert core.run() == (Status.OK, 0)
    st = core.optim_status()
    if where == "outside":
        assert core.flags == 0 and st["last_skipped"] == 0
        assert not np.array_equal(core.get_words(w0, n), w_before)
    else:
        assert core.flags == (4 if where == "window" else 0)
        assert st["last_skipped"] == 1 and st["skip_count"] == 1
        assert np.array_equal(core.get_words(w0, n), w_before)
    core.load_program([encode(Op.OPT, count=n - 1, w=w0, m=m0, v=v0, g=g0, one_pass=1), HALT])
    assert core.run() == (Status.ERR_FIELD, 0)
