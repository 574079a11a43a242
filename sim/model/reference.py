"""Independent float64 reference of one MLP training step, written plainly from the math.

It imports none of the golden blocks (no BFP, no FP32 datapath models): it is what a training
step *should* compute, so the golden model's (and thus the hardware's) step can be measured
against it. The only import from the project is the hyperparameter classes
(:class:`sim.host.optim.SGD`, :class:`~sim.host.optim.Momentum`, :class:`~sim.host.optim.Adam` /
:func:`~sim.host.optim.AdamW`, :class:`~sim.host.optim.Clip`); the update of one parameter
tensor is :func:`reference_step_f64`, the float64 textbook update (PyTorch formulas).

Network (``L`` layers, ``layers = [d_0, d_1, ..., d_L]``)::

    h_0 = x                                         (B x d_0)
    z_l = h_{l-1} @ W_l + b_l                       W_l: d_{l-1} x d_l, b_l: d_l
    h_l = relu(z_l)           for l < L
    p   = softmax(z_L)                              row-wise
    loss = mean_i ( -log p[i, y_i] )                over the whole batch B

Backward (``dz_L = (p - onehot(y)) / B``)::

    dW_l = h_{l-1}^T @ dz_l,   db_l = sum_i dz_l[i]
    dh_{l-1} = dz_l @ W_l^T,   dz_{l-1} = dh_{l-1} * (z_{l-1} > 0)

Micro-batches: ``x`` and ``y`` may be lists (one entry per micro-batch); the gradient is the
sum of the micro-batches' contributions divided by the *whole* batch size, i.e. the mean over
the whole batch (the same value as one big batch, up to float64 rounding).

Update (parameters in the order ``W_1, b_1, W_2, b_2, ...``): optional clipping by the global
norm over all gradients, ``g *= min(1, max_norm / (norm + eps))``; then SGD ``w -= lr*g``,
momentum (PyTorch) ``v = mu*v + g; w -= lr*v``, Adam / AdamW with bias correction (``t`` from
1) and decoupled decay ``w *= 1 - lr*wd`` before the Adam update.
"""
from __future__ import annotations

import math

import numpy as np

from sim.host.optim import Adam, Clip, Momentum, SGD

__all__ = ["reference_step", "reference_step_f64", "forward", "backward", "zeros_state"]

F64 = np.float64


def _as_list(a):
    return list(a) if isinstance(a, (list, tuple)) else [a]


def reference_step_f64(opt, w, m, v, g, t, dtype=F64):
    """The textbook update (PyTorch formulas) in float64, to bound the FP32 model's error, or
    in ``dtype`` (float32: the plain float32 baseline a training run is compared with)."""
    w, m, v, g = (np.asarray(a, dtype) for a in (w, m, v, g))
    if isinstance(opt, SGD):
        return w - opt.lr * g, m, v
    if isinstance(opt, Momentum):
        m = opt.momentum * m + g
        return w - opt.lr * m, m, v
    m = opt.beta1 * m + (1 - opt.beta1) * g
    v = opt.beta2 * v + (1 - opt.beta2) * g * g
    w = w * (1 - opt.lr * opt.weight_decay)
    den = np.sqrt(v) / math.sqrt(1 - opt.beta2 ** t) + opt.eps
    return w - opt.lr / (1 - opt.beta1 ** t) * m / den, m, v


def forward(weights, biases, x, dtype=F64):
    """Returns ``(zs, hs)``: pre-activations ``z_1..z_L`` and activations ``h_0..h_{L-1}``
    (computed in ``dtype``)."""
    h = np.asarray(x, dtype)
    hs, zs = [h], []
    L = len(weights)
    for l, (W, b) in enumerate(zip(weights, biases)):
        z = h @ np.asarray(W, dtype) + np.asarray(b, dtype)
        zs.append(z)
        if l < L - 1:
            h = np.maximum(z, 0.0)
            hs.append(h)
    return zs, hs


def _softmax_xent(z, y):
    """Per-row loss and ``softmax(z) - onehot(y)``."""
    mx = z.max(axis=1, keepdims=True)
    e = np.exp(z - mx)
    s = e.sum(axis=1, keepdims=True)
    rows = np.arange(len(z))
    loss = np.log(s[:, 0]) - (z[rows, y] - mx[:, 0])
    d = e / s
    d[rows, y] -= 1.0
    return loss, d


def backward(weights, zs, hs, y, batch: int, masks=None):
    """Per-row losses and gradients ``(dW list, db list)`` of ``sum_rows loss / batch``.

    ``masks`` (optional, one boolean array per hidden layer, shaped like its ``z``): the ReLU
    derivative to use instead of ``z > 0`` -- both are subgradients at a kink, so an
    implementation whose pre-activation lands on the other side of 0 within its error can be
    compared with the float64 gradient of *its* choice."""
    y = np.asarray(y, np.int64)
    loss, dz = _softmax_xent(zs[-1], y)
    dz = dz / batch
    L = len(weights)
    dWs, dbs = [None] * L, [None] * L
    for l in range(L - 1, -1, -1):
        dWs[l] = hs[l].T @ dz
        dbs[l] = dz.sum(axis=0)
        if l > 0:
            dh = dz @ np.asarray(weights[l], dz.dtype).T
            dz = dh * ((zs[l - 1] > 0) if masks is None else np.asarray(masks[l - 1], bool))
    return loss, dWs, dbs


