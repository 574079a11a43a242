"""Golden model of the in-place transposed systolic array and the matmul engine (pure numpy).

Mirrors :mod:`hdl.array` bit-exactly (docs/array.md, ``docs/array.md``):

* **Tiling.** ``S = config.size``. ``FWD`` (``C = A . B``, i.e. ``Y = X . W``) runs
  ``for kt: for nt:`` over weight tiles; ``BWD_DATA`` (``A = C . B^T``, ``dX = dY . W^T``) runs
  ``for nt: for kt:``; ``BWD_WEIGHT`` (``B = A^T . C``, ``dW = X^T . dY``) runs
  ``for mt: for kt: for nt:`` over batch tiles. Contraction tiles are visited in ascending
  order, which fixes the FP32 accumulation order of every output element.
* **Quantization** (:mod:`sim.model.bfp`, two converters with their own LFSRs). Converter 0 (seed
  ``lfsr_seed``) quantizes the streamed operand: ``FWD`` an ``X`` row group ``X[m, kt]``
  per beat, ``BWD_DATA`` a ``dY`` row group ``dY[m, nt]`` per beat, ``BWD_WEIGHT`` the ``S``
  column groups ``X[mt, kt + j]`` (along the batch) of a block. Converter 1 (seed
  ``lfsr_seed + 1``) quantizes the weight tile rows ``W[kt + r, nt]`` (``FWD``/``BWD_DATA``) or
  the ``dY`` column groups ``dY[mt, nt + j]`` (``BWD_WEIGHT``). Groups are ``S`` values along
  the pass's contraction dimension, padding is ``+0.0``, and every group (padding groups too)
  advances its converter's LFSR once, in every rounding mode.
* **Weight tiles** share one exponent: each row is quantized as a group (exponent ``E_r``),
  then ``E_t = max_r E_r`` and every magnitude is aligned ``M >> (E_t - E_r)`` with
  round-to-nearest-even (:func:`align_rne`), in every rounding mode.
* **Inside a tile** every partial-sum chain is an exact integer (numpy ``int64`` here).
* **Edge**: chain ``v`` with exponent ``e = E_a + E_b - (m_a - 1) - (m_b - 1)`` becomes the
  FP32 ``v * 2**e`` (RNE, exact subnormals, ``+0.0`` for ``v = 0``), then is added with RNE
  (numpy ``float32``) into the output, which starts as ``+0.0`` or, with ``accumulate``, as the
  existing contents.

Also :func:`reference_f64` (no quantization) to state the BFP error. No Amaranth import.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hdl.array.config import BWD_DATA, BWD_WEIGHT, FWD, MODE_NAMES, MODES, ArrayConfig
from sim.model.bfp import LFSR, ROUND_NEAREST, ROUNDING_MODES, dequantize_group_bits, quantize

__all__ = ["FWD", "BWD_DATA", "BWD_WEIGHT", "MODES", "MODE_NAMES",
           "OK", "ERR_MODE", "ERR_SHAPE", "ERR_WIDTH", "ERR_ROUNDING", "ERR_ADDR",
           "STATUS_NAMES", "align_rne", "quantize_weight_tile", "edge_fp32",
           "signed_ints", "pass_dims", "pass_beats", "useful_macs", "matmul_pass",
           "PassResult", "reference_f64", "ArrayStreamModel", "MatmulCommand",
           "MatmulEngineModel", "lines_of", "validate_command"]

#: Status codes of a matmul command (``status`` field of the response).
OK, ERR_MODE, ERR_SHAPE, ERR_WIDTH, ERR_ROUNDING, ERR_ADDR = 0, 1, 2, 3, 4, 5
STATUS_NAMES = {OK: "ok", ERR_MODE: "bad mode", ERR_SHAPE: "bad shape", ERR_WIDTH: "bad width",
                ERR_ROUNDING: "bad rounding", ERR_ADDR: "bad address"}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def signed_ints(sign, mag) -> np.ndarray:
    """``(-1)**sign * mag`` as int64."""
    mag = np.asarray(mag, dtype=np.int64)
    return np.where(np.asarray(sign) != 0, -mag, mag)


def align_rne(mag, shift, max_mantissa: int) -> np.ndarray:
    """``round(mag / 2**shift)`` to nearest, ties to even (``shift >= 0``).

    Shifts above ``max_mantissa + 1`` behave like ``max_mantissa + 1`` (the result is 0:
    ``mag < 2**max_mantissa``), which is how the hardware clamps the shift amount.
    """
    mag = np.asarray(mag, dtype=np.int64)
    d = np.minimum(np.asarray(shift, dtype=np.int64), max_mantissa + 1)
    q = mag >> d
    rem = mag & ((np.int64(1) << d) - 1)
    half = np.where(d > 0, np.int64(1) << np.maximum(d - 1, 0), 0)
    up = (d > 0) & ((rem > half) | ((rem == half) & ((q & 1) == 1)))
    return q + up


def quantize_weight_tile(tile, config: ArrayConfig, *, width: int, rounding: int, lfsr: LFSR,
                         stat=None):
    """One ``S x S`` weight tile with a single shared exponent.

    Returns ``(exp, sign (S, S), mag (S, S), invalid, overflow)``. Rows go through converter 1
    (``lfsr``) in row order; then magnitudes are aligned to the largest row exponent. ``stat``
    (a :class:`sim.model.stats.StatModel`) takes the row groups (before the alignment).
    """
    tile = np.asarray(tile, np.float32)
    q = quantize(tile, config.bfp(1), width=width, axis=-1, rounding=rounding, lfsr=lfsr)
    if stat is not None:
        stat.accept_groups(tile, width, q)
    row_exp = q.exp[:, 0].astype(np.int64)
    e_t = int(row_exp.max())
    mag = align_rne(q.mag, (e_t - row_exp)[:, None], config.max_mantissa)
    sign = q.sign.astype(np.int64)
    return e_t, sign, mag, bool(q.invalid.any()), bool(q.overflow.any())


def edge_fp32(value, exp) -> np.ndarray:
    """float32 of ``value * 2**exp`` (RNE, exact subnormals, Inf on overflow, ``+0.0`` for 0):
    the array-edge converter, vectorised."""
    v = np.asarray(value, dtype=np.int64)
    bits = dequantize_group_bits(exp, (v < 0).astype(np.int64), np.abs(v), 1)
    return bits.view(np.float32)


def pass_dims(mode: int, M: int, K: int, N: int):
    """``(contraction, rows, lanes)`` of a pass: the output matrix is ``rows x lanes``."""
    return {FWD: (K, M, N), BWD_DATA: (N, M, K), BWD_WEIGHT: (M, K, N)}[mode]


def useful_macs(M: int, K: int, N: int) -> int:
    return M * K * N


def pass_beats(mode: int, M: int, K: int, N: int, S: int) -> int:
    """Array beats the pass streams (padding beats of ``BWD_WEIGHT`` batch tiles included)."""
    if mode == BWD_WEIGHT:
        return _cdiv(M, S) * _cdiv(K, S) * _cdiv(N, S) * S
    return _cdiv(K, S) * _cdiv(N, S) * M


def _pad(block, rows: int, cols: int) -> np.ndarray:
    out = np.zeros((rows, cols), np.float32)
    out[:block.shape[0], :block.shape[1]] = block
    return out


@dataclass
class PassResult:
    """Result of :func:`matmul_pass`."""

    out: np.ndarray                     #: the new output matrix (float32)
    invalid: bool = False               #: a NaN reached a converter
    overflow: bool = False              #: an infinity reached a converter
    weight_tiles: dict = field(default_factory=dict)  #: ``(kt, nt) -> (exp, sign, mag)``
    beats: int = 0
    macs: int = 0


def matmul_pass(mode: int, A, B, C, config: ArrayConfig, *, width_a: int, width_b: int,
                rounding: int = ROUND_NEAREST, accumulate: bool = False,
                lfsrs: tuple[LFSR, LFSR] | None = None, stats=None) -> PassResult:
    """One engine pass on float32 matrices ``A (M x K)``, ``B (K x N)``, ``C (M x N)``.

    ``FWD``: returns ``C' = [C +] A . B``; ``BWD_DATA``: ``A' = [A +] C . B^T``;
    ``BWD_WEIGHT``: ``B' = [B +] A^T . C``, each computed exactly as the hardware does.
    ``width_a`` is the mantissa width of the streamed operand (``X`` in ``FWD`` and
    ``BWD_WEIGHT``, ``dY`` in ``BWD_DATA``), ``width_b`` that of ``W`` (``FWD``/``BWD_DATA``) or
    ``dY`` (``BWD_WEIGHT``). ``lfsrs`` (converter 0 and 1) are advanced; fresh ones when None.
    ``stats`` (two :class:`sim.model.stats.StatModel`, converter 0 and 1) take every group
    each converter quantizes, in the hardware's order (FAST's statistic, docs/fast.md).
    """
    S = config.size
    A = np.asarray(A, np.float32)
    B = np.asarray(B, np.float32)
    C = np.asarray(C, np.float32)
    M, K = A.shape
    K2, N = B.shape
    if K2 != K or C.shape != (M, N):
        raise ValueError(f"shapes do not match: A {A.shape}, B {B.shape}, C {C.shape}")
    if lfsrs is None:
        lfsrs = (LFSR(config.bfp(0)), LFSR(config.bfp(1)))
    l0, l1 = lfsrs
    st0, st1 = stats if stats is not None else (None, None)
    cfg0, cfg1 = config.bfp(0), config.bfp(1)
    shift = (width_a - 1) + (width_b - 1)
    inv = ovf = False
    res = PassResult(out=None, beats=pass_beats(mode, M, K, N, S), macs=useful_macs(M, K, N))

    # Every tile is quantized in one call per converter, its groups in the hardware's order
    # (so each LFSR hands out its noise in that order); the FP32 accumulation then runs over
    # the contraction tiles in ascending order, all output tiles of one step at once.
    if mode in (FWD, BWD_DATA):
        KT, NT = _cdiv(K, S), _cdiv(N, S)
        Bp = _pad(B, KT * S, NT * S).reshape(KT, S, NT, S).transpose(0, 2, 1, 3)  # [kt,nt,r,c]
        if mode == FWD:
            tiles = Bp                                                    # order kt, nt
            src = _pad(A, M, KT * S).reshape(M, KT, S).transpose(1, 0, 2)[:, None]  # [kt,1,m,S]
            out = _pad(C, M, NT * S) if accumulate else np.zeros((M, NT * S), np.float32)
        else:
            tiles = Bp.transpose(1, 0, 2, 3)                              # order nt, kt
            src = _pad(C, M, NT * S).reshape(M, NT, S).transpose(1, 0, 2)[:, None]  # [nt,1,m,S]
            out = _pad(A, M, KT * S) if accumulate else np.zeros((M, KT * S), np.float32)
        T0, T1 = tiles.shape[:2]
        tiles = np.ascontiguousarray(tiles)
        qw = quantize(tiles, cfg1, width=width_b, axis=-1, rounding=rounding, lfsr=l1)
        if st1 is not None:                 # the row groups, before the tile alignment
            st1.accept_groups(tiles, width_b, qw)
        row_exp = qw.exp[..., 0].astype(np.int64)                         # [t0, t1, r]
        e_w = row_exp.max(axis=-1)                                        # [t0, t1]
        w_m = align_rne(qw.mag, (e_w[..., None] - row_exp)[..., None], config.max_mantissa)
        w_s = qw.sign.astype(np.int64)
        for i in range(T0):
            for j in range(T1):
                key = (i, j) if mode == FWD else (j, i)
                res.weight_tiles[key] = (int(e_w[i, j]), w_s[i, j].copy(), w_m[i, j].copy())
        w = signed_ints(w_s, w_m)                                         # [t0, t1, k, n]
        xs = np.ascontiguousarray(np.broadcast_to(src, (T0, T1, M, S)))
        q = quantize(xs, cfg0, width=width_a, axis=-1, rounding=rounding, lfsr=l0)
        if st0 is not None:
            st0.accept_groups(xs, width_a, q)
        x = signed_ints(q.sign, q.mag)                                    # [t0, t1, m, S]
        chain = x @ w if mode == FWD else x @ np.swapaxes(w, -1, -2)      # [t0, t1, m, lanes]
        exp = q.exp.astype(np.int64) + e_w[..., None, None] - shift       # [t0, t1, m, 1]
        val = edge_fp32(chain, exp)
        inv = bool(qw.invalid.any() or q.invalid.any())
        ovf = bool(qw.overflow.any() or q.overflow.any())
        for i in range(T0):                                               # contraction tiles
            out = (out + val[i].transpose(1, 0, 2).reshape(M, T1 * S)).astype(np.float32)
        out = out[:, :N] if mode == FWD else out[:, :K]
    elif mode == BWD_WEIGHT:
        MT, KT, NT = _cdiv(M, S), _cdiv(K, S), _cdiv(N, S)
        Ap = _pad(A, MT * S, KT * S).reshape(MT, S, KT, S).transpose(0, 2, 1, 3)  # [mt,kt,m,k]
        Cp = _pad(C, MT * S, NT * S).reshape(MT, S, NT, S).transpose(0, 2, 1, 3)  # [mt,nt,m,n]
        xa = np.ascontiguousarray(np.broadcast_to(Ap[:, :, None], (MT, KT, NT, S, S)))
        ca = np.ascontiguousarray(np.broadcast_to(Cp[:, None], (MT, KT, NT, S, S)))
        qx = quantize(xa, cfg0, width=width_a, axis=-2, rounding=rounding, lfsr=l0)
        qd = quantize(ca, cfg1, width=width_b, axis=-2, rounding=rounding, lfsr=l1)
        if st0 is not None:                 # column groups, in column order
            st0.accept_groups(xa, width_a, qx, axis=-2)
            st1.accept_groups(ca, width_b, qd, axis=-2)
        x = signed_ints(qx.sign, qx.mag)                                  # [.., m, k]
        d = signed_ints(qd.sign, qd.mag)                                  # [.., m, n]
        chain = np.swapaxes(x, -1, -2) @ d                                # [.., k, n]
        exp = (np.swapaxes(qx.exp.astype(np.int64), -1, -2)
               + qd.exp.astype(np.int64) - shift)                         # [.., k, n]
        val = edge_fp32(chain, exp)
        inv = bool(qx.invalid.any() or qd.invalid.any())
        ovf = bool(qx.overflow.any() or qd.overflow.any())
        out = _pad(B, KT * S, NT * S) if accumulate else np.zeros((KT * S, NT * S), np.float32)
        for mt in range(MT):                                              # batch tiles
            out = (out + val[mt].transpose(0, 2, 1, 3).reshape(KT * S, NT * S)).astype(
                np.float32)
        out = out[:K, :N]
    else:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    res.out, res.invalid, res.overflow = out, inv, ovf
    return res


def reference_f64(mode: int, A, B, C, *, accumulate: bool = False) -> np.ndarray:
    """The pass in float64 without quantization (to state the BFP error)."""
    A, B, C = (np.asarray(t, np.float64) for t in (A, B, C))
    if mode == FWD:
        return (C if accumulate else 0) + A @ B
    if mode == BWD_DATA:
        return (A if accumulate else 0) + C @ B.T
    if mode == BWD_WEIGHT:
        return (B if accumulate else 0) + A.T @ C
    raise ValueError(f"mode must be one of {MODES}, not {mode!r}")


# ---- stream-level model of hdl.array.SystolicArray -----------------------------------------

class ArrayStreamModel:
    """Transaction model of :class:`hdl.array.array.SystolicArray`.

    ``load(bank, row, sign, mag)`` mirrors a ``wload`` transfer; ``beat(...)`` mirrors an
    ``inp`` transfer and returns the output vectors (signed ints, one per input beat, in order)
    that become determined by it: ``FWD`` ``h . W[bank]`` (lane ``n``), ``BWD_DATA``
    ``W[bank] . v`` (lane ``k``), ``BWD_WEIGHT`` nothing until the beat flagged ``last``, then
    the ``S`` rows ``k`` of ``sum_m outer(h_m, v_m)`` over the batch tile (``first`` .. ``last``,
    exactly ``S`` beats).
    """

    def __init__(self, config: ArrayConfig):
        self.config = config
        S = config.size
        self.w = np.zeros((2, S, S), np.int64)
        self.tile: list = []

    def load(self, bank: int, row: int, sign, mag) -> None:
        self.w[bank, row] = signed_ints(sign, mag)

    def beat(self, mode: int, *, h=None, v=None, bank: int = 0, first: bool = False,
             last: bool = False) -> list[np.ndarray]:
        S = self.config.size
        h = np.zeros(S, np.int64) if h is None else np.asarray(h, np.int64)
        v = np.zeros(S, np.int64) if v is None else np.asarray(v, np.int64)
        if mode == FWD:
            return [h @ self.w[bank]]
        if mode == BWD_DATA:
            return [self.w[bank] @ v]
        if first:
            self.tile = []
        self.tile.append((h, v))
        if not last:
            return []
        if len(self.tile) != S:
            raise ValueError(f"a BWD_WEIGHT batch tile must be exactly {S} beats")
        acc = sum(np.outer(a, b) for a, b in self.tile)
        self.tile = []
        return [acc[k] for k in range(S)]


# ---- engine-level model: memories, commands, status --------------------------------------

def lines_of(rows: int, cols: int, S: int) -> int:
    """Scratchpad lines of a ``rows x cols`` matrix (each row padded to whole lines)."""
    return rows * _cdiv(cols, S)


@dataclass(frozen=True)
class MatmulCommand:
    """A ``START`` command of :class:`hdl.array.engine.MatmulEngine`.

    ``A`` (``M x K``, scratchpad A at line ``base_a``), ``B`` (``K x N``, B at ``base_b``), ``C``
    (``M x N``, C at ``base_c``); rows of a matrix are padded to whole lines of ``S`` words and
    stored consecutively. ``width_a``/``width_b`` as in :func:`matmul_pass`.
    """

    mode: int
    M: int
    K: int
    N: int
    width_a: int = 8
    width_b: int = 8
    rounding: int = ROUND_NEAREST
    accumulate: bool = False
    base_a: int = 0
    base_b: int = 0
    base_c: int = 0


def validate_command(cmd: MatmulCommand, config: ArrayConfig) -> int:
    """Status code of a command (first failing check in this order: mode, shape, widths,
    rounding, addresses)."""
    S, depth = config.size, config.mem_depth
    if cmd.mode not in MODES:
        return ERR_MODE
    dmax = (1 << config.dim_bits) - 1
    if not all(1 <= d <= dmax for d in (cmd.M, cmd.K, cmd.N)):
        return ERR_SHAPE
    if cmd.width_a not in config.widths or cmd.width_b not in config.widths:
        return ERR_WIDTH
    if cmd.rounding not in ROUNDING_MODES:
        return ERR_ROUNDING
    for base, r, c in ((cmd.base_a, cmd.M, cmd.K), (cmd.base_b, cmd.K, cmd.N),
                       (cmd.base_c, cmd.M, cmd.N)):
        if base + lines_of(r, c, S) > depth:
            return ERR_ADDR
    return OK


class MatmulEngineModel:
    """Transaction model of :class:`hdl.array.engine.MatmulEngine`.

    Three scratchpads ``A``, ``B``, ``C`` of ``mem_depth`` lines x ``S`` FP32 words (uint32
    bit patterns), the two converters' LFSRs (they run on across commands; reset restarts them),
    the sticky converter flags and the two converters' FAST statistics (``stats``,
    :class:`sim.model.stats.StatModel`; the standalone engine never loads them, so they
    accumulate from reset on).
    """

    MEMS = ("a", "b", "c")

    def __init__(self, config: ArrayConfig):
        self.config = config
        self.mem = {k: np.zeros((config.mem_depth, config.size), np.uint32) for k in self.MEMS}
        self.reset()

    def reset(self) -> None:
        """Mirror ``rst``: LFSRs and flags restart; the scratchpads keep their contents."""
        from sim.model.stats import StatModel
        self.lfsrs = (LFSR(self.config.bfp(0)), LFSR(self.config.bfp(1)))
        self.stats = (StatModel(self.config.bfp(0)), StatModel(self.config.bfp(1)))
        self.invalid = self.overflow = False

    def get_matrix(self, mem: str, base: int, rows: int, cols: int) -> np.ndarray:
        S = self.config.size
        lines = self.mem[mem][base:base + lines_of(rows, cols, S)]
        return lines.reshape(rows, -1)[:, :cols].view(np.float32).copy()

    def set_matrix(self, mem: str, base: int, value) -> None:
        value = np.asarray(value, np.float32)
        rows, cols = value.shape
        S = self.config.size
        n = lines_of(rows, cols, S)
        block = self.mem[mem][base:base + n].reshape(rows, -1).copy()
        block[:, :cols] = value.view(np.uint32)
        self.mem[mem][base:base + n] = block.reshape(n, S)

    def run(self, cmd: MatmulCommand) -> tuple[int, PassResult | None]:
        """Execute ``cmd``; returns ``(status, result)`` (memories untouched unless OK)."""
        status = validate_command(cmd, self.config)
        if status != OK:
            return status, None
        A = self.get_matrix("a", cmd.base_a, cmd.M, cmd.K)
        B = self.get_matrix("b", cmd.base_b, cmd.K, cmd.N)
        C = self.get_matrix("c", cmd.base_c, cmd.M, cmd.N)
        res = matmul_pass(cmd.mode, A, B, C, self.config, width_a=cmd.width_a,
                          width_b=cmd.width_b, rounding=cmd.rounding,
                          accumulate=cmd.accumulate, lfsrs=self.lfsrs, stats=self.stats)
        target = {FWD: ("c", cmd.base_c), BWD_DATA: ("a", cmd.base_a),
                  BWD_WEIGHT: ("b", cmd.base_b)}[cmd.mode]
        self.set_matrix(*target, res.out)
        self.invalid |= res.invalid
        self.overflow |= res.overflow
        return OK, res
