"""Golden model of the training core's vector unit (``VEC``, ``REDUCE``, ``SOFTMAX_XENT``) on a
scratchpad memory image, plus the matrix/vector layout helpers the core model and the compiler
share. Pure numpy; the arithmetic is that of :mod:`sim.model.grad` (bit-exact with the hardware).

Memory image
------------
A ``numpy.uint32`` array of shape ``(lines, S)``: word ``(line, lane)`` holds FP32 bits (or a
label in its low 16 bits). A ``rows x cols`` matrix at line ``base`` occupies ``rows *
ceil(cols / S)`` lines, element ``(r, c)`` at line ``base + r * ceil(cols / S) + c // S``,
lane ``c % S``; padding lanes (``c >= cols`` in a row's last line) are never written. A vector
of ``n`` words occupies ``ceil(n / S)`` lines, word ``i`` at line ``base + i // S``, lane
``i % S``.

Helpers (the layout convention, decided here):

* :func:`get_matrix` / :func:`get_vector` return a **copy as uint32 bit patterns**
  (``.view(np.float32)`` for the values).
* :func:`set_matrix` / :func:`set_vector` store an array: a floating array (any float dtype)
  is rounded to float32 and stored as its FP32 bits; an integer or bool array is stored as raw
  32-bit words (bit patterns, labels). Only real lanes are written.

NaNs: every arithmetic result is stored as the canonical quiet NaN ``0x7FC00000`` (what the
FP32 units return); results that pass an operand through (``RELU``, ``RELU_GRAD``, ``COPY``)
keep its bits, as the hardware does.
"""
from __future__ import annotations

import numpy as np

from hdl.core.config import CoreConfig
from hdl.core.isa import Op, Rop, Vop
from hdl.grad.config import GradConfig

__all__ = ["run_vector", "get_matrix", "set_matrix", "get_vector", "set_vector",
           "matrix_lines", "vector_lines", "softmax_xent_any_label"]

F32 = np.float32
QNAN = 0x7FC00000


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def matrix_lines(rows: int, cols: int, S: int) -> int:
    """Lines occupied by a ``rows x cols`` matrix (each row padded to whole lines)."""
    return rows * _cdiv(cols, S)


def vector_lines(n: int, S: int) -> int:
    """Lines occupied by a vector of ``n`` words."""
    return _cdiv(n, S)


def _check_mem(mem, S):
    if not isinstance(mem, np.ndarray) or mem.dtype != np.uint32 or mem.ndim != 2:
        raise TypeError(f"mem must be a 2-D numpy uint32 array (lines, S), not "
                        f"{type(mem).__name__} {getattr(mem, 'dtype', '')} "
                        f"{getattr(mem, 'shape', '')}")
    if S is None:
        S = mem.shape[1]
    if mem.shape[1] != S:
        raise ValueError(f"mem has {mem.shape[1]} words per line, not S = {S}")
    return S


