"""Training-core scenarios shared by both tiers (no cocotb here): ``tests/test_core.py``
(Amaranth) and ``sim/tb/core.py`` (cocotb) run the same cases."""
from __future__ import annotations

import numpy as np

from hdl.core.isa import THRESH_FRAC_BITS, Op, encode
from sim.host.compiler import MLP
from sim.host.optim import Adam, LossScale
from sim.model.stats import ratio

__all__ = ["non_finite_gradient_case", "fast_program", "fast_step", "fast_thresholds"]

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


def fast_program(comp) -> list:
    """The compiled step program with ``ADAPT`` at its top (FAST, docs/fast.md): each step
    first raises the widths whose statistic of the previous step exceeded its threshold."""
    return [encode(Op.ADAPT)] + list(comp.program)


def fast_step(comp, x, y, t: int, *, prec=()) -> list:
    """A step's host actions without a program load and without precision writes (the
    table keeps what ADAPT made of it), after the ``("prec", ...)`` entries in ``prec``."""
    acts = [a for a in comp.step_actions(x, y, t, load_program=False) if a[0] != "prec"]
    return [("prec", *p) for p in prec] + acts


def fast_thresholds(states: dict, raise_, keep) -> list:
    """``THRESH`` actions: 10 % below the statistic ``r`` of the slots in ``raise_`` (ADAPT
    raises them) and 10 % above for those in ``keep`` (it does not)."""
    r = {k: ratio(s) for k, s in states.items()}
    one = 1 << THRESH_FRAC_BITS
    return ([("thresh", *k, int(r[k] * 0.9 * one)) for k in raise_]
            + [("thresh", *k, int(r[k] * 1.1 * one) + 1) for k in keep])


def mlp_params(seed: int, layers) -> tuple:
    """``(rng, weights, biases)``: random float32 parameters of an MLP with ``layers`` widths
    (weights N(0, 0.3**2), biases N(0, 0.05**2)) and the generator, seeded, for the next
    random draws of the test (batches)."""
    rng = np.random.default_rng(seed)
    W = [(rng.standard_normal((a, b)) * 0.3).astype(np.float32)
         for a, b in zip(layers, layers[1:])]
    b = [(rng.standard_normal(n) * 0.05).astype(np.float32) for n in layers[1:]]
    return rng, W, b
