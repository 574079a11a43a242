"""``tessera train``: train an MLP on the digits with every training step executed by the
training core's generated Verilog (Verilated), Python acting only at step boundaries.

Per step the host writes the batch, sets the precision table and the optimizer registers,
starts the program, waits for ``done`` and reads the per-row losses, the optimizer status and
the counters (:class:`sim.host.driver.CoreDriver` over :class:`sim.verilated.core.VerilatedCore`,
whose C++ loop runs each command batch). The program is loaded once. Under FAST
(``--widths fast``) the program starts with ``ADAPT`` (which clears the statistics), the host
reads the step's statistics after the run and sets the next step's widths from them
(:meth:`sim.host.schedule.WidthSchedule.advance`, docs/tta.md).

Beside the RTL run:

* a **float32 reference** (:func:`sim.model.reference.reference_step` in float32) trains on the
  same batches with the same hyperparameters: the accuracy baseline;
* with ``check_every = K > 0`` the **golden model** (:class:`sim.model.core.CoreModel`) runs the
  same host actions in a worker process; every step's losses and status, and every K steps (and
  at the end) the whole parameter, gradient and optimizer-state regions are compared word for
  word. The run stops at the first difference with a report naming the step, tensor, element
  and both words (:class:`CheckFailed`).

Test accuracy is that of the RTL's weights (read back from the scratchpad after each epoch)
evaluated in float32 numpy: the weights the user gets in ``weights.npz``.

Output directory (``--out``): ``run.json`` (the spec and a summary), ``steps.json`` and
``epochs.json`` (metrics), ``loss.png``, ``accuracy.png``, ``cycles.png`` (matplotlib),
``weights.npz`` (``W0, b0, W1, b1, ...`` float32: ``numpy.load`` or ``torch.from_numpy``) and
``checkpoint.npz`` (everything :func:`train` needs to resume after the last finished epoch).
Ctrl-C stops after writing what the finished epochs produced; ``resume=True`` continues.
"""
from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import queue
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hdl.core.config import CoreConfig
from sim.host.compiler import MLP, compile_mlp
from sim.host.digits import epoch_batches, load_digits
from sim.host.optim import SGD, Adam, AdamW, Momentum
from sim.host.schedule import KINDS, WidthSchedule, tensor_stats

__all__ = ["TrainSpec", "train", "CheckFailed", "RunResult", "OPTIMIZERS", "PRESET_OF_SIZE",
           "Reference", "accuracy", "schedule_step_actions"]

F32 = np.float32
#: ``TrainSpec.size`` -> the core preset whose Verilog is built.
PRESET_OF_SIZE = {4: "tiny", 8: "default"}
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")


class CheckFailed(RuntimeError):
    """The RTL and the golden model differ (the message says where)."""


