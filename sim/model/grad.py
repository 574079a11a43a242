"""Golden models of the FP32 gradient datapaths (pure numpy; mirror :mod:`hdl.grad`).

Each function performs one IEEE binary32 RNE operation per step in the hardware's order, so it
is bit-exact with the hardware (NaN payloads excepted: compare with :func:`canon`).

* :func:`elementwise` -- :class:`hdl.grad.elementwise.Elementwise` (bias add, ReLU, ReLU
  derivative, scaling, fused bias add + ReLU).
* :func:`bias_grad` -- :class:`hdl.grad.biasgrad.BiasGrad`: ``db = ((0 + dY[0]) + dY[1]) + ...``
  column by column, rows in order.
* :func:`sum_squares` -- :class:`hdl.lib.lanesum.LaneSum` with ``square=True``.
* :func:`row_sum` -- :func:`hdl.grad.rowsum.row_sum`: interleaved lanes, then a pairwise tree
  over the lanes' final values in the order they leave the adder.
* :func:`softmax_xent` -- :class:`hdl.grad.softmax.SoftmaxXent`: per row
  ``mx = max z`` (ordered bit keys; NaN if any NaN), ``e = exp(z - mx)`` (the hardware exp,
  :class:`sim.model.fp32_exp.FP32Exp`), ``s = row_sum(e)``, ``grad = (e / s - onehot) * gscale``,
  ``zt = z[label] - mx`` and the loss ``log(s) - zt`` (the hardware log,
  :class:`sim.model.fp32_log.FP32Log`, then an FP32 subtract).
"""
from __future__ import annotations

import numpy as np

from hdl.grad.config import GradConfig
from sim.model.optim import lane_sum

__all__ = ["EW_ADD", "EW_RELU", "EW_RELU_GRAD", "EW_SCALE", "EW_ADD_RELU", "EW_OPS", "canon",
           "elementwise", "bias_grad", "sum_squares", "f32_max", "softmax_xent", "xent_loss",
           "softmax_tolerance",
           "softmax_xent_f64", "lane_sum", "row_sum"]

F32 = np.float32
QNAN = 0x7FC00000

#: Elementwise opcodes (``op`` input of the hardware).
EW_ADD, EW_RELU, EW_RELU_GRAD, EW_SCALE, EW_ADD_RELU = range(5)
EW_OPS = (EW_ADD, EW_RELU, EW_RELU_GRAD, EW_SCALE, EW_ADD_RELU)


def canon(x) -> np.ndarray:
    """FP32 bit patterns with every NaN replaced by the canonical quiet NaN."""
    b = np.asarray(x)
    b = b.view(np.uint32) if b.dtype == F32 else b.astype(np.uint64).astype(np.uint32)
    return np.where((b & 0x7FFFFFFF) > 0x7F800000, np.uint32(QNAN), b)


def _relu(x):
    return np.where((x > 0) | np.isnan(x), x, F32(0)).astype(F32)


def elementwise(op: int, a, b=None, scale=None) -> np.ndarray:
    """``ADD: a + b``; ``RELU: relu(a)``; ``RELU_GRAD: a if b > 0 else +0`` (``a = dY``,
    ``b`` = stored forward output); ``SCALE: a * scale``; ``ADD_RELU: relu(a + b)``.
    ``relu(x) = x if x > 0 or x is NaN else +0``."""
    a = np.asarray(a, F32)
    with np.errstate(all="ignore"):
        if op == EW_ADD:
            return (a + np.asarray(b, F32)).astype(F32)
        if op == EW_RELU:
            return _relu(a)
        if op == EW_RELU_GRAD:
            return np.where(np.asarray(b, F32) > 0, a, F32(0)).astype(F32)
        if op == EW_SCALE:
            return (a * F32(scale)).astype(F32)
        if op == EW_ADD_RELU:
            return _relu((a + np.asarray(b, F32)).astype(F32))
    raise ValueError(f"elementwise op must be one of {EW_OPS}, not {op!r}")


def bias_grad(dy) -> np.ndarray:
    """Column sums of ``dy`` (rows x cols) in row order, starting from +0."""
    dy = np.asarray(dy, F32)
    if dy.ndim != 2 or dy.shape[0] < 1 or dy.shape[1] < 1:
        raise ValueError(f"dy must be a non-empty 2-D array, not shape {dy.shape}")
    acc = np.zeros(dy.shape[1], F32)
    with np.errstate(all="ignore"):
        for row in dy:
            acc = (acc + row).astype(F32)
    return acc


def sum_squares(x, config: GradConfig) -> np.float32:
    x = np.asarray(x, F32)
    with np.errstate(all="ignore"):
        return lane_sum(x * x, config.lanes)


def _key(bits):
    bits = np.asarray(bits, np.uint32).astype(np.uint64)
    return np.where(bits >> 31, (~bits) & 0xFFFFFFFF, bits | 0x80000000)


def f32_max(z) -> np.float32:
    """Maximum by the hardware's ordered keys (``-0 < +0``); NaN (canonical) if any NaN."""
    z = np.asarray(z, F32)
    if np.any(np.isnan(z)):
        return np.array(QNAN, np.uint32).view(F32)[()]
    return z[int(np.argmax(_key(z.view(np.uint32))))]


