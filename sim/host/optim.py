"""Host side of the FP32 optimizer engine: optimizer descriptions with validated
hyperparameters, the register values of each step, and command packing.

* :class:`SGD`, :class:`Momentum`, :class:`Adam` / :func:`AdamW`, :class:`LossScale`,
  :class:`Clip`: what the user asks for; :func:`optimizer_registers` turns it into the register
  writes (``{Reg: value}``) of step ``t`` (the per-step host factors of Adam's bias correction
  are computed here, in float64, then rounded once to FP32).
* :func:`reg_word`: a register value as the 32-bit ``data`` of a ``SETREG``.
* :func:`pack_cmd`: a command payload packed with the hardware's own layout
  (:func:`hdl.optim.engine.cmd_layout`).

The engine's golden model is :class:`sim.model.optim.OptimEngineModel`; the float64 textbook
update these descriptions stand for is :func:`sim.model.reference.reference_step_f64`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from hdl.optim.config import MODE_CLIP, MODE_DYNSCALE, SCALE_EXP_MAX, Mode, Reg
from sim.model.optim import f32_bits

__all__ = ["SGD", "Momentum", "Adam", "AdamW", "LossScale", "Clip", "optimizer_registers",
           "reg_word", "pack_cmd"]

F32 = np.float32


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
        if n not in ("Adam", "AdamW"):
            raise ValueError(f"Adam.name must be 'Adam' or 'AdamW' (use AdamW(...)), not {n!r}")
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
        if not isinstance(self.dynamic, (bool, np.bool_)):
            raise TypeError(f"LossScale.dynamic must be a bool, not {type(self.dynamic).__name__} "
                            f"{self.dynamic!r}")


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
# Command packing (the hardware's layout: hdl.optim.engine.cmd_layout)

@functools.cache
def _cmd_layout():
    # imported here: the optimizer descriptions above are used by the golden models, which need
    # no Amaranth component module
    from hdl.optim.engine import cmd_layout
    return cmd_layout()


def pack_cmd(op: int, *, mem: int = 0, first: int = 0, addr: int = 0, count: int = 0,
             data: int = 0) -> int:
    """Command payload as an integer (cocotb), packed with :func:`hdl.optim.engine.cmd_layout`.
    Raises ``ValueError`` when a value does not fit its field."""
    vals = {"op": op, "mem": mem, "first": first, "addr": addr, "count": count, "data": data}
    layout = _cmd_layout()
    for name, fld in layout:
        v = int(vals[name])
        if not 0 <= v < (1 << fld.width):
            raise ValueError(f"command field {name} must fit {fld.width} bits, not {v!r}")
    return layout.const({k: int(v) for k, v in vals.items()}).as_value().value


def reg_word(value) -> int:
    """Register value as the 32-bit ``data`` of a SETREG (np.float32 -> its bits)."""
    return f32_bits(value) if isinstance(value, np.floating) else int(value) & 0xFFFFFFFF
