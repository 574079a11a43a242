"""The golden training step: one compiled MLP step (:func:`sim.host.compiler.compile_mlp`) run
on the core's golden model (:class:`sim.model.core.CoreModel`) through the same host actions the
hardware driver executes.

::

    from sim.host.compiler import MLP
    from sim.model.train import train_step, init_params

    desc = MLP()                                   # 64-64-10, batch 32, Adam
    W, b = init_params(desc, seed=0)
    out = train_step(desc, CoreConfig(), W, b, None, x, y, t=1)
    out = train_step(desc, CoreConfig(), out["weights"], out["biases"], out["opt_state"],
                     x2, y2, t=2)                  # or: model=out["model"], weights=None

Results are float32 numpy arrays, bit-exact with the hardware running the same actions.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from hdl.core.config import CoreConfig
from hdl.core.isa import STATUS_NAMES, Status
from sim.host.compiler import MLP, Compiled, compile_mlp
from sim.model.core import CoreModel

__all__ = ["train_step", "compiled", "init_params", "zeros_opt_state"]

F32 = np.float32


@lru_cache(maxsize=64)
def compiled(desc: MLP, config: CoreConfig) -> Compiled:
    """:func:`~sim.host.compiler.compile_mlp`, cached (descriptions and configs are frozen)."""
    return compile_mlp(desc, config)


def init_params(desc: MLP, seed: int = 0, scale: float | None = None):
    """He-style random weights (``N(0, 2 / fan_in)`` or ``N(0, scale**2)``) and zero biases,
    float32."""
    rng = np.random.default_rng(seed)
    d = desc.layers
    Ws = [(rng.standard_normal((d[l], d[l + 1])) * (scale if scale is not None
                                                   else np.sqrt(2.0 / d[l]))).astype(F32)
          for l in range(desc.L)]
    bs = [np.zeros(d[l + 1], F32) for l in range(desc.L)]
    return Ws, bs


def zeros_opt_state(desc: MLP) -> dict:
    """``{"m": {"W": [...], "b": [...]}, "v": {...}}`` of float32 zeros (the format of
    :func:`sim.model.reference.zeros_state`)."""
    d = desc.layers
    return {k: {"W": [np.zeros((d[l], d[l + 1]), F32) for l in range(desc.L)],
                "b": [np.zeros(d[l + 1], F32) for l in range(desc.L)]} for k in ("m", "v")}


def train_step(desc: MLP, config: CoreConfig, weights, biases, opt_state, x, y, t: int, *,
               precision=None, model: CoreModel | None = None) -> dict:
    """One training step on the golden model.

    ``weights`` / ``biases``: lists of float arrays (``d_l x d_{l+1}``, ``d_{l+1}``);
    ``opt_state``: ``None`` (zeros) or ``{"m": {"W", "b"}, "v": {...}}`` (entries the update
    rule does not keep are ignored), optionally with ``"scale_exp"`` (the loss-scale exponent
    to start from; default ``desc.loss_scale.init_exp``, or 0 without loss scaling). ``x``:
    ``B x d_0`` floats, ``y``: ``B`` int labels (or lists of ``k`` micro-batches); ``t``: the
    optimizer step (from 1; Adam's bias correction). ``precision``: see
    :meth:`~sim.host.compiler.Compiled.precision_table`.

    ``model``: a :class:`CoreModel` to run on (default: a fresh one for ``config``). With
    ``weights=None`` the step continues from the model's scratchpad and optimizer registers
    (parameters, state, loss scale and its growth count as the previous step left them);
    otherwise parameters and state are written first (:meth:`Compiled.init_actions`).

    Returns ``dict(loss, losses, grads={"W", "b"}, weights, biases, opt_state, skipped,
    scale_exp, status, model)``: ``loss`` the batch mean (float64 of the FP32 per-row losses),
    ``grads`` the batch-mean gradients the step used (before clipping, loss scale removed),
    ``scale_exp`` the loss-scale exponent *after* the step (its ``opt_state["scale_exp"]``
    too), ``status`` the optimizer status, ``model`` the model (to continue).
    """
    c = compiled(desc, config)
    if model is None:
        if weights is None:
            raise ValueError("train_step: weights=None (continue) needs a model")
        model = CoreModel(config)
    elif not isinstance(model, CoreModel):
        raise TypeError(f"model must be a CoreModel, not {type(model).__name__}")
    elif model.config != config:
        raise ValueError(f"model was built for {model.config}, not {config}")
    actions = []
    if weights is not None:
        actions += c.init_actions(weights, biases, opt_state)
    # the loss scale this step uses (the gradient region holds gradients times 2**k)
    k_before = model.apply(actions + [("status",)])["status"]["scale_exp"]
    res = model.apply(c.step_actions(x, y, t, precision=precision) + c.read_actions())
    step = c.decode_step(res)
    if not step["ok"]:
        st, pc = step["run"]
        raise RuntimeError(f"the core rejected the program: {STATUS_NAMES.get(st, st)} at pc "
                           f"{pc}")
    assert step["run"][0] == Status.OK
    Ws, bs = c.decode_params(res)
    state = c.decode_opt_state(res)
    full = zeros_opt_state(desc)
    if opt_state:
        for k in ("m", "v"):
            if opt_state.get(k) is not None:
                full[k] = {"W": [np.asarray(a, F32) for a in opt_state[k]["W"]],
                           "b": [np.asarray(a, F32) for a in opt_state[k]["b"]]}
    full.update(state)
    full["scale_exp"] = step["scale_exp"]
    return {"loss": step["loss"], "losses": step["losses"],
            "grads": c.decode_grads(res, k_before), "weights": Ws, "biases": bs,
            "opt_state": full, "skipped": step["skipped"], "scale_exp": step["scale_exp"],
            "status": step["status"], "model": model}