def row_sum(x, lanes: int) -> np.ndarray:
    """Per-row sums of ``x`` (rows x C, float32) in the order of :func:`hdl.grad.rowsum.row_sum`.

    ``M = max(C, lanes)`` slots (slots ``C..M-1`` are ``+0``); slot ``i`` is added into lane
    ``i mod lanes`` (lanes start at ``+0``); the lanes' finals, in the order they leave the
    adder, are ``f_k = part[(M + k) mod lanes]``; then pairwise:
    ``f = [f0 + f1, f2 + f3, ...]`` until one value is left.
    """
    x = np.asarray(x, F32)
    if x.ndim != 2 or lanes < 2 or lanes & (lanes - 1):
        raise ValueError(f"row_sum needs a 2-D array and a power-of-two lanes >= 2, not "
                         f"shape {x.shape}, lanes {lanes}")
    rows, c = x.shape
    slots = max(c, lanes)
    padded = np.zeros((rows, slots), F32)
    padded[:, :c] = x
    part = np.zeros((rows, lanes), F32)
    with np.errstate(all="ignore"):
        for i in range(slots):
            part[:, i % lanes] = (part[:, i % lanes] + padded[:, i]).astype(F32)
        f = part[:, [(slots + k) % lanes for k in range(lanes)]]
        while f.shape[1] > 1:
            f = (f[:, 0::2] + f[:, 1::2]).astype(F32)
    return f[:, 0]


def softmax_xent(z, labels, gscale, config: GradConfig, exp_config=None, log_config=None):
    """Golden softmax + cross-entropy. Returns ``(grad, s, zt, loss)`` (float32 arrays; the
    last three per row). ``exp_config``: :class:`~hdl.fp32.divsqrt_config.FP32DivSqrtConfig`,
    ``log_config``: :class:`~hdl.fp32.log_config.FP32LogConfig` (defaults if ``None``)."""
    from sim.model.fp32_exp import FP32Exp
    from sim.model.fp32_log import FP32Log
    z = np.asarray(z, F32)
    labels = np.asarray(labels)
    if z.ndim != 2:
        raise ValueError(f"z must be 2-D (rows x classes), not shape {z.shape}")
    rows, c = z.shape
    if not 1 <= c <= config.max_classes:
        raise ValueError(f"classes must be in 1..{config.max_classes}, not {c}")
    if labels.shape != (rows,) or np.any(labels < 0) or np.any(labels >= c):
        raise ValueError(f"labels must be {rows} ints in 0..{c - 1}")
    exp = FP32Exp(exp_config)
    with np.errstate(all="ignore"):
        mx = np.array([f32_max(row) for row in z], F32)
        d = (z - mx[:, None]).astype(F32)
        e = np.asarray(exp(a=d.view(np.uint32).astype(np.int64).ravel())["r"],
                       np.int64).astype(np.uint32).view(F32).reshape(rows, c)
        s_out = row_sum(e, config.lanes)
        p = (e / s_out[:, None]).astype(F32)
        onehot = np.zeros((rows, c), F32)
        onehot[np.arange(rows), labels] = 1
        grad = ((p - onehot).astype(F32) * F32(gscale)).astype(F32)
        zt = (z[np.arange(rows), labels] - mx).astype(F32)
        log_s = np.asarray(FP32Log(log_config)(s_out.view(np.uint32).astype(np.int64))["r"],
                           np.int64).astype(np.uint32).view(F32)
        loss = (log_s - zt).astype(F32)
    return grad, s_out, zt, loss


def xent_loss(s, zt) -> np.ndarray:
    """Per-row cross-entropy from the loss terms in float64, ``log(s) - zt`` (a reference for
    the hardware's FP32 ``loss``)."""
    return np.log(np.asarray(s, np.float64)) - np.asarray(zt, np.float64)


def softmax_tolerance(c: int, gscale, zt, loss64):
    """The stated float64 tolerances of :func:`softmax_xent` for rows of ``c`` classes
    (docs/datapaths.md): ``(grad_tol, loss_tol)`` with
    ``grad_tol = (c + 8) * 2**-24 * |gscale|`` and, per row,
    ``loss_tol = 2**-24 * (c + 8 + 3 * (|zt| + |loss64|))``."""
    u = 2.0 ** -24
    grad_tol = (c + 8) * u * abs(float(gscale))
    loss_tol = u * (c + 8 + 3 * (np.abs(np.asarray(zt, np.float64))
                                 + np.abs(np.asarray(loss64, np.float64))))
    return grad_tol, loss_tol


def softmax_xent_f64(z, labels, gscale):
    """float64 reference: ``(softmax(z) - onehot) * gscale`` and per-row loss."""
    z = np.asarray(z, np.float64)
    mx = z.max(axis=1, keepdims=True)
    e = np.exp(z - mx)
    s = e.sum(axis=1, keepdims=True)
    p = e / s
    onehot = np.zeros_like(p)
    onehot[np.arange(len(z)), labels] = 1
    loss = np.log(s[:, 0]) - (z[np.arange(len(z)), labels] - mx[:, 0])
    return (p - onehot) * gscale, loss
