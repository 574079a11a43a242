"""Training-core scenarios shared by both tiers (no cocotb here): ``tests/test_core.py``
(Amaranth) and ``sim/tb/core.py`` (cocotb) run the same cases."""
from __future__ import annotations

import numpy as np

from sim.host.compiler import MLP
from sim.host.optim import Adam, LossScale

__all__ = ["non_finite_gradient_case"]

F32 = np.float32


def non_finite_gradient_case(where: str):
    """A step whose only non-finite gradient no BFP converter sees (its operands are finite):
    ``"matmul"``, a 1-layer net whose inputs near 1e38 make ``dW0 = x^T dz`` overflow in the
    matmul pass; ``"vector"``, a 2-layer net whose ``W1`` column 0 (4e37) makes the activation
    gradient large but finite, and the bias gradient ``db0`` (the vector unit's column sums
    over the batch) overflows. Returns ``(desc, Ws, bs, x, y)`` (Adam, loss scaling, batch 4).
    The two-pass ``OPT`` skips it through its check pass (``flags`` 0); the one-pass ``OPT``
    through the core's gradient-write snoop (``flags`` bit 2)."""
    rng = np.random.default_rng(5)
    ls = LossScale(init_exp=5, growth_interval=2)
    if where == "matmul":
        desc = MLP(layers=(4, 3), batch=4, optimizer=Adam(lr=1e-2), loss_scale=ls)
        Ws = [(rng.standard_normal((4, 3)) * 1e-3).astype(F32)]
        bs = [np.zeros(3, F32)]
        x = (rng.standard_normal((4, 4)) * 1e38).astype(F32)
        y = rng.integers(0, 3, 4)
    elif where == "vector":
        desc = MLP(layers=(4, 6, 3), batch=4, optimizer=Adam(lr=1e-2), loss_scale=ls)
        Ws = [np.zeros((4, 6), F32), np.zeros((6, 3), F32)]
        Ws[1][:, 0] = 4e37
        bs = [np.full(6, 1e-30, F32), np.zeros(3, F32)]
        x = (rng.standard_normal((4, 4)) * 1e-3).astype(F32)
        y = np.ones(4, int)
    else:
        raise ValueError(f"where must be 'matmul' or 'vector', not {where!r}")
    return desc, Ws, bs, x, y