@dataclass(frozen=True)
class TrainSpec:
    """A training run (validated; every field is a ``tessera train`` option).

    Parameters
    ----------
    size : int
        Array size S: 4 (the ``tiny`` core) or 8 (``default``).
    layers : tuple of int
        MLP sizes; the first must be 64 (pixels) and the last 10 (classes).
    batch, micro_batches : int
        Rows per step and micro-batches per step (``batch % micro_batches == 0``).
    optimizer : str
        ``sgd``, ``momentum`` (0.9), ``adam`` or ``adamw`` (weight decay 0.01).
    lr : float
        Learning rate.
    checkpoint : tuple of int
        Hidden activations recomputed in the backward pass instead of kept.
    widths : str
        Precision schedule (:class:`sim.host.schedule.WidthSchedule`): ``"8"``, ``"4,8"``,
        ``"mixed"``, ``"8,6,4@step"``, ``"layer-hl"``, ``"xwg:4,8,8"``, ``"fast"``,
        ``"fast:0.3,0.1+sr"``, ``"+sr"`` ... (the precision table is set every step; FAST
        decides it from the statistics the host reads after every step, docs/tta.md).
    epochs, seed : int
        Epochs; seed of the initial weights and of the epochs' shuffles.
    steps_per_epoch : int
        0: every full batch of the training set (44 at batch 32); otherwise only the first
        ``steps_per_epoch`` batches of each epoch (short runs: the demo, tests).
    check_every : int
        0: no golden model; K > 0: the golden model runs beside the RTL, memories compared
        every K steps and at the end (losses and status every step).
    """

    size: int = 8
    layers: tuple = (64, 64, 10)
    batch: int = 32
    micro_batches: int = 1
    optimizer: str = "adam"
    lr: float = 3e-3
    checkpoint: tuple = ()
    widths: str = "8"
    epochs: int = 10
    seed: int = 0
    steps_per_epoch: int = 0
    check_every: int = 0

    def __post_init__(self):
        def intf(name, lo, hi=None):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"TrainSpec.{name} must be an int, not {type(v).__name__} "
                                f"{v!r}")
            if v < lo or (hi is not None and v > hi):
                raise ValueError(f"TrainSpec.{name} must be >= {lo}"
                                 + (f" and <= {hi}" if hi is not None else "") + f", not {v}")
        if self.size not in PRESET_OF_SIZE:
            raise ValueError(f"TrainSpec.size must be one of {tuple(PRESET_OF_SIZE)} (the "
                             f"array sizes with a core preset), not {self.size!r}")
        for name, lo in (("batch", 1), ("micro_batches", 1), ("epochs", 1), ("seed", 0),
                         ("steps_per_epoch", 0), ("check_every", 0)):
            intf(name, lo)
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"TrainSpec.optimizer must be one of {OPTIMIZERS}, not "
                             f"{self.optimizer!r}")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) \
                or not 0 < self.lr < 1:
            raise ValueError(f"TrainSpec.lr must be a float in (0, 1), not {self.lr!r}")
        for name in ("layers", "checkpoint"):
            v = getattr(self, name)
            if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
                raise TypeError(f"TrainSpec.{name} must be a tuple of ints, not "
                                f"{type(v).__name__} {v!r}")
            for x in v:
                if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
                    raise TypeError(f"TrainSpec.{name} entries must be ints, not "
                                    f"{type(x).__name__} {x!r}")
        layers = tuple(self.layers)
        if len(layers) < 2 or layers[0] != 64 or layers[-1] != 10:
            raise ValueError(f"TrainSpec.layers must start with 64 (the digits' pixels) and "
                             f"end with 10 (classes), not {layers!r}")
        object.__setattr__(self, "layers", layers)
        object.__setattr__(self, "checkpoint", tuple(sorted(self.checkpoint)))
        object.__setattr__(self, "lr", float(self.lr))
        self.schedule.check(self.config.array.widths)
        self.mlp        # the compiler's own checks (batch, micro-batches, checkpointing)

    @property
    def schedule(self) -> WidthSchedule:
        return WidthSchedule.parse(self.widths)

    @property
    def config(self) -> CoreConfig:
        return CoreConfig.preset(PRESET_OF_SIZE[self.size])

    @property
    def opt(self):
        return {"sgd": SGD(lr=self.lr), "momentum": Momentum(lr=self.lr, momentum=0.9),
                "adam": Adam(lr=self.lr), "adamw": AdamW(lr=self.lr)}[self.optimizer]

    @property
    def mlp(self) -> MLP:
        return MLP(layers=self.layers, batch=self.batch, optimizer=self.opt,
                   micro_batches=self.micro_batches, checkpoint=self.checkpoint)

    def to_dict(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "TrainSpec":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()
                      if k in names})


@dataclass
class RunResult:
    out: Path
    epochs: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    weights: list = field(default_factory=list)
    biases: list = field(default_factory=list)
    interrupted: bool = False
    summary: dict = field(default_factory=dict)


