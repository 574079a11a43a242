"""Matmul-engine commands and operands shared by both tiers (no cocotb here): the START
fields of a :class:`sim.model.array.MatmulCommand`, random valid commands, random FP32
matrices. Used by ``tests/test_matmul_engine.py`` (Amaranth) and ``sim/tb/matmul_engine.py``
(cocotb)."""
from __future__ import annotations

import numpy as np

from hdl.array.control import OP_START
from sim.model import array as G
from sim.model.bfp import ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE

__all__ = ["rand_matrix", "start_fields", "random_command"]


def rand_matrix(rng, shape, spread=4):
    """Random FP32 matrix: normal values times powers of two in ``2**[-spread, spread]``."""
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
            ).astype(np.float32)


def start_fields(cmd: G.MatmulCommand) -> dict:
    """The ``cmd`` payload fields of a START of ``cmd``."""
    return dict(op=OP_START, mode=cmd.mode, M=cmd.M, K=cmd.K, N=cmd.N, width_a=cmd.width_a,
                width_b=cmd.width_b, rounding=cmd.rounding, accumulate=int(cmd.accumulate),
                base_a=cmd.base_a, base_b=cmd.base_b, base_c=cmd.base_c)


def random_command(rng, cfg, mode=None, max_dim=None):
    """A random valid START (every dimension 1..``max_dim``, default 3S) that fits ``cfg``'s
    scratchpads; ``mode`` fixes the mode."""
    S = cfg.size
    max_dim = max_dim or 3 * S
    for _ in range(1000):
        mode_ = int(rng.integers(0, 3)) if mode is None else mode
        M, K, N = (int(rng.integers(1, max_dim + 1)) for _ in range(3))
        la, lb, lc = (G.lines_of(M, K, S), G.lines_of(K, N, S), G.lines_of(M, N, S))
        depth = cfg.mem_depth
        if max(la, lb, lc) > depth:
            continue
        cmd = G.MatmulCommand(
            mode=mode_, M=M, K=K, N=N,
            width_a=int(rng.choice(cfg.widths)), width_b=int(rng.choice(cfg.widths)),
            rounding=int(rng.choice([ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE])),
            accumulate=bool(rng.integers(0, 2)),
            base_a=int(rng.integers(0, depth - la + 1)), base_b=int(rng.integers(0, depth - lb + 1)),
            base_c=int(rng.integers(0, depth - lc + 1)))
        return cmd
    raise RuntimeError("no command fits")