def zeros_state(weights, biases, dtype=F64) -> dict:
    """Optimizer state of zeros: ``{"m": {"W": [...], "b": [...]}, "v": {...}}``."""
    return {k: {"W": [np.zeros(np.shape(W), dtype) for W in weights],
                "b": [np.zeros(np.shape(b), dtype) for b in biases]} for k in ("m", "v")}


def reference_step(layers, weights, biases, opt_state, x, y, optimizer, t: int,
                   clip: Clip | None = None, *, relu_masks=None, dtype=F64) -> dict:
    """One training step in float64 (or ``dtype``: ``np.float32`` gives the float32 baseline
    of the training run, every operation in float32).

    ``layers``: ``[d_0, ..., d_L]``; ``weights[l]``: ``d_l x d_{l+1}``, ``biases[l]``:
    ``d_{l+1}``. ``opt_state``: as :func:`zeros_state` returns (``None``: zeros). ``x``:
    ``B x d_0`` (or a list of micro-batches), ``y``: ``B`` int labels (or a list). ``optimizer``:
    :class:`sim.host.optim.SGD`, ``Momentum``, ``Adam`` or ``AdamW(...)``; ``t``: the step number
    (from 1; used by Adam's bias correction). ``clip``: :class:`sim.host.optim.Clip` or ``None``.
    ``relu_masks`` (optional): per micro-batch, a list with one boolean mask per hidden layer
    used as the ReLU derivative instead of ``z > 0`` (see :func:`backward`).

    Returns ``dict(loss, losses, grads={"W": [...], "b": [...]}, clip_factor, weights, biases,
    opt_state)``: ``loss`` the batch mean, ``losses`` per row; gradients before clipping; the
    updated parameters and state (float64).
    """
    layers = list(layers)
    L = len(layers) - 1
    if L < 1 or len(weights) != L or len(biases) != L:
        raise ValueError(f"layers {layers} need {L} weights and biases, not {len(weights)} "
                         f"and {len(biases)}")
    for l in range(L):
        if np.shape(weights[l]) != (layers[l], layers[l + 1]) \
                or np.shape(biases[l]) != (layers[l + 1],):
            raise ValueError(f"layer {l}: W {np.shape(weights[l])}, b {np.shape(biases[l])} do "
                             f"not match layers {layers}")
    if not isinstance(optimizer, (SGD, Momentum, Adam)):
        raise TypeError(f"optimizer must be SGD, Momentum, Adam or AdamW, not {optimizer!r}")
    xs, ys = _as_list(x), _as_list(y)
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} input micro-batches but {len(ys)} label micro-batches")
    batch = sum(len(xi) for xi in xs)

    dW = [np.zeros((layers[l], layers[l + 1]), dtype) for l in range(L)]
    db = [np.zeros(layers[l + 1], dtype) for l in range(L)]
    losses = []
    if relu_masks is not None and len(relu_masks) != len(xs):
        raise ValueError(f"relu_masks needs one entry per micro-batch ({len(xs)})")
    for i, (xi, yi) in enumerate(zip(xs, ys)):
        zs, hs = forward(weights, biases, xi, dtype)
        loss_i, dWi, dbi = backward(weights, zs, hs, yi, batch,
                                    None if relu_masks is None else relu_masks[i])
        losses.append(loss_i)
        for l in range(L):
            dW[l] += dWi[l]
            db[l] += dbi[l]
    losses = np.concatenate(losses)

    grads = [g for l in range(L) for g in (dW[l], db[l])]
    factor = 1.0
    if clip is not None:
        norm = np.sqrt(sum(float(np.sum(g * g)) for g in grads))
        factor = min(1.0, clip.max_norm / (norm + clip.eps))
    state = opt_state if opt_state is not None else zeros_state(weights, biases, dtype)
    new_w, new_b = [], []
    new_state = {k: {"W": [], "b": []} for k in ("m", "v")}
    for l in range(L):
        for kind, p, g in (("W", weights[l], dW[l]), ("b", biases[l], db[l])):
            w1, m1, v1 = reference_step_f64(optimizer, p, state["m"][kind][l],
                                            state["v"][kind][l], g * factor, t, dtype)
            (new_w if kind == "W" else new_b).append(np.asarray(w1, dtype))
            new_state["m"][kind].append(np.asarray(m1, dtype))
            new_state["v"][kind].append(np.asarray(v1, dtype))
    return {"loss": float(losses.mean()), "losses": losses, "grads": {"W": dW, "b": db},
            "clip_factor": factor, "weights": new_w, "biases": new_b, "opt_state": new_state}
