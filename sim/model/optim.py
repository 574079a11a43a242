"""Golden model of the FP32 optimizer engine (pure numpy; mirrors :mod:`hdl.optim.engine`).

The host side (optimizer descriptions, per-step register values, command packing) is
:mod:`sim.host.optim`; the float64 textbook update is
:func:`sim.model.reference.reference_step_f64`.

Every arithmetic operation is one IEEE binary32 operation with round-to-nearest-even, in exactly
the order the hardware pipeline performs it (numpy float32 ufuncs are correctly rounded and never
fused), so the model is bit-exact with the hardware. The order is fixed here and documented in
docs/datapaths.md:

Check pass (over ``G[0:N]``)::

    u_i    = G_i * 2**-k                       # unscale: exact (power-of-two multiply)
    lane_j = (((0 + u_j**2) + u_{j+L}**2) + ...)   for j in 0..L-1   (L = reduce_lanes)
    sumsq  = ((lane_0 + lane_1) + lane_2) + ...
    skip   = any(G_i is Inf/NaN) or (clip enabled and sumsq is Inf/NaN)
    clip   = min(1, MAX_NORM / (sqrt(sumsq) + CLIP_EPS))  if clip enabled else 1

Update pass (skipped steps write nothing)::

    g  = (G * 2**-k) * clip
    m' = B1*m + OMB1*g                 # momentum: B1 = mu, OMB1 = 1.0  ->  mu*m + g exactly
    v' = B2*v + OMB2*(g*g)
    d  = sqrt(v') * RC2 + EPS
    u  = g (SGD) | m' (momentum) | m' / d (Adam)
    w' = w*WDEC - LR*u                 # WDEC = 1 - lr*wd for AdamW, 1.0 otherwise (exact)

One-pass ``STEP1`` (``step(one_pass=True)``): with clipping off and no outside skip
(``force_skip``) the two passes are fused and the raw-``G`` Inf/NaN test is dropped (the
caller guarantees finite gradients): ``skip = False``, the same ``sumsq`` and update. Otherwise
it is exactly ``STEP``.

Rejected commands: the engine ignores a command it cannot execute and sets the sticky
``error`` status bit -- ``SETREG`` of an unknown register, of ``MODE`` with update rule 3 or of
``N`` outside ``1..depth``; ``WRITE``/``READ``/``ACCUM`` with ``count = 0`` or ``addr + count >
depth``; ``STEP``/``STEP1`` before ``N`` was set; an unknown opcode. :meth:`OptimEngineModel.command`
models exactly that (nothing else changes); the host-level methods (``setreg``, ``write``, ...)
raise ``ValueError`` for the same commands instead.

Loss scale: a skipped step halves the scale (``k -= 1``, floor 0) and clears the clean-step
counter; ``GROWTH`` clean steps in a row double it (``k += 1``, ceiling 126). Only when dynamic
scaling is enabled; a step with Inf/NaN gradients is skipped either way.
"""
from __future__ import annotations

import numpy as np

from hdl.optim.config import (MODE_CLIP, MODE_DYNSCALE, SCALE_EXP_MAX, Mem, Mode, Op, OptimConfig,
                              Reg)

__all__ = ["f32_bits", "bits_f32", "lane_sum", "OptimEngineModel"]

F32 = np.float32


def f32_bits(x) -> int:
    return int(np.asarray(x, dtype=F32).reshape(()).view(np.uint32))


def bits_f32(b: int) -> np.float32:
    return np.array(b & 0xFFFFFFFF, dtype=np.uint32).view(F32)[()]


def lane_sum(x, lanes: int) -> np.float32:
    """Sum in the reduction hardware's order: ``lanes`` interleaved partials, then in order."""
    x = np.asarray(x, dtype=F32).ravel()
    pad = (-len(x)) % lanes
    # Padding with +0 is exact: a partial starts at +0 and can never become -0.
    rows = np.concatenate([x, np.zeros(pad, F32)]).reshape(-1, lanes)
    part = np.zeros(lanes, F32)
    with np.errstate(all="ignore"):
        for row in rows:
            part = part + row
        total = part[0]
        for j in range(1, lanes):
            total = F32(total + part[j])
    return F32(total)


