"""A golden-model MLP training step (sim/model/core.py running a hand-assembled program)
against the independent float64 reference (sim/model/reference.py), at widths 8, 6, 4, 2.

Stated bounds (``m`` = mantissa width of every pass, ``g`` = all gradients dW, db of the step
as one vector, ``||.||`` the 2-norm)
-----------------------------------------------------------------------------------------

=====  ======================  ======================  ================  ================
m      gradient bound          loss bound              largest gradient  largest loss
                                                       error seen        error seen
=====  ======================  ======================  ================  ================
8      2**-5 = 0.031 (0.063)   2**-6 = 0.016 (0.031)   0.019 (0.025)     0.0084 (0.013)
6      2**-3 = 0.125 (0.25)    2**-4 = 0.063 (0.125)   0.075 (0.098)     0.029  (0.058)
4      2**-1 = 0.5   (1.0)     2**-2 = 0.25  (0.5)     0.27  (0.35)      0.10   (0.15)
2      2**1  = 2     (4)       2**0  = 1     (2)       1.0   (0.92)      0.41   (0.43)
=====  ======================  ======================  ================  ================

i.e. ``||g - g64|| / ||g64|| <= 2**(3 - m)`` and ``|loss - loss64| / loss64 <= 2**(2 - m)``
(the batch-mean loss) with round-to-nearest-even or stochastic rounding, twice that (in
parentheses) with truncation; the last two columns are the largest errors seen in the
calibration below (RNE or stochastic, truncation in parentheses). With SGD and momentum the
update ``w' - w`` is ``-lr`` times the (clipped) gradient, so the updated weights obey the same
relative bound; for every optimizer the updated weights (and moments) equal the float64
update applied to the golden gradients within FP32 rounding (``2**-17 (|w| + lr)``).

Why these numbers
~~~~~~~~~~~~~~~~~
* **One quantization.** A BFP group of ``S`` values with shared exponent
  ``E = floor(log2 max|x|)`` keeps ``m``-bit magnitudes, a step of ``2**(E - m + 1)``; RNE errs
  by at most half a step, uniformly spread, i.e. an rms error of ``step / sqrt(12)``. For
  Gaussian-like data ``2**E`` is about 1.2x the group's rms (S = 4), so one quantized operand
  carries a relative rms error of about ``0.7 * 2**-m`` (streamed groups of S) to
  ``1.1 * 2**-m`` (S x S weight tiles with one exponent).
* **The step.** A gradient passes through about six quantizations in its chain (FWD of both
  layers, the logits' softmax, BWD_DATA, BWD_WEIGHT; each pass quantizes two operands), with
  the softmax's sensitivity (its Jacobian, entries ``<= 1/4``, times logits of size ~1-2)
  weighting the forward ones. Independent errors add in quadrature: ``sqrt(6) * ~1 * 2**-m``,
  about ``2-3 * 2**-m``. Measured mean: ``1.75 * 2**-m`` (RNE), ``2.1 * 2**-m``
  (stochastic: a full step of spread, but unbiased), ``4.5 * 2**-m`` (truncation: every
  magnitude shrinks by half a step on average, so errors add instead of cancelling).
* **Calibration** (8-16-4, batch 8 as one batch or two micro-batches, x ~ N(0, 1),
  He-initialised weights, uniform labels, and a 6-10-3 net with padding lanes): 100 seeds per
  width with RNE, 40 with stochastic rounding and truncation, and 60 more per width for each
  configuration the tests use (SGD, momentum with state under stochastic rounding and
  truncation, Adam with micro-batches, clipping and loss scaling, the ragged net; 1,200 steps,
  none outside the bounds). Largest gradient error: ``4.8 * 2**-m`` (RNE / stochastic) and
  ``6.3 * 2**-m`` (truncation); loss: ``2.1 * 2**-m`` and ``3.7 * 2**-m``, at every width.
  The bounds are 1.7-2.5x the worst case seen and 4x the mean. At width 2 the bound (2.0)
  says little: a 2-bit step is half the group maximum.
* **ReLU kinks.** Where a hidden pre-activation lies within the forward error of 0, the golden
  model's ReLU may fall on the other side; the float64 gradient then routes the element
  differently (its whole contribution moves: up to ``41 * 2**-8`` = 0.16 relative at width 8
  in the calibration). Both are valid subgradients, so the gradient is compared with the float64
  gradient of the golden model's mask (``reference_step(..., relu_masks=...)``), *after*
  asserting rigorously that every element where the masks differ lies within the worst-case
  forward bound of the kink (below).

Rigorous part (worst case, element by element)
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The forward pass is checked against a running error bound that holds for any data: an element
of a quantized group moves by less than one step, ``|Q(x) - x| < u * gmax`` with
``u = 2**(1 - m)`` and ``gmax`` its group's largest magnitude (RNE errs by half a step, but the
largest element may saturate at ``2**m - 1``; stochastic rounding and truncation err by less than
a step). A weight tile shares one exponent: the row quantization (``< 2**(E_r - m + 1)``) plus
the RNE alignment to ``E_t`` (``<= 2**(E_t - m)``) stay below ``u * tmax``. For ``A . B`` the
error is at most ``dA |B| + |A| dB + dA dB``, plus ``(T + 1) 2**-24 (|A| + dA)(|B| + dB)`` for
the FP32 edge conversion and accumulation of ``T`` tiles, plus ``e_A |B|`` for an operand's own
error; a bias add adds one rounding and ReLU is 1-Lipschitz. The logits' bound ``delta`` (per
row) bounds the loss by ``2 delta`` plus the FP32 softmax tolerance
(``sim.model.grad.softmax_tolerance``). These bounds are 25-50x the actual errors (they add every
element's largest error with one sign), which is why the backward pass is judged by the
calibrated bounds above: propagated through softmax and two more passes, the worst case
exceeds the gradient itself already at width 8.
"""
from __future__ import annotations