def _index(mem, base, rows, cols, S, what):
    if rows < 0 or cols < 0 or base < 0:
        raise ValueError(f"{what}: base, rows and cols must be >= 0, not {base}, {rows}, {cols}")
    L = _cdiv(cols, S)
    if base + rows * L > mem.shape[0]:
        raise ValueError(f"{what}: lines {base}..{base + rows * L - 1} outside the memory "
                         f"image ({mem.shape[0]} lines)")
    c = np.arange(cols)
    line = base + np.arange(rows)[:, None] * L + (c // S)[None, :]
    lane = np.broadcast_to((c % S)[None, :], line.shape)
    return line, lane


def _bits(values, shape, what) -> np.ndarray:
    v = np.asarray(values)
    if np.issubdtype(v.dtype, np.floating):
        v = v.astype(F32).view(np.uint32)
    elif np.issubdtype(v.dtype, np.integer) or v.dtype == bool:
        v = (v.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)
    else:
        raise TypeError(f"{what}: values must be a float or integer array, not {v.dtype}")
    if v.shape != shape:
        raise ValueError(f"{what}: values have shape {v.shape}, expected {shape}")
    return v


def get_matrix(mem, base: int, rows: int, cols: int, S: int | None = None) -> np.ndarray:
    """The ``rows x cols`` matrix at line ``base`` as uint32 bits (a copy)."""
    S = _check_mem(mem, S)
    line, lane = _index(mem, base, rows, cols, S, "get_matrix")
    return mem[line, lane].copy()


def set_matrix(mem, base: int, values, S: int | None = None) -> None:
    """Store the 2-D array ``values`` as a matrix at line ``base`` (real lanes only)."""
    S = _check_mem(mem, S)
    v = np.asarray(values)
    if v.ndim != 2:
        raise ValueError(f"set_matrix: values must be 2-D, not shape {v.shape}")
    line, lane = _index(mem, base, v.shape[0], v.shape[1], S, "set_matrix")
    mem[line, lane] = _bits(v, v.shape, "set_matrix")


def get_vector(mem, base: int, n: int, S: int | None = None) -> np.ndarray:
    """The ``n`` words at line ``base`` as uint32 bits (a copy)."""
    S = _check_mem(mem, S)
    line, lane = _index(mem, base, 1, n, S, "get_vector")
    return mem[line[0], lane[0]].copy()


def set_vector(mem, base: int, values, S: int | None = None) -> None:
    """Store the 1-D array ``values`` as a vector at line ``base`` (real lanes only)."""
    S = _check_mem(mem, S)
    v = np.asarray(values)
    if v.ndim != 1:
        raise ValueError(f"set_vector: values must be 1-D, not shape {v.shape}")
    line, lane = _index(mem, base, 1, len(v), S, "set_vector")
    mem[line[0], lane[0]] = _bits(v, v.shape, "set_vector")


def _canon(x) -> np.ndarray:
    b = np.asarray(x, F32).view(np.uint32)
    return np.where((b & 0x7FFFFFFF) > 0x7F800000, np.uint32(QNAN), b).astype(np.uint32)


def _f(bits) -> np.ndarray:
    return np.asarray(bits, np.uint32).view(F32)


def softmax_xent_any_label(z, labels, gscale, config: GradConfig, exp_config=None,
                           log_config=None):
    """:func:`sim.model.grad.softmax_xent` extended to labels ``>= C`` as the hardware treats them
    (:class:`hdl.grad.softmax.SoftmaxXent`: no onehot term, ``z_y = +0``). Rows with a valid
    label are computed by :func:`sim.model.grad.softmax_xent` itself. Returns ``(grad, loss)``
    (float32)."""
    from sim.model.fp32_exp import FP32Exp
    from sim.model.fp32_log import FP32Log
    from sim.model.grad import f32_max, row_sum, softmax_xent

    z = np.asarray(z, F32)
    labels = np.asarray(labels, np.int64)
    rows, c = z.shape
    if not 1 <= c <= config.max_classes:
        raise ValueError(f"softmax: classes must be in 1..{config.max_classes} "
                         f"(GradConfig.max_classes), not {c}")
    grad = np.zeros((rows, c), F32)
    loss = np.zeros(rows, F32)
    ok = labels < c
    if ok.any():
        g, _, _, lo = softmax_xent(z[ok], labels[ok], gscale, config, exp_config, log_config)
        grad[ok], loss[ok] = g, lo
    if (~ok).any():
        zb = z[~ok]
        n = len(zb)
        with np.errstate(all="ignore"):
            mx = np.array([f32_max(row) for row in zb], F32)
            d = (zb - mx[:, None]).astype(F32)
            e = np.asarray(FP32Exp(exp_config)(a=d.view(np.uint32).astype(np.int64).ravel())["r"],
                           np.int64).astype(np.uint32).view(F32).reshape(n, c)
            s = row_sum(e, config.lanes)
            p = (e / s[:, None]).astype(F32)
            grad[~ok] = ((p - F32(0)).astype(F32) * F32(gscale)).astype(F32)
            zt = (F32(0) - mx).astype(F32)
            log_s = np.asarray(FP32Log(log_config)(s.view(np.uint32).astype(np.int64))["r"],
                               np.int64).astype(np.uint32).view(F32)
            loss[~ok] = (log_s - zt).astype(F32)
    return grad, loss


def run_vector(mem, op: int, args: dict, *, acc: int, gscale: int, config: CoreConfig,
               grad_config: GradConfig | None = None, exp_config=None, log_config=None):
    """Execute one ``VEC``, ``REDUCE`` or ``SOFTMAX_XENT`` on ``mem`` in place (and return it).

    ``args``: the instruction's fields as :func:`hdl.core.isa.decode` returns them, addresses
    already effective (``loop`` is ignored; ``REDUCE`` uses ``acc`` below, not
    ``args["acc"]``). ``acc``: the resolved accumulate flag (0/1) of a ``REDUCE``
    ``BIAS_GRAD`` (``SUMSQ`` ignores it: it always overwrites). ``gscale``: FP32 bits of the
    softmax gradient scale. ``grad_config`` (default ``GradConfig()``, as the hardware):
    ``lanes`` (summation order of ``SUMSQ`` and the softmax denominator) and ``max_classes``;
    ``exp_config`` (:class:`~hdl.fp32.divsqrt_config.FP32DivSqrtConfig`) and ``log_config``
    (:class:`~hdl.fp32.log_config.FP32LogConfig`) select the exp and log approximations.

    * ``VEC``: :func:`sim.model.grad.elementwise` for ``ADD, RELU, RELU_GRAD, SCALE``
      (``imm`` = FP32 bits of the factor) and ``ADD_RELU``; ``b`` is a matrix like ``a`` or,
      with ``bcast``, one row of ``cols`` words used for every row; ``COPY`` copies bits,
      ``ZERO`` writes +0.
    * ``REDUCE BIAS_GRAD``: ``db = sim.model.grad.bias_grad(a)`` (``cols`` words to ``d``); with
      ``acc``: ``d = d_old + db`` (one RNE add per column).
    * ``REDUCE SUMSQ``: ``sim.model.grad.sum_squares`` of the ``rows x cols`` elements in row-major
      order, to word 0 of line ``d`` (the other lanes are untouched).
    * ``SOFTMAX_XENT``: ``z`` = matrix at ``a``, labels = vector of ``rows`` words at ``b``
      (low 16 bits); ``sim.model.grad.softmax_xent(z, labels, gscale)``: the gradient (``rows x
      cols``) to ``d`` and the per-row loss (vector of ``rows`` words) to ``e``. A label
      ``>= cols`` gives no onehot term and ``z_y = +0``, as the hardware.

    Raises ``ValueError`` for an opcode, sub-op or shape the unit does not execute, or an
    operand outside the image.
    """
    from sim.model.grad import bias_grad, elementwise, sum_squares

    if not isinstance(config, CoreConfig):
        raise TypeError(f"config must be a CoreConfig, not {type(config).__name__}")
    S = config.size
    _check_mem(mem, S)
    gc = grad_config if grad_config is not None else GradConfig()
    if not isinstance(gc, GradConfig):
        raise TypeError(f"grad_config must be a GradConfig, not {type(gc).__name__}")
    rows, cols = args["rows"], args["cols"]
    if rows < 1 or cols < 1:
        raise ValueError(f"rows and cols must be >= 1, not {rows} x {cols}")

    if op == Op.VEC:
        vop = args["vop"]
        if vop not in Vop.ALL:
            raise ValueError(f"VEC vop must be one of {Vop.ALL}, not {vop!r}")
        if vop == Vop.ZERO:
            set_matrix(mem, args["d"], np.zeros((rows, cols), np.uint32), S)
            return mem
        a = get_matrix(mem, args["a"], rows, cols, S)
        if vop == Vop.COPY:
            set_matrix(mem, args["d"], a, S)
            return mem
        b = None
        if vop in Vop.READS_B:
            if args["bcast"]:
                b = np.broadcast_to(get_vector(mem, args["b"], cols, S)[None, :], (rows, cols))
            else:
                b = get_matrix(mem, args["b"], rows, cols, S)
            b = _f(b)
        # Vop codes 0..4 are the Elementwise op codes (EW_ADD .. EW_ADD_RELU).
        r = elementwise(vop, _f(a), b, _f(np.uint32(args["imm"] & 0xFFFFFFFF)))
        bits = np.asarray(r, F32).view(np.uint32)
        if vop in (Vop.ADD, Vop.SCALE, Vop.ADD_RELU):
            bits = _canon(r)
        set_matrix(mem, args["d"], bits, S)
        return mem

    if op == Op.REDUCE:
        rop = args["rop"]
        a = _f(get_matrix(mem, args["a"], rows, cols, S))
        if rop == Rop.BIAS_GRAD:
            db = bias_grad(a)
            if acc:
                old = _f(get_vector(mem, args["d"], cols, S))
                with np.errstate(all="ignore"):
                    db = (old + db).astype(F32)
            set_vector(mem, args["d"], _canon(db), S)
            return mem
        if rop == Rop.SUMSQ:
            ss = sum_squares(a, gc)
            if args["d"] >= mem.shape[0]:
                raise ValueError(f"REDUCE d = {args['d']} outside the memory image")
            mem[args["d"], 0] = _canon(np.array([ss], F32))[0]
            return mem
        raise ValueError(f"REDUCE rop must be one of {Rop.ALL}, not {rop!r}")

    if op == Op.SOFTMAX_XENT:
        z = _f(get_matrix(mem, args["a"], rows, cols, S))
        labels = get_vector(mem, args["b"], rows, S) & 0xFFFF
        gs = _f(np.uint32(gscale & 0xFFFFFFFF))[()]
        grad, loss = softmax_xent_any_label(z, labels, gs, gc, exp_config, log_config)
        set_matrix(mem, args["d"], _canon(grad), S)
        set_vector(mem, args["e"], _canon(loss), S)
        return mem

    raise ValueError(f"op must be VEC ({Op.VEC}), REDUCE ({Op.REDUCE}) or SOFTMAX_XENT "
                     f"({Op.SOFTMAX_XENT}), not {op!r}")