# ---------------------------------------------------------------------------------------------

class OptimEngineModel:
    """Command-level model of :class:`hdl.optim.engine.OptimEngine`.

    Methods mirror the opcodes (:class:`hdl.optim.config.Op`); memories are float32 arrays
    ``w, m, v, g`` of ``config.depth`` words; status attributes mirror the hardware's outputs.
    """

    def __init__(self, config: OptimConfig):
        if not isinstance(config, OptimConfig):
            raise TypeError(f"config must be an OptimConfig, not {type(config).__name__}")
        self.config = config
        self.mems = [np.zeros(config.depth, F32) for _ in Mem.ALL]
        self.regs = [0] * len(Reg.ALL)
        self.scale_exp = 0
        self.good_count = 0
        self.step_count = 0
        self.skip_count = 0
        self.last_skipped = 0
        self.clipped = 0
        self.sumsq = 0           # bits
        self.clip_factor = f32_bits(F32(1))
        self.error = 0           # sticky: a command was rejected (ignored)

    # memory views by name
    w = property(lambda self: self.mems[Mem.W])
    m = property(lambda self: self.mems[Mem.M])
    v = property(lambda self: self.mems[Mem.V])
    g = property(lambda self: self.mems[Mem.G])

    def _range(self, base, count):
        if not (0 <= base and count >= 1 and base + count <= self.config.depth):
            raise ValueError(f"range base={base} count={count} outside depth {self.config.depth}")
        return slice(base, base + count)

    def rejection(self, op: int, *, mem: int = 0, addr: int = 0, count: int = 0,
                  data: int = 0) -> str | None:
        """Why the engine would ignore this command (and set ``error``), or None if it takes
        it. ``data`` is the raw 32-bit register word of a ``SETREG``."""
        depth = self.config.depth
        if op == Op.SETREG:
            if addr not in Reg.ALL:
                return f"register address must be one of {Reg.ALL}, not {addr!r}"
            if addr == Reg.MODE and data & 3 == 3:
                return f"Reg.MODE update rule must be one of {Mode.ALL}, not 3"
            if addr == Reg.N and not 1 <= data <= depth:
                return f"Reg.N must be in 1..{depth}, not {data!r}"
        elif op in (Op.WRITE, Op.READ, Op.ACCUM):
            if mem not in Mem.ALL:
                return f"mem must be one of {Mem.ALL}, not {mem!r}"
            if count == 0 or addr + count > depth:
                return f"range addr={addr} count={count} outside depth {depth}"
        elif op in (Op.STEP, Op.STEP1):
            if self.regs[Reg.N] == 0:
                return "STEP before Reg.N was set"
        else:
            return f"opcode must be one of {Op.ALL}, not {op!r}"
        return None

    def command(self, op: int, *, mem: int = 0, addr: int = 0, count: int = 0, data: int = 0,
                first: bool = False, words=None, force_skip: bool = False):
        """One command as the engine decodes it. A rejected command (:meth:`rejection`) sets
        the sticky ``error`` and changes nothing else; returns ``(accepted, result)`` with
        ``result`` = the words read (READ), the skip decision (STEP/STEP1) or None. ``words``:
        the ``wdata`` words of WRITE/ACCUM (FP32 values)."""
        if self.rejection(op, mem=mem, addr=addr, count=count, data=data) is not None:
            self.error = 1
            return False, None
        if op == Op.SETREG:
            self.setreg(addr, int(data) & 0xFFFFFFFF)
            return True, None
        if op == Op.WRITE:
            self.write(mem, addr, words)
            return True, None
        if op == Op.ACCUM:
            self.accum(addr, words, first)
            return True, None
        if op == Op.READ:
            return True, self.read(mem, addr, count)
        return True, self.step(force_skip=force_skip, one_pass=op == Op.STEP1)

    def setreg(self, addr: int, value) -> None:
        word = f32_bits(value) if isinstance(value, np.floating) else int(value) & 0xFFFFFFFF
        why = self.rejection(Op.SETREG, addr=addr, data=word)
        if why is not None:
            raise ValueError(why)
        self.regs[addr] = word
        if addr == Reg.SCALE_EXP:
            self.scale_exp = min(word & 0xFF, SCALE_EXP_MAX)
            self.good_count = 0
        elif addr == Reg.CLEAR:
            self.step_count = self.skip_count = 0

    def write(self, mem: int, base: int, data) -> None:
        data = np.asarray(data, dtype=F32)
        self.mems[mem][self._range(base, len(data))] = data

    def read(self, mem: int, base: int, count: int) -> np.ndarray:
        return self.mems[mem][self._range(base, count)].copy()

    def accum(self, base: int, data, first: bool) -> None:
        data = np.asarray(data, dtype=F32)
        sl = self._range(base, len(data))
        with np.errstate(all="ignore"):
            self.mems[Mem.G][sl] = data if first else self.mems[Mem.G][sl] + data

    def _f(self, reg) -> np.float32:
        return bits_f32(self.regs[reg])

    def step(self, force_skip: bool = False, one_pass: bool = False) -> bool:
        """One STEP (``one_pass``: STEP1); returns True when the step was skipped.
        ``force_skip`` mirrors the engine's ``skip_in`` (an outside non-finite flag)."""
        cfg = self.config
        n = self.regs[Reg.N]
        why = self.rejection(Op.STEP)
        if why is not None:
            raise ValueError(why)
        mode_reg = self.regs[Reg.MODE]
        mode = mode_reg & 3
        clip_en = bool(mode_reg & MODE_CLIP)
        dyn = bool(mode_reg & MODE_DYNSCALE)
        graw = self.g[:n]
        inv_scale = F32(2.0 ** -self.scale_exp)
        with np.errstate(all="ignore"):
            # check pass
            u = graw * inv_scale
            sumsq = lane_sum(u * u, cfg.reduce_lanes)
            fused = one_pass and not clip_en and not force_skip
            # a fused pass does not test the raw gradients (the caller guarantees them)
            nonfinite = not fused and not np.all(np.isfinite(graw))
            skip = nonfinite or force_skip or (clip_en and not np.isfinite(sumsq))
            clip = F32(1)
            if clip_en and not skip:
                q = F32(self._f(Reg.MAX_NORM) / F32(np.sqrt(sumsq) + self._f(Reg.CLIP_EPS)))
                clip = q if q < F32(1) else F32(1)
            self.sumsq = f32_bits(sumsq)
            self.clip_factor = f32_bits(clip)
            self.clipped = int(clip_en and not skip and clip < F32(1))
            if skip:
                self.skip_count += 1
                self.last_skipped = 1
                self.good_count = 0
                if dyn:
                    self.scale_exp = max(self.scale_exp - 1, 0)
                return True
            # update pass
            f = self._f
            w, m, v = self.w[:n], self.m[:n], self.v[:n]
            g = u * clip
            m1 = f(Reg.B1) * m + f(Reg.OMB1) * g
            v1 = f(Reg.B2) * v + f(Reg.OMB2) * (g * g)
            d = np.sqrt(v1) * f(Reg.RC2) + f(Reg.EPS)
            upd = g if mode == Mode.SGD else m1 if mode == Mode.MOMENTUM else m1 / d
            w1 = w * f(Reg.WDEC) - f(Reg.LR) * upd
            self.w[:n] = w1
            if mode != Mode.SGD:
                self.m[:n] = m1
            if mode == Mode.ADAM:
                self.v[:n] = v1
        self.step_count += 1
        self.last_skipped = 0
        if dyn:
            self.good_count += 1
            if self.good_count >= max(self.regs[Reg.GROWTH] & 0xFFFF, 1):
                self.good_count = 0
                self.scale_exp = min(self.scale_exp + 1, SCALE_EXP_MAX)
        return False

    def status(self) -> dict:
        return {name: int(getattr(self, name)) for name in
                ("scale_exp", "good_count", "step_count", "skip_count", "last_skipped",
                 "clipped", "error", "sumsq", "clip_factor")}

