"""Pipeline-parallel training of an MLP across ``p`` training cores, in the golden model.

The layers ``0 .. L-1`` of an :class:`sim.host.compiler.MLP` are cut into ``p`` contiguous
*stages* (``bounds``: stage ``s`` holds layers ``bounds[s] .. bounds[s+1] - 1``); stage ``s``
runs on its own :class:`sim.model.core.CoreModel` and is compiled for its layers alone
(:class:`~sim.host.compiler.MLP` with ``batch`` = the micro-batch's rows, ``mean_rows`` = the
whole batch ``B``, ``head`` only for the last stage, ``input_grad`` for every stage but the
first; :meth:`sim.host.compiler.Compiled.stage_programs`). A step of ``B`` rows in ``m``
micro-batches:

* ``F(s, j)``: stage ``s`` runs its forward program on micro-batch ``j``: its input is the
  batch rows (``s = 0``) or the activation ``h`` the previous stage sent; it sends its output
  activation on (the last stage instead computes the softmax cross-entropy: loss and the
  logits' gradient, scaled by ``1/B`` as on one core);
* ``B(s, j)``: stage ``s`` restores what ``F(s, j)`` left for the backward pass (its *stash*:
  the input and the activations that live across the forward / backward split,
  :meth:`~sim.host.compiler.Compiled.stage_io`), writes the output gradient the next stage
  sent into its output buffer, runs the backward program (``backward`` for ``j = 0``:
  overwrite the gradient region; ``backward_acc`` later: add) and sends the gradient of its
  input back (``RELU_GRAD`` against that input, as the one-core step does);
* after every ``B`` of the step, every stage runs its ``OPT`` over its own parameters.

**Transfers.** Activations and gradients move as the ``rows x cols`` FP32 words of the
matrix (bit patterns, no conversion), which is what a link (``hdl/multi/link.py``: FP32 words,
in order, none lost) will carry between neighbouring cores; here the host copies them
(:attr:`Pipeline.link_words` counts them); :class:`sim.host.pipeline_ring.RingPipeline` runs
the same passes as one program per stage on a ring of two cores, whose ``SENDRECV``
instructions move them over the links. The
stash is host memory in this model: on hardware it is the stage's scratchpad, one copy per
micro-batch in flight (:attr:`Pipeline.peak_stash`, the peak number, per stage).

**Equal to one core.** The per-stage passes are the one-core step's passes on the same
operands, and every gradient element is summed over the micro-batches in the same order
(``j = 0 .. m-1``: backward passes run in micro-batch order in both schedules), so with
nearest rounding a pipeline step equals one core running the same ``m`` micro-batches bit
for bit (parameters, optimizer state, gradients, losses; ``tests/test_pipeline.py``).
Stochastic rounding draws converter noise per core in another order, so it differs there.
Not supported yet (``ValueError``): loss scaling and clipping (a global decision across
stages: the host would gather each stage's sum of squares / non-finite flag, as
:mod:`sim.host.dataparallel` does for skips), checkpointing.

**Schedules and the bubble.** :func:`stage_order` gives each stage's order of ``F`` and ``B``:
``"gpipe"`` (all forwards, then all backwards) or ``"1f1b"`` (``p - 1 - s`` warm-up forwards,
then one forward / one backward, then the remaining backwards: the same bubble, at most
``p - s`` micro-batches stashed instead of ``m``). :func:`timeline` simulates the schedule with
per-stage durations (an op starts when its stage is free and its input has arrived, ``latency``
cycles after the producer ended) and measures the bubble: the idle fraction of ``p *
makespan``. For equal stages and ``latency = 0`` it is exactly ``(p - 1) / (m + p - 1)``
(:func:`bubble_formula`). :attr:`Pipeline.durations` are the stages' array beats per
micro-batch pass from the golden model (``counters["beats"]``: exact, the array's streaming
beats of every ``MATMUL``; vector-unit, host and link time are not in it).
"""
from __future__ import annotations

import numpy as np

from hdl.core.config import CoreConfig
from sim.model.core import CoreModel
from sim.model.vector import get_matrix, get_vector, set_matrix

from .compiler import MLP, compile_mlp

