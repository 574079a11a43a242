"""Golden model of the FP32 optimizer engine (pure numpy; mirrors :mod:`hdl.optim.engine`).

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

Loss scale: a skipped step halves the scale (``k -= 1``, floor 0) and clears the clean-step
counter; ``GROWTH`` clean steps in a row double it (``k += 1``, ceiling 126). Only when dynamic
scaling is enabled; a step with Inf/NaN gradients is skipped either way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hdl.optim.config import (MODE_CLIP, MODE_DYNSCALE, SCALE_EXP_MAX, Mem, Mode, OptimConfig,
                              Reg)

__all__ = ["f32_bits", "bits_f32", "lane_sum", "OptimEngineModel", "SGD", "Momentum", "Adam",
           "AdamW", "LossScale", "Clip", "optimizer_registers", "reference_step_f64",
           "pack_cmd", "reg_word"]

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


def _check_float(owner, name, value, *, lo=None, hi=None, lo_open=False, hi_open=False):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        raise TypeError(f"{owner}.{name} must be a float, not {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{owner}.{name} must be finite, not {value!r}")
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise ValueError(f"{owner}.{name} must be {'>' if lo_open else '>='} {lo}, not {value!r}")
    if hi is not None and (v >= hi if hi_open else v > hi):
        raise ValueError(f"{owner}.{name} must be {'<' if hi_open else '<='} {hi}, not {value!r}")
    with np.errstate(over="ignore"):
        f = F32(v)
    if v != 0 and (not np.isfinite(f) or f == 0):
        raise ValueError(f"{owner}.{name} is not representable in FP32: {value!r}")


# ---------------------------------------------------------------------------------------------
# Host-side optimizer descriptions: validated hyperparameters -> register values per step.

@dataclass(frozen=True)
class SGD:
    """``w -= lr * g``."""
    lr: float

    def __post_init__(self):
        _check_float("SGD", "lr", self.lr, lo=0, lo_open=True)

    def registers(self, t: int) -> dict:
        return {Reg.LR: F32(self.lr), Reg.B1: F32(0), Reg.OMB1: F32(1), Reg.B2: F32(0),
                Reg.OMB2: F32(1), Reg.RC2: F32(1), Reg.EPS: F32(1), Reg.WDEC: F32(1)}

    mode = Mode.SGD


@dataclass(frozen=True)
class Momentum:
    """PyTorch convention: ``v = mu*v + g; w -= lr*v`` (v starts at 0)."""
    lr: float
    momentum: float

    def __post_init__(self):
        _check_float("Momentum", "lr", self.lr, lo=0, lo_open=True)
        _check_float("Momentum", "momentum", self.momentum, lo=0, hi=1, hi_open=True)

    def registers(self, t: int) -> dict:
        return {Reg.LR: F32(self.lr), Reg.B1: F32(self.momentum), Reg.OMB1: F32(1),
                Reg.B2: F32(0), Reg.OMB2: F32(1), Reg.RC2: F32(1), Reg.EPS: F32(1),
                Reg.WDEC: F32(1)}

    mode = Mode.MOMENTUM


@dataclass(frozen=True)
class Adam:
    """Adam with bias correction; ``t`` counts applied (not skipped) steps from 1.

    Per-step host factors (float64, then rounded once to FP32):
    ``LR = lr / (1 - beta1**t)``, ``RC2 = 1 / sqrt(1 - beta2**t)``.
    """
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0   # decoupled (AdamW); must be 0 for Adam
    name: str = field(default="Adam", repr=False)

    def __post_init__(self):
        n = self.name
        _check_float(n, "lr", self.lr, lo=0, lo_open=True)
        _check_float(n, "beta1", self.beta1, lo=0, hi=1, hi_open=True)
        _check_float(n, "beta2", self.beta2, lo=0, hi=1, hi_open=True)
        _check_float(n, "eps", self.eps, lo=0, lo_open=True)
        _check_float(n, "weight_decay", self.weight_decay, lo=0)
        if n == "Adam" and self.weight_decay != 0:
            raise ValueError(f"Adam.weight_decay must be 0 (use AdamW), not {self.weight_decay!r}")
        if self.lr * self.weight_decay >= 1:
            raise ValueError(f"{n}.weight_decay * lr must be < 1, not {self.lr * self.weight_decay!r}")

    def registers(self, t: int) -> dict:
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise ValueError(f"{self.name} step t must be an int >= 1, not {t!r}")
        return {Reg.LR: F32(self.lr / (1.0 - self.beta1 ** t)), Reg.B1: F32(self.beta1),
                Reg.OMB1: F32(1.0 - self.beta1), Reg.B2: F32(self.beta2),
                Reg.OMB2: F32(1.0 - self.beta2),
                Reg.RC2: F32(1.0 / math.sqrt(1.0 - self.beta2 ** t)), Reg.EPS: F32(self.eps),
                Reg.WDEC: F32(1.0 - self.lr * self.weight_decay)}

    mode = Mode.ADAM


def AdamW(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2) -> Adam:
    """AdamW: Adam with decoupled weight decay ``w *= 1 - lr*wd`` before the Adam update."""
    return Adam(lr, beta1, beta2, eps, weight_decay, name="AdamW")


@dataclass(frozen=True)
class LossScale:
    """Dynamic loss scaling: scale ``2**init_exp``; doubles after ``growth_interval`` clean
    steps, halves on a skipped step."""
    init_exp: int = 16
    growth_interval: int = 2000
    dynamic: bool = True

    def __post_init__(self):
        for name, v, lo, hi in (("init_exp", self.init_exp, 0, SCALE_EXP_MAX),
                                ("growth_interval", self.growth_interval, 1, 2**16 - 1)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"LossScale.{name} must be an int, not {type(v).__name__} {v!r}")
            if not lo <= v <= hi:
                raise ValueError(f"LossScale.{name} must be in {lo}..{hi}, not {v!r}")


@dataclass(frozen=True)
class Clip:
    """Clip by global norm: ``factor = min(1, max_norm / (norm + eps))``."""
    max_norm: float
    eps: float = 1e-6

    def __post_init__(self):
        _check_float("Clip", "max_norm", self.max_norm, lo=0, lo_open=True)
        _check_float("Clip", "eps", self.eps, lo=0)


def optimizer_registers(opt, t: int, n: int, scale: LossScale | None = None,
                        clip: Clip | None = None, *, first: bool = True) -> dict:
    """Register writes (``{Reg: value}``) for step ``t``. FP32 values as np.float32, the rest
    as ints. ``first`` adds the one-time registers (mode, N, loss scale, clipping)."""
    regs = dict(opt.registers(t))
    if first:
        mode = opt.mode
        if clip is not None:
            mode |= MODE_CLIP
            regs[Reg.MAX_NORM] = F32(clip.max_norm)
            regs[Reg.CLIP_EPS] = F32(clip.eps)
        scale = scale or LossScale(0, 1, dynamic=False)
        if scale.dynamic:
            mode |= MODE_DYNSCALE
        regs[Reg.MODE] = mode
        regs[Reg.N] = n
        regs[Reg.GROWTH] = scale.growth_interval
        regs[Reg.SCALE_EXP] = scale.init_exp
    return regs


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

    # memory views by name
    w = property(lambda self: self.mems[Mem.W])
    m = property(lambda self: self.mems[Mem.M])
    v = property(lambda self: self.mems[Mem.V])
    g = property(lambda self: self.mems[Mem.G])

    def _range(self, base, count):
        if not (0 <= base and count >= 1 and base + count <= self.config.depth):
            raise ValueError(f"range base={base} count={count} outside depth {self.config.depth}")
        return slice(base, base + count)

    def setreg(self, addr: int, value) -> None:
        if addr not in Reg.ALL:
            raise ValueError(f"register address must be one of {Reg.ALL}, not {addr!r}")
        word = f32_bits(value) if isinstance(value, np.floating) else int(value) & 0xFFFFFFFF
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

    def step(self) -> bool:
        """One STEP; returns True when the step was skipped."""
        cfg = self.config
        n = self.regs[Reg.N]
        if not 1 <= n <= cfg.depth:
            raise ValueError(f"Reg.N must be in 1..{cfg.depth}, not {n!r}")
        mode_reg = self.regs[Reg.MODE]
        mode = mode_reg & 3
        if mode not in Mode.ALL:
            raise ValueError(f"Reg.MODE update rule must be one of {Mode.ALL}, not {mode!r}")
        clip_en = bool(mode_reg & MODE_CLIP)
        dyn = bool(mode_reg & MODE_DYNSCALE)
        graw = self.g[:n]
        inv_scale = F32(2.0 ** -self.scale_exp)
        with np.errstate(all="ignore"):
            # check pass
            u = graw * inv_scale
            sumsq = lane_sum(u * u, cfg.reduce_lanes)
            nonfinite = not np.all(np.isfinite(graw))
            skip = nonfinite or (clip_en and not np.isfinite(sumsq))
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
                 "clipped", "sumsq", "clip_factor")}


def reference_step_f64(opt, w, m, v, g, t):
    """The textbook update in float64 (PyTorch formulas), to bound the FP32 model's error."""
    w, m, v, g = (np.asarray(a, np.float64) for a in (w, m, v, g))
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


# ---------------------------------------------------------------------------------------------
# Command encoding (layout of hdl.optim.engine.cmd_layout, LSB first)

_CMD_FIELDS = (("op", 3), ("mem", 2), ("first", 1), ("addr", 16), ("count", 17), ("data", 32))


def pack_cmd(op: int, *, mem: int = 0, first: int = 0, addr: int = 0, count: int = 0,
             data: int = 0) -> int:
    """Command payload as an integer (cocotb) — same fields as :func:`cmd_fields`."""
    vals = {"op": op, "mem": mem, "first": first, "addr": addr, "count": count, "data": data}
    word, shift = 0, 0
    for name, width in _CMD_FIELDS:
        v = int(vals[name])
        if not 0 <= v < (1 << width):
            raise ValueError(f"command field {name} must fit {width} bits, not {v!r}")
        word |= v << shift
        shift += width
    return word


def reg_word(value) -> int:
    """Register value as the 32-bit ``data`` of a SETREG (np.float32 -> its bits)."""
    return f32_bits(value) if isinstance(value, np.floating) else int(value) & 0xFFFFFFFF