import numpy as np
import pytest

from hdl.core.config import CoreConfig
from hdl.core.isa import Acc, Op, Rop, Status, Vop, encode
from sim.host.optim import (SGD, Adam, AdamW, Clip, LossScale, Momentum, optimizer_registers,
                            reg_word)
from sim.model.bfp import ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE
from sim.model.core import CoreModel
from sim.model.grad import softmax_tolerance
from sim.model.optim import f32_bits
from sim.model.reference import forward, reference_step, reference_step_f64, zeros_state
from sim.model.vector import get_matrix, get_vector, set_matrix, set_vector

CFG = CoreConfig.preset("tiny")          # S = 4, 8 banks x 512 lines
S = CFG.size
BANK = CFG.bank_depth
F32 = np.float32
EPS32 = 2.0 ** -24


def cdiv(a, b):
    return -(-a // b)


# ---- the hand-assembled 2-layer step program ---------------------------------------------

def build_step(layers, batch, micro):
    """Program of one training step of ``d0-d1-d2`` (Linear+bias, ReLU, Linear+bias, softmax
    cross-entropy) over ``micro`` micro-batches of ``batch / micro`` rows, and its layout.

    Banks: 0 parameters (W0, b0, W1, b1 packed, the OPT ``w`` region), 1 gradients (same
    layout, ``g``), 2 ``m``, 3 ``v``, 4 inputs X and labels, 5 hidden H, 6 logits Z and their
    gradient dZ, 7 hidden gradient dH and the per-row losses. Per-micro-batch records (X,
    labels, H, Z, dZ, dH, losses) sit ``stride`` lines apart and move with the loop, so every
    micro-batch's intermediates stay readable.
    """
    d0, d1, d2 = layers
    mb = batch // micro
    P, off = {}, 0
    for name, rows, cols in (("W0", d0, d1), ("b0", 1, d1), ("W1", d1, d2), ("b1", 1, d2)):
        P[name] = off
        off += rows * cdiv(cols, S)
    lay = dict(P=P, count=off * S, par=0, grd=BANK, m=2 * BANK, v=3 * BANK, X=4 * BANK,
               LAB=4 * BANK + 256, H=5 * BANK, Z=6 * BANK, DZ=6 * BANK + 256, DH=7 * BANK,
               LOSS=7 * BANK + 256, mb=mb, micro=micro,
               stride=max(mb * cdiv(d, S) for d in layers))
    assert micro * lay["stride"] <= 256
    L = lay
    par, grd = L["par"], L["grd"]
    loop = micro > 1
    acc = Acc.AFTER_FIRST if loop else Acc.OFF
    f = (lambda bits: bits) if loop else (lambda bits: 0)     # loop flags only inside a loop
    prog = [encode(Op.LOOP, count=micro, stride=L["stride"])] if loop else []
    prog += [
        # forward
        encode(Op.MATMUL, mode=0, layer=0, loop=f(0b101), M=mb, K=d0, N=d1,
               a=L["X"], b=par + P["W0"], c=L["H"]),
        encode(Op.VEC, vop=Vop.ADD_RELU, bcast=1, loop=f(0b101), rows=mb, cols=d1,
               a=L["H"], b=par + P["b0"], d=L["H"]),
        encode(Op.MATMUL, mode=0, layer=1, loop=f(0b101), M=mb, K=d1, N=d2,
               a=L["H"], b=par + P["W1"], c=L["Z"]),
        encode(Op.VEC, vop=Vop.ADD, bcast=1, loop=f(0b101), rows=mb, cols=d2,
               a=L["Z"], b=par + P["b1"], d=L["Z"]),
        encode(Op.SOFTMAX_XENT, loop=f(0b1111), rows=mb, cols=d2, a=L["Z"], b=L["LAB"],
               d=L["DZ"], e=L["LOSS"], imm=f32_bits(1.0 / batch)),
        # backward, last layer first
        encode(Op.MATMUL, mode=2, layer=1, acc=acc, loop=f(0b101), M=mb, K=d1, N=d2,
               a=L["H"], b=grd + P["W1"], c=L["DZ"]),
        encode(Op.REDUCE, rop=Rop.BIAS_GRAD, acc=acc, loop=f(0b01), rows=mb, cols=d2,
               a=L["DZ"], d=grd + P["b1"]),
        encode(Op.MATMUL, mode=1, layer=1, loop=f(0b101), M=mb, K=d1, N=d2,
               a=L["DH"], b=par + P["W1"], c=L["DZ"]),
        encode(Op.VEC, vop=Vop.RELU_GRAD, loop=f(0b111), rows=mb, cols=d1,
               a=L["DH"], b=L["H"], d=L["DH"]),
        encode(Op.MATMUL, mode=2, layer=0, acc=acc, loop=f(0b101), M=mb, K=d0, N=d1,
               a=L["X"], b=grd + P["W0"], c=L["DH"]),
        encode(Op.REDUCE, rop=Rop.BIAS_GRAD, acc=acc, loop=f(0b01), rows=mb, cols=d1,
               a=L["DH"], d=grd + P["b0"]),
    ]
    if loop:
        prog.append(encode(Op.ENDLOOP))
    prog += [encode(Op.OPT, count=L["count"], w=par, m=L["m"], v=L["v"], g=grd),
             encode(Op.HALT)]
    return prog, lay


def run_golden(layers, Ws, bs, state, x, y, opt, t, *, width, rounding=ROUND_NEAREST,
               micro=1, clip=None, scale_exp=0):
    """One step on the golden core model; returns the float64 views of everything."""
    d0, d1, d2 = layers
    B = len(x)
    prog, L = build_step(layers, B, micro)
    mb, st, P = L["mb"], L["stride"], L["P"]
    core = CoreModel(CFG)
    mem = core.mem
    for l in range(2):
        set_matrix(mem, L["par"] + P[f"W{l}"], Ws[l])
        set_vector(mem, L["par"] + P[f"b{l}"], bs[l])
        for reg in ("m", "v"):
            set_matrix(mem, L[reg] + P[f"W{l}"], state[reg]["W"][l])
            set_vector(mem, L[reg] + P[f"b{l}"], state[reg]["b"][l])
    for i in range(micro):
        set_matrix(mem, L["X"] + i * st, x[i * mb:(i + 1) * mb])
        set_vector(mem, L["LAB"] + i * st, y[i * mb:(i + 1) * mb].astype(np.uint32))
    actions = [("prec", layer, mode, width, width, rounding)
               for layer in range(2) for mode in range(3)]
    regs = optimizer_registers(opt, t, L["count"], LossScale(scale_exp, 1, dynamic=False), clip)
    actions += [("setreg", r, reg_word(v)) for r, v in regs.items()]
    actions += [("program", prog), ("run",)]
    res = core.apply(actions)
    assert res["run"] == [(Status.OK, 0)]
    k = 2.0 ** scale_exp

    def mat(base, r, c):
        return get_matrix(mem, base, r, c, S).view(F32).astype(np.float64)

    def vec(base, n):
        return get_vector(mem, base, n, S).view(F32).astype(np.float64)

    def rows(base, c):
        return np.concatenate([mat(base + i * st, mb, c) for i in range(micro)])

    par = {r: {"W": [mat(L[r] + P["W0"], d0, d1), mat(L[r] + P["W1"], d1, d2)],
               "b": [vec(L[r] + P["b0"], d1), vec(L[r] + P["b1"], d2)]}
           for r in ("par", "grd", "m", "v")}
    return dict(
        core=core, mem=mem.copy(),
        H=rows(L["H"], d1), Z=rows(L["Z"], d2), DZ=rows(L["DZ"], d2) / k,
        DH=rows(L["DH"], d1) / k,
        loss=np.concatenate([vec(L["LOSS"] + i * st, mb) for i in range(micro)]),
        W=par["par"]["W"], b=par["par"]["b"],
        dW=[g / k for g in par["grd"]["W"]], db=[g / k for g in par["grd"]["b"]],
        state={"m": par["m"], "v": par["v"]}, micro=micro, mb=mb)


# ---- the bound ---------------------------------------------------------------------------

def group_max(A, axis):
    """Largest magnitude of each element's group of S along ``axis`` (padding zeros)."""
    A = np.abs(np.moveaxis(np.asarray(A, np.float64), axis, -1))
    n = A.shape[-1]
    pad = np.zeros(A.shape[:-1] + (cdiv(n, S) * S - n,))
    g = np.concatenate([A, pad], -1).reshape(A.shape[:-1] + (-1, S)).max(-1)
    return np.moveaxis(np.repeat(g, S, -1)[..., :n], -1, axis)


def tile_max(W):
    """Largest magnitude of each element's S x S weight tile."""
    K, N = W.shape
    Wp = np.zeros((cdiv(K, S) * S, cdiv(N, S) * S))
    Wp[:K, :N] = np.abs(W)
    t = Wp.reshape(cdiv(K, S), S, cdiv(N, S), S).max(axis=(1, 3))
    return np.repeat(np.repeat(t, S, 0), S, 1)[:K, :N]


def pass_bound(mode, A, B, u):
    """``(quantization bound, |A'||B'| with A' = |A| + dA ..., contraction tiles)`` of one
    pass on the golden operands: FWD ``A . B``, BWD_DATA ``A . B^T`` (A = dY, B = W),
    BWD_WEIGHT ``A^T . B`` (A = X, B = dY)."""
    A, B = np.abs(A), np.abs(B)
    if mode == 0:
        dA, dB = u * group_max(A, 1), u * tile_max(B)
        mul, T = (lambda p, q: p @ q), cdiv(A.shape[1], S)
    elif mode == 1:
        dA, dB = u * group_max(A, 1), u * tile_max(B)
        mul, T = (lambda p, q: p @ q.T), cdiv(A.shape[1], S)
    else:
        dA, dB = u * group_max(A, 0), u * group_max(B, 0)
        mul, T = (lambda p, q: p.T @ q), cdiv(A.shape[0], S)
    q = mul(dA, B) + mul(A, dB) + mul(dA, dB)
    return q, mul(A + dA, B + dB), T


def chain(parts):
    """Bound of a chain of passes accumulated in FP32 (one rounding per tile and edge)."""
    q = sum(p[0] for p in parts)
    absprod = sum(p[1] for p in parts)
    T = sum(p[2] for p in parts)
    return q + 1.01 * (T + 1) * EPS32 * absprod + 1e-37


def forward_bounds(layers, Ws, bs, x, y, g, *, width):
    """Rigorous elementwise bounds of the golden forward pass (module docstring). Returns
    ``(ref, bound, e_Z1)``; keys ``H``, ``Z``, ``loss``."""
    d0, d1, d2 = layers
    B = len(x)
    micro, mb = g["micro"], g["mb"]
    u = 2.0 ** (1 - width)
    W0, W1 = (np.asarray(w, np.float64) for w in Ws)
    X = np.asarray(x, np.float64)
    zs, hs = forward([W0, W1], [np.asarray(b, np.float64) for b in bs], X)
    Z1, Z2, H = zs[0], zs[1], hs[1]
    sl = [slice(i * mb, (i + 1) * mb) for i in range(micro)]
    e = np.concatenate([chain([pass_bound(0, X[s], W0, u)]) for s in sl])
    e_Z1 = e + EPS32 * (np.abs(Z1) + e)                     # + the bias add's rounding
    e = np.concatenate([chain([pass_bound(0, g["H"][s], W1, u)]) for s in sl]) \
        + e_Z1 @ np.abs(W1)                                 # relu is 1-Lipschitz
    e_Z2 = e + EPS32 * (np.abs(Z2) + e)
    mx = Z2.max(1)
    loss64 = np.log(np.exp(Z2 - mx[:, None]).sum(1)) - (Z2[np.arange(B), y] - mx)
    zt = g["Z"][np.arange(B), y] - g["Z"].max(1)
    _, loss_tol = softmax_tolerance(d2, 1.0 / B, zt, loss64)
    ref = {"H": H, "Z": Z2, "loss": loss64, "Z1": Z1}
    bnd = {"H": e_Z1, "Z": e_Z2, "loss": 2 * e_Z2.max(1) + loss_tol}
    return ref, bnd, e_Z1


def _flat(parts):
    return np.concatenate([np.ravel(a) for a in parts])


def _params(d, key_w="W", key_b="b"):
    return _flat([d[key_w][0], d[key_b][0], d[key_w][1], d[key_b][1]])


def grad_bound(width, rounding):
    return 2.0 ** ((4 if rounding == ROUND_TRUNCATE else 3) - width)


def loss_bound(width, rounding):
    return 2.0 ** ((3 if rounding == ROUND_TRUNCATE else 2) - width)


def check_step(layers, seed, opt, *, width, rounding=ROUND_NEAREST, micro=1, clip=None,
               scale_exp=0, batch=8, t=1, with_state=False):
    """One golden step against the reference; asserts every stated bound. Returns the
    normwise errors and the golden results."""
    rng = np.random.default_rng(seed)
    d0, d1, d2 = layers
    x = rng.standard_normal((batch, d0)).astype(F32)
    y = rng.integers(0, d2, batch)
    Ws = [(rng.standard_normal((d0, d1)) * np.sqrt(2 / d0)).astype(F32),
          (rng.standard_normal((d1, d2)) * np.sqrt(2 / d1)).astype(F32)]
    bs = [(rng.standard_normal(d1) * 0.1).astype(F32),
          (rng.standard_normal(d2) * 0.1).astype(F32)]
    state = zeros_state(Ws, bs)
    if with_state:
        for k, sc in (("m", 0.05), ("v", 0.001)):
            state[k] = {"W": [(np.abs(rng.standard_normal(w.shape)) * sc).astype(F32)
                              for w in Ws],
                        "b": [(np.abs(rng.standard_normal(b.shape)) * sc).astype(F32)
                              for b in bs]}
    g = run_golden(layers, Ws, bs, state, x, y, opt, t, width=width, rounding=rounding,
                   micro=micro, clip=clip, scale_exp=scale_exp)
    mb = g["mb"]
    sl = [slice(i * mb, (i + 1) * mb) for i in range(micro)]

    # rigorous forward bounds, and ReLU flips only within them
    ref, bnd, e_Z1 = forward_bounds(layers, Ws, bs, x, y, g, width=width)
    got = {"H": g["H"], "Z": g["Z"], "loss": g["loss"]}
    for key in got:
        err = np.abs(got[key] - ref[key])
        assert np.all(err <= bnd[key]), (key, np.max(err - bnd[key]))
    mask = g["H"] > 0
    flip = mask != (ref["Z1"] > 0)
    assert np.all(np.abs(ref["Z1"][flip]) <= e_Z1[flip]), "a ReLU flipped outside its bound"

    # float64 reference with the golden model's choice at the kinks
    W64 = [w.astype(np.float64) for w in Ws]
    b64 = [b.astype(np.float64) for b in bs]
    st64 = {k: {kk: [np.asarray(a, np.float64) for a in v] for kk, v in d.items()}
            for k, d in state.items()}
    xs = [x[s].astype(np.float64) for s in sl]
    ys = [y[s] for s in sl]
    r = reference_step(list(layers), W64, b64, st64, xs, ys, opt, t, clip,
                       relu_masks=[[mask[s]] for s in sl])
    gg, g64 = _params(g, "dW", "db"), _params(r["grads"])
    e_grad = np.linalg.norm(gg - g64) / np.linalg.norm(g64)
    assert e_grad <= grad_bound(width, rounding), e_grad
    e_loss = abs(g["loss"].mean() - r["loss"]) / r["loss"]
    assert e_loss <= loss_bound(width, rounding), e_loss
    # updated weights: the float64 optimizer applied to the golden gradients, within FP32
    w0 = _params({"W": W64, "b": b64})
    wg = _params(g)
    m0, v0 = _params(st64["m"]), _params(st64["v"])
    factor = 1.0
    if clip is not None:
        factor = min(1.0, clip.max_norm / (np.linalg.norm(gg) + clip.eps))
        golden_factor = float(np.array(g["core"].optim.clip_factor, np.uint32).view(F32))
        assert abs(golden_factor - factor) <= 2.0 ** -18 * factor
    w_exp, m_exp, v_exp = reference_step_f64(opt, w0, m0, v0, gg * factor, t)
    tol = 2.0 ** -17 * (np.abs(w0) + opt.lr)
    assert np.all(np.abs(wg - w_exp) <= tol), np.max(np.abs(wg - w_exp) - tol)
    if not isinstance(opt, SGD):
        m_tol = 2.0 ** -20 * (np.abs(m0) + np.abs(gg) * factor)
        assert np.all(np.abs(_params(g["state"]["m"]) - m_exp) <= m_tol)
    # ... and end to end for SGD / momentum: the update moves with the gradient
    w64 = _params({"W": r["weights"], "b": r["biases"]})
    e_update = np.linalg.norm((wg - w0) - (w64 - w0)) / np.linalg.norm(w64 - w0)
    if isinstance(opt, (SGD, Momentum)):
        lin = opt.lr * factor * np.linalg.norm(g64) / np.linalg.norm(w64 - w0)
        assert e_update <= grad_bound(width, rounding) * lin * 1.01 + 2.0 ** -20, e_update
    return dict(grad=e_grad, loss=e_loss, update=e_update, flips=int(flip.sum()), golden=g)


LAYERS = (8, 16, 4)
WIDTHS = (8, 6, 4, 2)


@pytest.mark.parametrize("width", WIDTHS)
def test_sgd_step_within_bounds(width):
    for seed in range(8):
        check_step(LAYERS, seed, SGD(0.1), width=width)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("rounding", [ROUND_STOCHASTIC, ROUND_TRUNCATE],
                         ids=["stochastic", "truncate"])
def test_rounding_modes_within_bounds(width, rounding):
    for seed in range(3):
        check_step(LAYERS, 100 + seed, Momentum(0.05, 0.9), width=width, rounding=rounding,
                   with_state=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_micro_batches_adam_clip_within_bounds(width):
    """Two micro-batches of 4 accumulated with AFTER_FIRST = the mean over the batch of 8;
    Adam and AdamW with clipping by the global norm, loss scale 2**6."""
    check_step(LAYERS, 200, Adam(1e-2), width=width, micro=2, clip=Clip(0.05), scale_exp=6)
    check_step(LAYERS, 201, AdamW(1e-2, weight_decay=0.1), width=width, micro=2,
               clip=Clip(1.0))


@pytest.mark.parametrize("width", WIDTHS)
def test_ragged_shapes_within_bounds(width):
    """6-10-3: every matrix has padding lanes, and the OPT region includes them."""
    for seed in range(2):
        check_step((6, 10, 3), 300 + seed, SGD(0.2), width=width, clip=Clip(0.1))


def test_adam_with_state_later_step():
    """Adam at t = 3 with nonzero moments (bias correction of a later step)."""
    for width in (8, 4):
        check_step(LAYERS, 400, Adam(1e-2), width=width, t=3, with_state=True)


def test_loss_scaling_changes_no_bit():
    """Loss scale 2**10: softmax gradients, dW and db are exact power-of-two multiples, BFP is
    scale-invariant and OPT unscales exactly, so parameters, state and loss are bit-identical."""
    a = check_step(LAYERS, 40, Adam(1e-2), width=4, micro=2)["golden"]
    b = check_step(LAYERS, 40, Adam(1e-2), width=4, micro=2, scale_exp=10)["golden"]
    for key in ("W", "b", "dW", "db"):
        for l in range(2):
            assert np.array_equal(a[key][l], b[key][l])
    for l in range(2):
        assert np.array_equal(a["state"]["v"]["W"][l], b["state"]["v"]["W"][l])
    assert np.array_equal(a["loss"], b["loss"])


def test_width_summary():
    """Normwise gradient / loss / SGD-update errors per width (printed with -s): each stays
    inside its bound and grows as the width shrinks."""
    rows = {}
    for width in WIDTHS:
        res = [check_step(LAYERS, seed, SGD(0.1), width=width) for seed in range(6)]
        rows[width] = {k: max(r[k] for r in res) for k in ("grad", "loss", "update")}
        rows[width]["mean"] = float(np.mean([r["grad"] for r in res]))
        rows[width]["flips"] = sum(r["flips"] for r in res)
        print(f"width {width}: grad {rows[width]['grad']:.4f} (mean "
              f"{rows[width]['mean']:.4f}, bound {grad_bound(width, 0):.4f})  loss "
              f"{rows[width]['loss']:.4f} (bound {loss_bound(width, 0):.4f})  update "
              f"{rows[width]['update']:.4f}  relu flips {rows[width]['flips']}")
    for a, b in zip(WIDTHS, WIDTHS[1:]):
        assert rows[a]["mean"] < rows[b]["mean"]


@pytest.mark.parametrize("micro, rounding, opt, clip", [
    (1, ROUND_NEAREST, SGD(0.1), None), (2, ROUND_STOCHASTIC, Adam(1e-2), Clip(0.05)),
    (2, ROUND_TRUNCATE, Momentum(0.05, 0.9), None)])
def test_compiled_step_equals_hand_assembled(micro, rounding, opt, clip):
    """sim.host.compiler's program for the same 2-layer step (other addresses, same
    instructions in the same order) gives bit-identical parameters, gradients and losses, so
    the bounds above hold for it too."""
    from sim.host.compiler import MLP, compile_mlp
    rng = np.random.default_rng(60 + micro)
    x = rng.standard_normal((8, 8)).astype(F32)
    y = rng.integers(0, 4, 8)
    Ws = [(rng.standard_normal((8, 16)) * 0.5).astype(F32),
          (rng.standard_normal((16, 4)) * 0.35).astype(F32)]
    bs = [(rng.standard_normal(16) * 0.1).astype(F32), (rng.standard_normal(4) * 0.1)
          .astype(F32)]
    comp = compile_mlp(MLP(layers=LAYERS, batch=8, optimizer=opt, micro_batches=micro,
                           clip=clip), CFG)
    core = CoreModel(CFG)
    res = core.apply(comp.init_actions(Ws, bs)
                     + comp.step_actions(x, y, 1, precision=(4, 4, rounding))
                     + comp.read_actions())
    assert res["run"] == [(Status.OK, 0)]
    g = run_golden(LAYERS, Ws, bs, zeros_state(Ws, bs), x, y, opt, 1, width=4,
                   rounding=rounding, micro=micro, clip=clip)
    Wc, bc = comp.decode_params(res)
    gc = comp.decode_grads(res)
    for l in range(2):
        assert np.array_equal(Wc[l], g["W"][l].astype(F32))
        assert np.array_equal(bc[l], g["b"][l].astype(F32))
        assert np.array_equal(gc["W"][l], g["dW"][l].astype(F32))
        assert np.array_equal(gc["b"][l], g["db"][l].astype(F32))
    assert np.array_equal(comp.decode_loss(res), g["loss"].astype(F32))


def test_reference_micro_batches_equal_full_batch():
    """The reference's gradient is the mean over the whole batch however it is split."""
    rng = np.random.default_rng(50)
    Ws = [rng.standard_normal((5, 7)), rng.standard_normal((7, 3))]
    bs = [rng.standard_normal(7), rng.standard_normal(3)]
    x = rng.standard_normal((12, 5))
    y = rng.integers(0, 3, 12)
    one = reference_step([5, 7, 3], Ws, bs, None, x, y, SGD(0.1), 1)
    three = reference_step([5, 7, 3], Ws, bs, None, [x[:4], x[4:8], x[8:]],
                           [y[:4], y[4:8], y[8:]], SGD(0.1), 1)
    for l in range(2):
        assert np.allclose(one["grads"]["W"][l], three["grads"]["W"][l], rtol=1e-13)
        assert np.allclose(one["weights"][l], three["weights"][l], rtol=1e-13)
    assert abs(one["loss"] - three["loss"]) < 1e-13


def test_reference_gradient_by_finite_differences():
    """The reference's backward pass is the derivative of its loss (central differences)."""
    rng = np.random.default_rng(51)
    Ws = [rng.standard_normal((4, 6)), rng.standard_normal((6, 3))]
    bs = [rng.standard_normal(6) * 0.1, rng.standard_normal(3) * 0.1]
    x = rng.standard_normal((5, 4))
    y = rng.integers(0, 3, 5)
    r = reference_step([4, 6, 3], Ws, bs, None, x, y, SGD(0.1), 1)
    h = 1e-6
    for kind, params in (("W", Ws), ("b", bs)):
        for l in range(2):
            p = params[l]
            for idx in [tuple(rng.integers(0, s) for s in p.shape) for _ in range(4)]:
                old = p[idx]
                p[idx] = old + h
                lp = reference_step([4, 6, 3], Ws, bs, None, x, y, SGD(0.1), 1)["loss"]
                p[idx] = old - h
                lm = reference_step([4, 6, 3], Ws, bs, None, x, y, SGD(0.1), 1)["loss"]
                p[idx] = old
                assert abs((lp - lm) / (2 * h) - r["grads"][kind][l][idx]) < 1e-6


def test_reference_optimizers():
    """SGD / momentum / Adam / AdamW and clipping follow their textbook (PyTorch) formulas."""
    Ws, bs = [np.array([[1.0, -2.0]])], [np.array([0.5, 0.0])]
    x, y = np.array([[2.0]]), np.array([1])
    r = reference_step([1, 2], Ws, bs, None, x, y, SGD(0.5), 1)
    gW, gb = r["grads"]["W"][0], r["grads"]["b"][0]
    z = np.array([2.0 * 1.0 + 0.5, 2.0 * -2.0])
    p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    assert np.allclose(gb, p - [0, 1]) and np.allclose(gW, 2 * (p - [0, 1]))
    assert np.allclose(r["weights"][0], Ws[0] - 0.5 * gW)
    st = zeros_state(Ws, bs)
    st["m"]["W"][0] = np.array([[0.1, 0.2]])
    r = reference_step([1, 2], Ws, bs, st, x, y, Momentum(0.5, 0.9), 1)
    m = 0.9 * st["m"]["W"][0] + gW
    assert np.allclose(r["opt_state"]["m"]["W"][0], m)
    assert np.allclose(r["weights"][0], Ws[0] - 0.5 * m)
    opt = AdamW(0.1, weight_decay=0.5)
    r = reference_step([1, 2], Ws, bs, None, x, y, opt, 1)
    assert np.allclose(r["weights"][0], Ws[0] * (1 - 0.05) - 0.1 * gW / (np.abs(gW) + 1e-8))
    norm = np.sqrt((gW ** 2).sum() + (gb ** 2).sum())
    r = reference_step([1, 2], Ws, bs, None, x, y, SGD(0.5), 1, Clip(0.1, 0.0))
    assert np.isclose(r["clip_factor"], 0.1 / norm)
    assert np.allclose(r["weights"][0], Ws[0] - 0.5 * gW * 0.1 / norm)