__all__ = ["Pipeline", "SCHEDULES", "stage_order", "timeline", "bubble_formula",
           "even_bounds"]

#: Pipeline schedules.
SCHEDULES = ("gpipe", "1f1b")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _check_pm(p, m):
    for name, v in (("stages", p), ("micro_batches", m)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, not {v!r}")


def stage_order(schedule: str, stages: int, micro_batches: int, stage: int) -> list:
    """The order in which stage ``stage`` of ``stages`` runs its passes: a list of ``("F", j)``
    and ``("B", j)``. ``"gpipe"``: ``F 0..m-1`` then ``B 0..m-1``; ``"1f1b"``: ``w = min(p - 1
    - s, m)`` forwards, then ``F w+i, B i`` for ``i < m - w``, then ``B m-w .. m-1``."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, not {schedule!r}")
    p, m = stages, micro_batches
    _check_pm(p, m)
    if isinstance(stage, bool) or not isinstance(stage, (int, np.integer)) or not 0 <= stage < p:
        raise ValueError(f"stage must be an int in 0..{p - 1}, not {stage!r}")
    if schedule == "gpipe":
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
    w = min(p - 1 - stage, m)
    out = [("F", j) for j in range(w)]
    for i in range(m - w):
        out += [("F", w + i), ("B", i)]
    return out + [("B", j) for j in range(m - w, m)]


def bubble_formula(stages: int, micro_batches: int) -> float:
    """GPipe's bubble fraction for equal stages, ``(p - 1) / (m + p - 1)``."""
    _check_pm(stages, micro_batches)
    return (stages - 1) / (micro_batches + stages - 1)


def timeline(fwd, bwd, micro_batches: int, *, latency: int = 0,
             schedule: str = "gpipe") -> dict:
    """Simulate a pipeline schedule.

    Parameters
    ----------
    fwd, bwd : sequence of int
        Per stage, the duration (cycles) of one micro-batch's forward / backward pass (> 0).
    micro_batches : int
        ``m``.
    latency : int
        Cycles from the end of a pass to the arrival of its output at the neighbouring stage
        (the link: wire and serialisation).
    schedule : str
        ``"gpipe"`` or ``"1f1b"`` (:func:`stage_order`).

    Returns
    -------
    dict
        ``ops`` (``{(stage, "F"|"B", j): (start, end)}``), ``makespan``, ``busy`` (per stage),
        ``bubble`` (``1 - sum(busy) / (p * makespan)``), ``peak_stash`` (per stage: the most
        micro-batches forwarded and not yet backwarded).
    """
    fwd, bwd = [int(v) for v in fwd], [int(v) for v in bwd]
    p, m = len(fwd), micro_batches
    _check_pm(p, m)
    if len(bwd) != p:
        raise ValueError(f"fwd and bwd must have one duration per stage, not {p} and {len(bwd)}")
    if min(fwd + bwd) < 1:
        raise ValueError(f"durations must be >= 1, not fwd={fwd} bwd={bwd}")
    if isinstance(latency, bool) or not isinstance(latency, (int, np.integer)) or latency < 0:
        raise ValueError(f"latency must be an int >= 0, not {latency!r}")
    orders = [stage_order(schedule, p, m, s) for s in range(p)]
    pos, free, ops = [0] * p, [0] * p, {}

    def arrival(s, kind, j):
        """When the input of ``(s, kind, j)`` is there, or None if not produced yet."""
        if kind == "F":
            src = (s - 1, "F", j) if s > 0 else None
        else:
            src = (s + 1, "B", j) if s < p - 1 else (s, "F", j)
        if src is None:
            return 0
        if src not in ops:
            return None
        return ops[src][1] + (latency if src[0] != s else 0)

    left = 2 * m * p
    while left:
        moved = False
        for s in range(p):
            if pos[s] == len(orders[s]):
                continue
            kind, j = orders[s][pos[s]]
            t = arrival(s, kind, j)
            if t is None:
                continue
            start = max(t, free[s])
            end = start + (fwd[s] if kind == "F" else bwd[s])
            ops[(s, kind, j)] = (start, end)
            free[s], pos[s], left, moved = end, pos[s] + 1, left - 1, True
        if not moved:       # unreachable for the two schedules (each is deadlock-free)
            raise AssertionError(f"schedule {schedule!r} deadlocks at {pos}")
    makespan = max(e for _, e in ops.values())
    busy = [m * (fwd[s] + bwd[s]) for s in range(p)]
    peak = []
    for s in range(p):
        n = best = 0
        for kind, _ in orders[s]:
            n += 1 if kind == "F" else -1
            best = max(best, n)
        peak.append(best)
    return {"ops": ops, "makespan": makespan, "busy": busy,
            "bubble": 1.0 - sum(busy) / (p * makespan), "peak_stash": peak}


def even_bounds(layers: int, stages: int) -> tuple:
    """Stage boundaries cutting ``layers`` layers into ``stages`` stages as evenly as possible
    (earlier stages get the extra layers)."""
    _check_pm(layers, stages)
    if stages > layers:
        raise ValueError(f"stages ({stages}) must be <= the number of layers ({layers})")
    q, r = divmod(layers, stages)
    out = [0]
    for s in range(stages):
        out.append(out[-1] + q + (s < r))
    return tuple(out)


class Pipeline:
    """``stages`` golden-model cores training ``desc`` pipeline-parallel (see the module
    docstring).

    Parameters
    ----------
    desc : MLP
        The one-core step: ``batch`` ``B``, ``micro_batches`` ``m``, optimizer. Needs
        ``loss_scale = None``, ``clip = None``, no checkpointing, schedule ``"listed"``.
    config : CoreConfig
        Every stage's core.
    stages : int
        ``p``, 2..L (``L`` layers).
    bounds : sequence of int or None
        ``(0, b_1, ..., L)``, strictly increasing: stage ``s`` holds layers ``bounds[s] ..
        bounds[s+1] - 1``. ``None``: :func:`even_bounds`.
    schedule : str
        ``"gpipe"`` or ``"1f1b"``.
    """

    def __init__(self, desc: MLP, config: CoreConfig | None = None, stages: int = 2, *,
                 bounds=None, schedule: str = "gpipe"):
        if not isinstance(desc, MLP):
            raise TypeError(f"desc must be an MLP, not {type(desc).__name__}")
        config = CoreConfig() if config is None else config
        if not isinstance(config, CoreConfig):
            raise TypeError(f"config must be a CoreConfig, not {type(config).__name__}")
        L = desc.L
        if isinstance(stages, bool) or not isinstance(stages, int) or not 2 <= stages <= L:
            raise ValueError(f"stages must be an int in 2..{L} (the layers of "
                             f"{desc.layers}), not {stages!r}")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, not {schedule!r}")
        for name in ("loss_scale", "clip"):
            if getattr(desc, name) is not None:
                raise ValueError(f"desc.{name} must be None for a pipeline (a decision across "
                                 f"stages the host does not make yet)")
        if desc.checkpoint:
            raise ValueError("desc.checkpoint must be empty for a pipeline")
        if desc.schedule != "listed":
            raise ValueError(f"desc.schedule must be 'listed', not {desc.schedule!r}")
        bounds = even_bounds(L, stages) if bounds is None else tuple(bounds)
        if (len(bounds) != stages + 1 or bounds[0] != 0 or bounds[-1] != L
                or any(not isinstance(b, (int, np.integer)) or isinstance(b, bool)
                       for b in bounds)
                or any(a >= b for a, b in zip(bounds, bounds[1:]))):
            raise ValueError(f"bounds must be {stages + 1} increasing ints from 0 to {L}, not "
                             f"{bounds!r}")
        self.desc, self.config, self.schedule = desc, config, schedule
        self.p, self.m, self.bounds = stages, desc.micro_batches, bounds
        rows = desc.rows
        self.descs = [MLP(layers=desc.layers[a:b + 1], batch=rows, optimizer=desc.optimizer,
                          mean_rows=desc.batch, one_pass=False, head=s == stages - 1,
                          input_grad=s > 0)
                      for s, (a, b) in enumerate(zip(bounds, bounds[1:]))]
        self.compiled = [compile_mlp(d, config) for d in self.descs]
        self.programs = [c.stage_programs() for c in self.compiled]
        self.io = [c.stage_io() for c in self.compiled]
        self.cores = [CoreModel(config) for _ in range(stages)]
        self.orders = [stage_order(schedule, stages, self.m, s) for s in range(stages)]
        #: FP32 words moved between stages so far (activations forward, gradients back)
        self.link_words = 0
        #: per stage, the most micro-batches stashed at once in any step so far
        self.peak_stash = [0] * stages
        #: per stage, ``(forward, backward)`` array beats of one micro-batch (last step)
        self.durations = [(0, 0)] * stages

    @property
    def stash_words(self) -> list:
        """Per stage, the words one stashed micro-batch takes (whole lines, padding included)."""
        return [sum(n for _, n in io["stash"]) * self.config.size for io in self.io]

    # -- parameters ------------------------------------------------------------------------------
    def _split(self, values):
        return [list(values[a:b]) for a, b in zip(self.bounds, self.bounds[1:])]

    def init(self, weights, biases, opt_state=None) -> None:
        """Write each stage's layers of ``weights``, ``biases`` (lists of ``L``) and of
        ``opt_state`` (as :meth:`sim.host.compiler.Compiled.init_actions`) into its core."""
        if len(weights) != self.desc.L or len(biases) != self.desc.L:
            raise ValueError(f"weights and biases must hold {self.desc.L} layers, not "
                             f"{len(weights)} and {len(biases)}")
        Ws, bs = self._split(weights), self._split(biases)
        sts = [None] * self.p
        if opt_state:
            sts = [{} for _ in range(self.p)]
            for key, e in opt_state.items():
                for s, (w, b) in enumerate(zip(self._split(e["W"]), self._split(e["b"]))):
                    sts[s][key] = {"W": w, "b": b}
        for core, c, W, b, st in zip(self.cores, self.compiled, Ws, bs, sts):
            core.apply(c.init_actions(W, b, st))

    def read(self) -> dict:
        """``params``, ``grads`` and the kept optimizer state of the whole network, decoded
        (``{"W": [...], "b": [...]}`` each, layers in order)."""
        out = {}
        for core, c in zip(self.cores, self.compiled):
            res = core.apply(c.read_actions())
            for key in ("params", "grads") + self.desc.states:
                W, b = c._region_decode(res[key], key)
                e = out.setdefault(key, {"W": [], "b": []})
                e["W"] += W
                e["b"] += b
        return out

    # -- one step --------------------------------------------------------------------------------
    def _matrix(self, core, where) -> np.ndarray:
        line, rows, cols = where
        S = self.config.size
        return get_matrix(core.read_lines(line, rows * _cdiv(cols, S)), 0, rows, cols, S)

    def _put(self, core, where, words) -> None:
        line, rows, cols = where
        S = self.config.size
        img = core.read_lines(line, rows * _cdiv(cols, S))
        set_matrix(img, 0, words, S)
        core.write_lines(line, img)

    def _run(self, s, program) -> None:
        core = self.cores[s]
        res = core.apply([("program", program), ("run",)])
        if res["run"][-1][0] != 0:       # a compiler bug: the stage programs pass the check
            raise AssertionError(f"stage {s} program rejected: {res['run'][-1]}")

    def _forward(self, s, j, xs, ys, sent) -> tuple:
        core, c, io = self.cores[s], self.compiled[s], self.io[s]
        inp = xs[j] if s == 0 else sent.pop(("F", s, j)).view(np.float32)
        y = ys[j] if s == self.p - 1 else np.zeros(len(inp), np.int64)
        core.apply(c.data_writes(inp, y))
        before = core.counters["beats"]
        self._run(s, self.programs[s]["forward"])
        fwd_beats = core.counters["beats"] - before
        self._stash[s][j] = [(line, core.read_lines(line, n)) for line, n in io["stash"]]
        self.peak_stash[s] = max(self.peak_stash[s], len(self._stash[s]))
        if s < self.p - 1:
            out = self._matrix(core, io["output"])
            self.link_words += out.size
            sent[("F", s + 1, j)] = out
            return fwd_beats, None
        line = c.plan["loss"].line
        loss = get_vector(core.read_lines(line, _cdiv(c.desc.batch, self.config.size)), 0,
                          c.desc.batch, self.config.size).view(np.float32)
        return fwd_beats, loss

    def _backward(self, s, j, sent) -> int:
        core, io = self.cores[s], self.io[s]
        for line, img in self._stash[s].pop(j):
            core.write_lines(line, img)
        if s < self.p - 1:
            self._put(core, io["output"], sent.pop(("B", s, j)))
        before = core.counters["beats"]
        self._run(s, self.programs[s]["backward" if j == 0 else "backward_acc"])
        bwd_beats = core.counters["beats"] - before
        if s > 0:
            dx = self._matrix(core, io["dx"])
            self.link_words += dx.size
            sent[("B", s - 1, j)] = dx
        return bwd_beats

    def _check_batch(self, x, y, precision) -> tuple[np.ndarray, np.ndarray]:
        """``x`` (float32, ``B x d_0``) and ``y`` (``B``) of a step; ``TypeError`` for a
        per-layer ``precision`` table, ``ValueError`` for other shapes."""
        if isinstance(precision, dict):
            raise TypeError("precision must be None, a width or a (wa, wb, rounding) tuple "
                            "for a pipeline (per-layer tables are not split yet)")
        x, y = np.asarray(x, np.float32), np.asarray(y)
        B = self.desc.batch
        if x.shape != (B, self.desc.layers[0]) or y.shape != (B,):
            raise ValueError(f"x and y must have shapes {(B, self.desc.layers[0])} and {(B,)}, "
                             f"not {x.shape} and {y.shape}")
        return x, y

    def step(self, x, y, t: int, *, precision=None) -> dict:
        """One pipeline step on the batch ``x`` (``B x d_0``), ``y`` (``B``) at optimizer step
        ``t``: the stages' passes in an order their schedule and data dependencies allow (the
        result does not depend on the timing), then every stage's ``OPT``. ``precision``:
        ``None``, one width or one ``(wa, wb, rounding)`` for every layer. Returns
        ``dict(losses (B, row order), loss, status (per stage), skipped (any stage))``."""
        x, y = self._check_batch(x, y, precision)
        rows = self.desc.rows
        xs = [x[j * rows:(j + 1) * rows] for j in range(self.m)]
        ys = [y[j * rows:(j + 1) * rows] for j in range(self.m)]
        for core, c in zip(self.cores, self.compiled):
            core.apply(c.setup_actions(t, precision=precision))
        self._stash = [{} for _ in range(self.p)]
        sent, pos, losses = {}, [0] * self.p, [None] * self.m
        fb = [[0, 0] for _ in range(self.p)]
        left = 2 * self.m * self.p
        while left:
            moved = False
            for s in range(self.p):
                if pos[s] == len(self.orders[s]):
                    continue
                kind, j = self.orders[s][pos[s]]
                # a forward needs the previous stage's activation, a backward the next
                # stage's gradient (the last stage's own forward came first in its order)
                ready = (s == 0 if kind == "F" else s == self.p - 1) or (kind, s, j) in sent
                if not ready:
                    continue
                if kind == "F":
                    fb[s][0], loss = self._forward(s, j, xs, ys, sent)
                    if loss is not None:
                        losses[j] = loss
                else:
                    fb[s][1] = self._backward(s, j, sent)
                pos[s], left, moved = pos[s] + 1, left - 1, True
            if not moved:    # unreachable: both schedules are deadlock-free
                raise AssertionError(f"pipeline schedule stuck at {pos}")
        self.durations = [tuple(v) for v in fb]
        status = []
        for core, c, prog in zip(self.cores, self.compiled, self.programs):
            res = core.apply([("program", prog["optimizer"]), ("run",), ("status",)])
            status.append(dict(c._last(res["status"])))
        losses = np.concatenate(losses)
        return {"losses": losses, "loss": float(np.mean(losses.astype(np.float64))),
                "status": status, "skipped": any(bool(st["last_skipped"]) for st in status)}

    def timeline(self, *, latency: int = 0, schedule: str | None = None) -> dict:
        """:func:`timeline` of this pipeline with :attr:`durations` (run a step first)."""
        if not any(f for f, _ in self.durations):
            raise ValueError("no durations yet: run a step first")
        return timeline([f for f, _ in self.durations], [b for _, b in self.durations],
                        self.m, latency=latency, schedule=schedule or self.schedule)