# -- golden model worker --------------------------------------------------------------------
def _golden_worker(preset: str, inq, outq) -> None:
    """Runs host actions on the golden model; compares the reads named in ``expect``."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
    from sim.model.core import CoreModel
    model = CoreModel(CoreConfig.preset(preset))
    while True:
        msg = inq.get()
        if msg[0] == "stop":
            outq.put(("stopped",))
            return
        _, tag, actions, expect = msg
        try:
            got = model.apply(actions)
        except Exception as e:     # a model error is a failed check, with its reason
            outq.put(("error", tag, f"{type(e).__name__}: {e}"))
            return
        for key, rtl in expect.items():
            want = got[key]
            if key in ("status", "stats"):
                if dict(want) != dict(rtl):
                    outq.put(("mismatch", tag, key, None, dict(rtl), dict(want)))
                    return
                continue
            rtl, want = np.asarray(rtl, np.uint32), np.asarray(want, np.uint32)
            if rtl.shape != want.shape or not np.array_equal(rtl, want):
                diff = (np.argwhere(rtl != want)[0].tolist() if rtl.shape == want.shape
                        else None)
                outq.put(("mismatch", tag, key, diff, rtl, want))
                return
        outq.put(("ok", tag))


class _Golden:
    """The golden model in a worker process, fed the RTL's host actions (non-blocking)."""

    def __init__(self, preset: str, compiled):
        ctx = mp.get_context("spawn")
        self.inq, self.outq = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=_golden_worker, args=(preset, self.inq, self.outq),
                                daemon=True)
        self.proc.start()
        self.compiled = compiled
        self.pending = 0
        self.checked = 0

    def send(self, tag: str, actions, expect: dict) -> None:
        self.inq.put(("apply", tag, actions, expect))
        self.pending += 1

    def poll(self, block: bool = False, timeout: float = 600.0) -> None:
        """Collect the worker's answers (all of them if ``block``); raise :class:`CheckFailed`
        at the first mismatch, or if the worker died or answered nothing for ``timeout`` s."""
        waited = 0.0
        while self.pending:
            try:
                msg = self.outq.get(True, 1.0) if block else self.outq.get_nowait()
            except queue.Empty:
                if not block:
                    return
                waited += 1.0
                if not self.proc.is_alive() and self.outq.empty():
                    raise CheckFailed(f"the golden model's process ended (exit code "
                                      f"{self.proc.exitcode}) with {self.pending} checks "
                                      f"unanswered")
                if waited >= timeout:
                    raise CheckFailed(f"the golden model answered nothing for {timeout:.0f} s")
                continue
            waited = 0.0
            self.pending -= 1
            if msg[0] == "ok":
                self.checked += 1
                continue
            self.close()
            if msg[0] == "error":
                raise CheckFailed(f"{msg[1]}: the golden model failed: {msg[2]}")
            raise CheckFailed(self._report(*msg[1:]))

    def _report(self, tag, key, where, rtl, want) -> str:
        if key in ("status", "stats"):
            diff = {k: (rtl.get(k), want.get(k)) for k in want if rtl.get(k) != want.get(k)}
            what = "optimizer status" if key == "status" else "FAST statistics"
            return f"{tag}: {what} differ (field: (RTL, golden)): {diff}"
        if where is None:
            return f"{tag}: read {key!r} has shape {rtl.shape} in RTL, {want.shape} golden"
        line, lane = where
        r, w = int(rtl[line, lane]), int(want[line, lane])
        what = f"line {line} lane {lane} of {key!r}"
        if key in ("params", "grads", "m", "v"):
            c = self.compiled
            # name the tensor element: decode both and find the first differing element
            Wr, br = c._region_decode(rtl, key)
            Ww, bw = c._region_decode(want, key)
            for name, a, b in ([(f"W{i}", Wr[i], Ww[i]) for i in range(len(Wr))]
                               + [(f"b{i}", br[i], bw[i]) for i in range(len(br))]):
                ai, bi = a.view(np.uint32), b.view(np.uint32)
                if not np.array_equal(ai, bi):
                    idx = tuple(int(i) for i in np.argwhere(ai != bi)[0])
                    what += f" = {key}.{name}{list(idx)}"
                    break
        f = lambda u: float(np.array(u, np.uint32).view(F32))  # noqa: E731
        return (f"{tag}: first differing word: {what}: RTL 0x{r:08x} ({f(r):.9g}), golden "
                f"0x{w:08x} ({f(w):.9g})")

    def close(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        # actions still buffered for a killed worker must not block the interpreter's exit
        # (a queue's feeder thread is joined at exit)
        for q in (self.inq, self.outq):
            q.cancel_join_thread()
            q.close()

    def finish(self, timeout: float = 3600.0) -> None:
        self.poll(block=True, timeout=timeout)
        self.inq.put(("stop",))
        try:
            self.outq.get(True, 60)
        except queue.Empty:
            pass
        self.close()


# -- float32 reference ----------------------------------------------------------------------
class Reference:
    """The float32 reference MLP (:func:`sim.model.reference.reference_step` in float32) trained
    on the same batches with the same hyperparameters: the accuracy baseline."""

    def __init__(self, spec: TrainSpec, W, b, state=None, t=0):
        self.spec, self.opt = spec, spec.opt
        self.W = [np.asarray(a, F32) for a in W]
        self.b = [np.asarray(a, F32) for a in b]
        self.state, self.t = state, t

    def step(self, x, y):
        from sim.model.reference import reference_step
        self.t += 1
        k = self.spec.micro_batches
        xs = np.split(x, k) if k > 1 else x
        ys = np.split(y, k) if k > 1 else y
        r = reference_step(list(self.spec.layers), self.W, self.b, self.state, xs, ys,
                           self.opt, self.t, dtype=F32)
        self.W, self.b, self.state = r["weights"], r["biases"], r["opt_state"]
        return r["loss"]


def accuracy(W, b, x, y) -> float:
    """Test accuracy of float32 inference with weights ``W``, ``b``."""
    from sim.model.reference import forward
    zs, _ = forward(W, b, x, F32)
    return float(np.mean(np.argmax(zs[-1], axis=1) == y))


# -- the run --------------------------------------------------------------------------------
def schedule_step_actions(comp, sched: WidthSchedule, x, y, t: int, table: dict,
                          program=None) -> list:
    """A step's host actions under ``sched``: :meth:`Compiled.step_actions` at precision
    ``table``, loading ``program`` (``sched.program(comp.program)``) when given; a FAST
    schedule also reads the step's statistics (``("stats", "stats")``) after the run. The
    training run and the time-to-accuracy sweep both use it (their step cycles are these
    actions')."""
    acts = comp.step_actions(x, y, t, precision=table, load_program=program is not None)
    if program is not None:
        acts = [("program", list(program)) if a[0] == "program" else a for a in acts]
    if sched.needs_statistics:
        acts.append(("stats", "stats"))
    return acts


def _save_npz(path: Path, **arrays) -> None:
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    tmp.replace(path)


def _state_arrays(prefix, W, b, state, states) -> dict:
    out = {f"{prefix}W{i}": np.asarray(a, F32) for i, a in enumerate(W)}
    out.update({f"{prefix}b{i}": np.asarray(a, F32) for i, a in enumerate(b)})
    for s in states:
        if state and state.get(s) is not None:
            out.update({f"{prefix}{s}W{i}": np.asarray(a, F32)
                        for i, a in enumerate(state[s]["W"])})
            out.update({f"{prefix}{s}b{i}": np.asarray(a, F32)
                        for i, a in enumerate(state[s]["b"])})
    return out


def _load_state(z, prefix, L, states):
    W = [z[f"{prefix}W{i}"] for i in range(L)]
    b = [z[f"{prefix}b{i}"] for i in range(L)]
    st = {}
    for s in states:
        if f"{prefix}{s}W0" in z:
            st[s] = {"W": [z[f"{prefix}{s}W{i}"] for i in range(L)],
                     "b": [z[f"{prefix}{s}b{i}"] for i in range(L)]}
    return W, b, st


def train(spec: TrainSpec, out, *, resume: bool = False, progress: bool = True,
          plots: bool = True, log=print, core=None, on_step=None) -> RunResult:
    """Run ``spec``, writing into directory ``out`` (see the module docstring).

    ``core``: a :class:`~sim.verilated.core.VerilatedCore` to use (default: built for
    ``spec.size``). ``on_step(epoch, step, core)``: called after each step (tests use it to
    corrupt a word and check that the check catches it). Raises :class:`CheckFailed` at the
    first difference from the golden model; on ``KeyboardInterrupt`` returns with
    ``interrupted=True`` after writing what the finished epochs produced.
    """
    from sim.host.driver import CoreDriver
    from sim.verilated.core import VerilatedCore, run_sync

    if not isinstance(spec, TrainSpec):
        raise TypeError(f"spec must be a TrainSpec, not {type(spec).__name__}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    desc, config = spec.mlp, spec.config
    comp = compile_mlp(desc, config)
    data = load_digits()
    L = desc.L
    states = desc.states
    ntrain = len(data.y_train)
    nb = len(epoch_batches(ntrain, spec.batch, spec.seed, 0))
    steps_per_epoch = min(nb, spec.steps_per_epoch) if spec.steps_per_epoch else nb

    res = RunResult(out)
    start_epoch, t, scale_exp = 0, 0, None
    sched = spec.schedule
    fast = sched.needs_statistics
    current = None                  # FAST's widths {(layer, kind): m} for the next step
    ckpt = out / "checkpoint.npz"
    if resume:
        if not (out / "run.json").exists() or not ckpt.exists():
            raise FileNotFoundError(f"nothing to resume in {out} (no run.json/checkpoint.npz: "
                                    f"no epoch finished)")
        old = TrainSpec.from_dict(json.loads((out / "run.json").read_text())["spec"])
        if dataclasses.replace(old, epochs=spec.epochs) != spec:
            raise ValueError(f"--resume: {out} holds a different run ({old}); only epochs may "
                             f"change")
        z = np.load(ckpt)
        start_epoch, t = int(z["epoch"]), int(z["t"])
        scale_exp = int(z["scale_exp"])
        W, b, st = _load_state(z, "", L, states)
        rW, rb, rst = _load_state(z, "ref_", L, ("m", "v"))
        ref = Reference(spec, rW, rb, rst or None, int(z["ref_t"]))
        res.epochs = json.loads((out / "epochs.json").read_text())[:start_epoch]
        res.steps = [s for s in json.loads((out / "steps.json").read_text())
                     if s["epoch"] < start_epoch]
        opt_state = dict(st)
        opt_state["scale_exp"] = scale_exp
        if fast:
            current = {(l, k): int(z["fast_widths"][l, j]) for l in range(L)
                       for j, k in enumerate(KINDS)}
        log(f"resuming {out} after epoch {start_epoch} (step {t})")
    else:
        from sim.model.train import init_params
        W, b = init_params(desc, seed=spec.seed)
        opt_state = None
        ref = Reference(spec, W, b)
    _write_json(out / "run.json", {"spec": spec.to_dict(), "status": "running"})

    if core is None:
        core = VerilatedCore(config, build_log=log)
    drv = CoreDriver(config, core)
    golden = _Golden(PRESET_OF_SIZE[spec.size], comp) if spec.check_every else None

    def apply(actions):
        return run_sync(drv.apply(actions))

    init = comp.init_actions(W, b, opt_state)
    apply(init)
    if golden:
        golden.send("initialisation", init, {})

    bar = None
    interrupted = False
    wall0 = time.perf_counter()
    cycles0 = core.cycles
    first = True
    program = sched.program(comp.program)     # FAST: ADAPT at the top (clears the statistics)
    try:
        total_steps = spec.epochs * steps_per_epoch
        for epoch in range(start_epoch, spec.epochs):
            widths0 = sched.widths(L, epoch=epoch, epochs=spec.epochs,
                                   step=epoch * steps_per_epoch, steps=total_steps,
                                   current=current)
            width = (widths0[(0, "x")] if sched.uniform and sched.per == "epoch" else None)
            batches = epoch_batches(ntrain, spec.batch, spec.seed, epoch)[:steps_per_epoch]
            if progress:
                from tqdm import tqdm
                bar = tqdm(total=len(batches), desc=f"epoch {epoch + 1}/{spec.epochs} "
                           f"w{width if width else sched}", unit="step", leave=True, dynamic_ncols=True,
                           file=sys.stderr)
            e_cycles, e_wall0 = core.cycles, time.perf_counter()
            losses = []
            for i, idx in enumerate(batches):
                x, y = data.x_train[idx], data.y_train[idx]
                gi = epoch * steps_per_epoch + i
                widths = sched.widths(L, epoch=epoch, epochs=spec.epochs, step=gi,
                                      steps=total_steps, current=current)
                table = sched.table(widths, L)
                acts = schedule_step_actions(comp, sched, x, y, t + 1, table,
                                             program if first else None)
                c0, w0 = core.cycles, time.perf_counter()
                r = apply(acts)
                c1 = core.cycles
                regs = apply([("counters",)])["counters"]
                w1 = time.perf_counter()
                step = comp.decode_step(r)
                if not step["ok"]:
                    from hdl.core.isa import STATUS_NAMES
                    st, pc = step["run"]
                    raise RuntimeError(f"the core rejected the program: "
                                       f"{STATUS_NAMES.get(st, st)} at pc {pc}")
                first = False
                if not step["skipped"]:
                    t += 1
                ref_loss = ref.step(x, y)
                rs = None
                if fast:            # the step's statistics -> the next step's widths
                    rs = tensor_stats(r["stats"])
                    current = sched.advance(widths, rs, step=gi, steps=total_steps, layers=L)
                if golden:
                    expect = {k: v for k, v in r.items() if k.startswith("loss")}
                    expect["status"] = r["status"]
                    if fast:
                        expect["stats"] = r["stats"]
                    golden.send(f"epoch {epoch + 1} step {i + 1} (t={t})", acts, expect)
                    gstep = epoch * steps_per_epoch + i + 1
                    if gstep % spec.check_every == 0:
                        reads = comp.read_actions()
                        golden.send(f"epoch {epoch + 1} step {i + 1} memory", reads,
                                    apply(reads))
                    golden.poll()
                macs = regs["macs"]
                S = config.size
                sw = widths[(0, "x")] if sched.uniform else None
                # MAC bound: per pass kind the beat of its widths (uniform schedules only: the
                # counters give the MACs of the whole step, not per pass)
                mac_bound = (-(-macs * config.array.beat_cycles(sw, sw) // (S * S))
                             if sw else None)
                rec = {"epoch": epoch, "step": i, "t": t, "width": sw,
                       "widths": [[widths[(l, k)] for k in KINDS] for l in range(L)],
                       "r": (None if rs is None else
                             [[rs.get((l, k)) for k in KINDS] for l in range(L)]),
                       "loss": step["loss"], "ref_loss": ref_loss, "skipped": step["skipped"],
                       "step_cycles": c1 - c0, "run_cycles": regs["cycles"],
                       "host_io_cycles": c1 - c0 - regs["cycles"],
                       "mac_bound_cycles": mac_bound,
                       "array_busy": regs["matmul_busy"], "vector_busy": regs["vector_busy"],
                       "optim_busy": regs["optim_busy"], "overlap": regs["overlap"],
                       "idle": regs["idle"], "array_stalls": regs["array_stalls"],
                       "wall_seconds": w1 - w0}
                res.steps.append(rec)
                losses.append(step["loss"])
                if on_step is not None:
                    on_step(epoch, i, core)
                if bar is not None:
                    run_c = core.cycles - cycles0
                    bar.set_postfix_str(f"loss {step['loss']:.3f} cycles {run_c / 1e6:.1f}M "
                                        f"{run_c / (time.perf_counter() - wall0) / 1e3:.0f}k/s",
                                        refresh=False)
                    bar.update(1)
            # end of epoch: the RTL's weights, accuracy, checkpoint
            reads = apply(comp.read_actions())
            W, b = comp.decode_params(reads)
            st = comp.decode_opt_state(reads)
            status = apply([("status",)])["status"]
            scale_exp = int(status["scale_exp"])
            acc = accuracy(W, b, data.x_test, data.y_test)
            ref_acc = accuracy(ref.W, ref.b, data.x_test, data.y_test)
            e_steps = res.steps[-len(batches):]
            e_widths = {s["width"] for s in e_steps}
            ep = {"epoch": epoch, "width": e_widths.pop() if len(e_widths) == 1 else None,
                  "steps": len(batches), "t": t,
                  "loss": float(np.mean(losses)), "ref_loss": float(np.mean(
                      [s["ref_loss"] for s in e_steps])),
                  "test_accuracy": acc, "reference_accuracy": ref_acc,
                  "train_accuracy": accuracy(W, b, data.x_train, data.y_train),
                  "sim_cycles": core.cycles - e_cycles,
                  "wall_seconds": time.perf_counter() - e_wall0,
                  "skipped_steps": sum(s["skipped"] for s in e_steps)}
            ep["sim_cycles_per_second"] = ep["sim_cycles"] / ep["wall_seconds"]
            res.epochs.append(ep)
            if bar is not None:
                bar.set_postfix_str(f"loss {ep['loss']:.3f} acc {acc:.3f} (ref {ref_acc:.3f}) "
                                    f"{ep['sim_cycles_per_second'] / 1e3:.0f}k cycles/s")
                bar.close()
                bar = None
            else:
                log(f"epoch {epoch + 1}/{spec.epochs} w{ep['width'] or sched}: loss {ep['loss']:.4f} test "
                    f"accuracy {acc:.4f} (float32 reference {ref_acc:.4f}), "
                    f"{ep['sim_cycles_per_second']:.0f} sim cycles/s")
            if golden:
                golden.poll()
            arrays = _state_arrays("", W, b, st, states)
            arrays.update(_state_arrays("ref_", ref.W, ref.b, ref.state, ("m", "v")))
            if fast:
                arrays["fast_widths"] = np.array([[current[(l, k)] for k in KINDS]
                                                  for l in range(L)], np.int64)
            _save_npz(ckpt, epoch=epoch + 1, t=t, scale_exp=scale_exp, ref_t=ref.t, **arrays)
            _save_npz(out / "weights.npz", **_state_arrays("", W, b, None, ()))
            _write_json(out / "epochs.json", res.epochs)
            _write_json(out / "steps.json", res.steps)
        if golden:
            reads = comp.read_actions()
            golden.send("end of run: final memory", reads, apply(reads))
            if progress:
                log("waiting for the golden model to finish checking ...")
            golden.finish()
    except KeyboardInterrupt:
        interrupted = True
        if bar is not None:
            bar.close()
        log(f"\ninterrupted: {len(res.epochs)} finished epoch(s) are kept in {out}; "
            f"continue with --resume")
    finally:
        if golden:
            golden.close()
    wall = time.perf_counter() - wall0
    res.weights, res.biases, res.interrupted = W, b, interrupted
    summary = {"status": "interrupted" if interrupted else "done",
               "epochs_done": len(res.epochs),
               "test_accuracy": res.epochs[-1]["test_accuracy"] if res.epochs else None,
               "reference_accuracy": res.epochs[-1]["reference_accuracy"] if res.epochs
               else None,
               "golden_checked": bool(spec.check_every) and not interrupted,
               "golden_checks": golden.checked if golden else 0,
               "sim_cycles": core.cycles - cycles0, "wall_seconds": wall,
               "sim_cycles_per_second": (core.cycles - cycles0) / wall if wall else 0.0}
    res.summary = summary
    _write_json(out / "steps.json", res.steps)
    _write_json(out / "epochs.json", res.epochs)
    _write_json(out / "run.json", {"spec": spec.to_dict(), **summary})
    if plots and res.epochs:
        from sim.host.plots import plot_run
        plot_run(out, res.epochs, res.steps)
    return res


# -- command line (``tessera train``) -------------------------------------------------------
def add_parser(sub) -> None:
    """The ``tessera train`` sub-command (options = :class:`TrainSpec` fields)."""
    d = TrainSpec()
    p = sub.add_parser("train", help="train an MLP on the digits in the Verilated training core",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--size", "-S", type=int, default=d.size, choices=sorted(PRESET_OF_SIZE),
                   help=f"array size S (default {d.size})")
    p.add_argument("--layers", default=",".join(map(str, d.layers)),
                   help="MLP sizes 64,hidden...,10 (default 64,64,10)")
    p.add_argument("--batch", type=int, default=d.batch, help=f"rows per step ({d.batch})")
    p.add_argument("--micro-batches", type=int, default=d.micro_batches,
                   help="micro-batches per step, gradients accumulated in place (1)")
    p.add_argument("--optimizer", default=d.optimizer, choices=OPTIMIZERS)
    p.add_argument("--lr", type=float, default=d.lr, help=f"learning rate ({d.lr})")
    p.add_argument("--checkpoint", default="none",
                   help="hidden activations recomputed in the backward pass: 1,2 | none")
    p.add_argument("--widths", default=d.widths,
                   help="precision schedule: 8 | 6 | 4 | 2 | 8,6,4 (stages over the epochs; "
                        "@step: over the steps) | mixed (= 2,4,8) | temporal-hl | temporal-lh "
                        "| layer-hl | layer-lh | layer:8,4 | xwg:X,W,G | fast | fast:ALPHA,BETA "
                        "(FAST: widths rise from 2 bits with the core's statistics); +sr: "
                        "stochastic rounding in the backward passes (docs/train.md) (default 8)")
    p.add_argument("--epochs", type=int, default=d.epochs, help=f"epochs ({d.epochs})")
    p.add_argument("--seed", type=int, default=d.seed, help="weights and shuffles (0)")
    p.add_argument("--steps-per-epoch", type=int, default=0,
                   help="only the first N batches of each epoch (0: all)")
    p.add_argument("--check-every", type=int, default=0, metavar="K",
                   help="run the golden model beside the RTL; compare memories every K steps "
                        "and stop at the first differing word (0: off)")
    p.add_argument("--out", type=Path, default=Path("runs/digits"),
                   help="output directory (default runs/digits)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out after its last finished epoch")
    p.add_argument("--no-progress", action="store_true", help="a line per epoch, no bar")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def spec_from_args(args) -> TrainSpec:
    try:
        layers = tuple(int(v) for v in args.layers.split(","))
    except ValueError:
        raise ValueError(f"--layers must be comma-separated ints, not {args.layers!r}") from None
    ck = args.checkpoint.strip().lower()
    if ck in ("", "none", "off"):
        ck = ()
    else:
        try:
            ck = tuple(int(v) for v in ck.split(","))
        except ValueError:
            raise ValueError(f"--checkpoint must be hidden-layer indices like 1,2 or 'none', "
                             f"not {args.checkpoint!r}") from None
    return TrainSpec(size=args.size, layers=layers, batch=args.batch,
                     micro_batches=args.micro_batches, optimizer=args.optimizer, lr=args.lr,
                     checkpoint=ck, widths=args.widths, epochs=args.epochs, seed=args.seed,
                     steps_per_epoch=args.steps_per_epoch, check_every=args.check_every)


def command(args) -> int:
    """Run ``tessera train``; exit status 0 done, 1 golden-model mismatch, 2 bad options,
    130 interrupted (what finished is kept)."""
    try:
        spec = spec_from_args(args)
    except (ValueError, TypeError) as exc:
        print(f"tessera train: error: {exc}", file=sys.stderr)
        return 2
    print(f"training {'-'.join(map(str, spec.layers))} on the digits in the S = {spec.size} "
          f"core (RTL, Verilator): {spec.optimizer} lr {spec.lr}, batch {spec.batch}, widths "
          f"{spec.schedule}, {spec.epochs} epochs -> {args.out}", flush=True)
    try:
        res = train(spec, args.out, resume=args.resume, progress=not args.no_progress,
                    plots=not args.no_plots)
    except CheckFailed as exc:
        print(f"tessera train: the RTL differs from the golden model: {exc}", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError) as exc:
        print(f"tessera train: error: {exc}", file=sys.stderr)
        return 2
    s = res.summary
    if s["test_accuracy"] is not None:
        print(f"test accuracy {100 * s['test_accuracy']:.2f} % (RTL weights) vs "
              f"{100 * s['reference_accuracy']:.2f} % (float32 reference, same batches); "
              f"{s['sim_cycles']:,} cycles simulated at {s['sim_cycles_per_second']:,.0f} "
              f"cycles/s" + ("; every step checked against the golden model"
                             if s["golden_checked"] else ""))
    print(f"wrote {args.out}/ (run.json, steps.json, epochs.json, weights.npz, plots)")
    return 130 if res.interrupted else 0
