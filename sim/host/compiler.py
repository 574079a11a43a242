"""MLP compiler for the training core: a network description -> memory plan + ISA program +
host actions (pure Python / numpy).

Network and step
----------------
:class:`MLP` describes ``layers = (d_0, d_1, ..., d_L)``: ``L`` Linear + bias layers, ReLU
after every layer but the last, softmax cross-entropy on the ``d_L`` logits; a batch of
``B = batch`` rows split into ``k = micro_batches`` micro-batches of ``m = B / k`` rows; an
optimizer (:class:`sim.host.optim.SGD`, ``Momentum``, ``Adam`` or ``AdamW(...)``), optional
dynamic loss scaling (:class:`sim.host.optim.LossScale`) and clipping by the global norm
(:class:`sim.host.optim.Clip`); optional activation checkpointing of hidden activations. Hidden
activation ``i`` (``1 <= i <= L - 1``) is ``h_i = relu(h_{i-1} W_{i-1} + b_{i-1})``, the input of
layer ``i``; ``h_0`` is the input ``x``.

:func:`compile_mlp` turns a description and a :class:`hdl.core.config.CoreConfig` into a
:class:`Compiled`: the program (128-bit words of :mod:`hdl.core.isa`), the plan (every tensor's
bank, line and size) and builders of the host actions that
:meth:`sim.model.core.CoreModel.apply` and the hardware host driver execute. One training
step::

    LOOP count=k stride=R                        (only when k > 1)
      per layer l:  MATMUL FWD      a=h_l  b=W_l  c=out_l  acc=OFF layer=l
                    VEC ADD_RELU (hidden) / ADD (last)  a=out_l b=b_l bcast=1 d=out_l (in place)
      SOFTMAX_XENT a=z b=labels_j d=z e=loss_j imm=FP32(1/B)            (dZ in place of z)
      per layer l from the last (schedule "listed"):
                    [recompute h_l if checkpointed]
                    MATMUL BWD_WEIGHT a=h_l  b=dW_l c=dz_l acc=AFTER_FIRST
                    REDUCE BIAS_GRAD  a=dz_l d=db_l      acc=AFTER_FIRST
          if l > 0: MATMUL BWD_DATA   a=dh_l b=W_l  c=dz_l acc=OFF
                    VEC RELU_GRAD     a=dh_l b=h_l  d=dh_l  (in place: dh_l becomes dz_{l-1})
    ENDLOOP
    OPT count=P w=params m=state1 v=state2 g=grads
    HALT

``x_j``, ``labels_j`` and ``loss_j`` of micro-batch ``j`` sit in a record of ``R`` lines
(record ``j`` at ``data + j * R``), so one loop stride serves all three; the instructions flag
those fields in ``loop`` (legal because :func:`hdl.core.isa.check_instruction` compares two
flagged ranges without the loop span: ``labels_j`` is read and ``loss_j`` written by one
``SOFTMAX_XENT``). With ``k = 1`` there is no loop and ``x`` and ``labels, loss`` are two
regions the allocator places independently.

The softmax's ``imm`` is ``1 / B`` (the *whole* batch) and the gradients accumulate over the
micro-batches (``AFTER_FIRST``: overwrite in iteration 0, add later), so the gradient region
holds the batch mean times the loss scale ``2**k_s`` (the sequencer multiplies ``imm`` by it);
``OPT`` unscales.

One-pass OPT
------------
Without clipping the ``OPT`` sets ``one_pass``: the optimizer reads each word once (about
``N + latency`` cycles instead of ``2N + ...``) and cannot look at all the gradients before its
first write, so the skip decision is the run's ``flags``: the BFP converters' NaN / Inf flags
of every ``MATMUL`` (as before) plus the core's snoop of every NaN / Inf word the matmul engine
or the vector unit writes into the ``grads`` lines (docs/core.md). For the programs built here
this is exactly the two-pass decision "some gradient word is NaN / Inf, or a converter saw one":

* ``grads`` is written only by ``BWD_WEIGHT`` (``dW``) and ``REDUCE BIAS_GRAD`` (``db``), each
  element first in iteration 0 (``AFTER_FIRST`` overwrites) and then only added to, and a
  NaN / Inf stays non-finite under additions: a gradient is non-finite at the ``OPT`` exactly
  when some write put a non-finite value there in this run. No other buffer shares its lines
  (a persistent region), and its padding lanes are never written (the host loads zeros).
* ``count = P * S`` covers whole lines, so the window (whole lines) is exactly ``G[0:N]``.
* The snoop ignores NaN / Inf written elsewhere (a loss, an activation gradient masked by
  ``RELU_GRAD``), which the two-pass check does not see either.

With clipping the step keeps its two passes (the factor needs the sum of squares first).

Schedule ``"overlap"`` issues the same instructions in another order, so that a matmul and a
vector instruction without a data dependency follow each other (the sequencer can run them at
the same time when their banks are disjoint)::

    [recompute h_{L-1}]  BWD_DATA(L-1)  RELU_GRAD(L-1)
    for l = L-1 .. 0:
        [recompute h_{l-1}]  BWD_DATA(l-1)  REDUCE(l)  BWD_WEIGHT(l)  RELU_GRAD(l-1)
                       (l - 1 >= 1 for BWD_DATA / RELU_GRAD; for l <= 1 BWD_WEIGHT before REDUCE)

``BWD_DATA(l-1) || REDUCE(l)`` and ``BWD_WEIGHT(l) || RELU_GRAD(l-1)``; with nearest rounding
both schedules give bit-identical results (stochastic rounding consumes converter noise in pass
order, so the order changes the noise).

Memory plan
-----------
Storage is a set of *buffers*: five persistent regions and the per-micro-batch transients.

* ``params`` (``W_0, b_0, W_1, b_1, ...`` contiguous, each matrix row-padded to whole lines,
  each bias ``ceil(d/S)`` lines), ``grads`` (``dW_l, db_l`` in the same layout), ``m`` and ``v``
  (optimizer state, same layout), ``data`` (``k`` records ``x_j, labels_j, loss_j``; for
  ``k = 1`` the regions ``data`` = ``x`` and ``labels`` = labels + losses). ``OPT``
  covers the whole region (``count = P = lines * S`` words, padding lanes included: they are
  zeros in every region and stay zero).
* State the update rule does not keep (SGD: ``m`` and ``v``; momentum: ``v``) is still an
  ``OPT`` operand but is neither read for a result nor written: those operands point at lines
  that are dead when ``OPT`` runs (they live only at the ``OPT``), so they cost no memory.
* Transients live over the closed interval of instructions that touch them (first write to last
  read): ``h_i`` (hidden activation ``i``), ``z`` (logits, then their gradient), ``dh_i``
  (``BWD_DATA`` output of layer ``i``, turned in place into ``dz_{i-1}`` by ``RELU_GRAD``) and
  the recompute buffers ``h_i~n`` of checkpointing.

Placement rules, in order:

1. Port rules (:func:`hdl.core.isa.check_instruction`): two operands of one instruction that
   both read (or both write) must lie in disjoint banks; a read range may overlap a write range
   only exactly (in place). So a MATMUL's ``a, b, c`` are in three banks, OPT's four regions in
   four, the two reads of a VEC / REDUCE / SOFTMAX in two, SOFTMAX's two writes in two. Flagged
   loop operands are checked over every iteration's lines (the whole ``data`` region).
2. Liveness: two buffers share lines only when their live intervals are disjoint (transients
   of different instructions; never a persistent region). Inside a bank a buffer takes the
   lowest offset that is free during its live interval (first fit); a buffer of ``n`` lines
   spans the fewest banks it can (``ceil(n / bank_depth)``; a smaller one never straddles a
   bank boundary). Exception, ``compile_mlp(..., split_grads=True)`` (for a per-layer
   all-reduce, :meth:`Compiled.dataparallel_program`): ``grads`` is placed first, with the
   last layer's block starting a bank that no other buffer may use (docs/multicore.md,
   "Per-layer all-reduce").
3. Objective, in order: fewest lines holding activations, fewest used lines in all, fewest
   *overlap conflicts*: pairs of buffers in one bank that belong to two instructions which could
   run at the same time (consecutive in issue order, including the loop's wrap-around, on
   different units -- matmul engine / vector unit / optimizer -- sharing no buffer). Two
   instructions that read one buffer (e.g. ``REDUCE(l)`` and ``BWD_DATA(l)`` both read
   ``dz_l``) can never overlap, whatever the placement.
4. Search: persistent regions first (largest first, greedy); then the transients by three
   greedy orders (size, start, number of port constraints) and a bounded branch and bound over
   their banks in order of first use (first fit inside a bank; empty banks are
   interchangeable); the aliased state operands last. ``report()`` gives the activation lines,
   their lower bound (the peak of simultaneously live activation lines) and the overlap pairs.

With 4 banks the in-place ``RELU_GRAD`` cannot be placed for ``L >= 2`` (``dh_l`` must avoid
the banks of ``W``, ``dz_l`` and ``h_l`` and, as ``dz_{l-1}``, that of ``dW``); the compiler
then writes ``dz_{l-1}`` to a separate buffer. With 4 banks and ``k > 1`` (one record region
for ``x`` and ``labels``) an even number of layers cannot be placed at all: the hidden
activations alternate between the two banks left by ``W`` and ``dW``, ``h_1`` outside the
record's, so for even ``L`` ``h_{L-1}`` is outside it too, and ``z`` must avoid both.

Checkpointing hidden activation ``i``: the forward pass still computes ``h_i`` (the next layer
needs it) but the buffer dies at the next layer's ``FWD``; in the backward pass ``h_i`` is
recomputed right before its first use, by ``FWD`` + ``ADD_RELU`` from the nearest kept
activation (``h_0 = x`` is always kept), through fresh recompute buffers that die as soon as the
next one is made. With nearest rounding the recomputed values are bit-identical to the forward
ones, so a checkpointed step equals the plain one bit for bit; with **stochastic rounding the
recompute passes draw converter noise** (the LFSRs run on across passes), so the recomputed
activations, and every later pass's noise, differ.

Reported memory (``Compiled.report()``): words (``lines * S``, padding included) of weights,
gradients (the parameter-gradient region), optimizer state (the regions the update rule keeps),
data (``x``, labels and losses of all micro-batches) and activations (every line some
per-micro-batch transient occupies: forward activations, logits and activation gradients,
recompute buffers), ``total`` = every used line once, and used lines per bank.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from math import gcd

import numpy as np

from hdl.array.config import BWD_DATA, BWD_WEIGHT, FWD, MODES
from hdl.config import check_int
from hdl.core.config import CoreConfig
from hdl.core.isa import (LOOP_FIELDS, OPT_MAX_COUNT, STATUS_NAMES, Acc, Op, Rop, Status, Vop,
                          check_program_for, decode, disassemble, encode,
                          operand_ranges)
from hdl.optim.config import SCALE_EXP_MAX, Mode, Reg
from sim.host.optim import SGD, Adam, Clip, LossScale, Momentum, optimizer_registers, reg_word
from sim.model.vector import get_matrix, get_vector, set_matrix, set_vector

__all__ = ["MLP", "Tensor", "Compiled", "CompileError", "compile_mlp", "KINDS", "SCHEDULES",
           "OPERAND_TENSORS", "allreduce_seg_lines"]

F32 = np.float32
KINDS = ("weights", "activations", "gradients", "optimizer_state", "data")
SCHEDULES = ("listed", "overlap")
#: Tensor kind of each operand of a pass: ``mode -> (width_a's, width_b's)`` (docs/fast.md).
OPERAND_TENSORS = {FWD: ("activations", "weights"), BWD_DATA: ("gradients", "weights"),
                   BWD_WEIGHT: ("activations", "gradients")}

_MODE_KEYS = {"FWD": FWD, "BWD_DATA": BWD_DATA, "BWD_WEIGHT": BWD_WEIGHT,
              "fwd": FWD, "bwd_data": BWD_DATA, "bwd_weight": BWD_WEIGHT}
_UNIT = {Op.MATMUL: "matmul", Op.VEC: "vector", Op.REDUCE: "vector",
         Op.SOFTMAX_XENT: "vector", Op.OPT: "optimizer"}


def allreduce_seg_lines(lines: int, ranks: int, size: int, group_size: int | None = None) -> int:
    """Lines per segment of an ``ALLREDUCE`` of ``lines`` lines over ``ranks`` cores of ``size``
    lanes: ``ceil(lines / ranks)``, and with BFP links (``group_size`` given) rounded up to
    whole groups (``seg * size`` a multiple of ``group_size``). Data parallelism uses it for
    the compiled ``ALLREDUCE`` (:meth:`Compiled.dataparallel_program`) and for the host's
    all-reduce (:mod:`sim.host.dataparallel`), so both sum in the same order."""
    seg = _cdiv(lines, ranks)
    if group_size:
        q = group_size // gcd(group_size, size)     # lines per whole number of groups
        seg = _cdiv(seg, q) * q
    return seg


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class CompileError(ValueError):
    """A description that does not compile for a configuration (the message says why)."""


# ---- description ---------------------------------------------------------------------------
@dataclass(frozen=True)
class MLP:
    """An MLP training step (see the module docstring).

    Parameters
    ----------
    layers : tuple of int
        ``(d_0, ..., d_L)``: input size, hidden sizes, classes (``>= 2``). Default 64-64-10.
    batch : int
        Rows per step ``B`` (the whole batch; the gradient is its mean).
    optimizer : sim.host.optim.SGD | Momentum | Adam
        Hyperparameters (``AdamW(...)`` is an ``Adam``). Default ``Adam()``.
    loss_scale : sim.host.optim.LossScale or None
        Loss scaling (dynamic unless ``dynamic=False``); ``None``: scale 1, no scaling state.
    clip : sim.host.optim.Clip or None
        Clipping by the global gradient norm.
    micro_batches : int
        ``k``: the batch runs as ``k`` micro-batches of ``B / k`` rows (``B % k == 0``),
        gradients accumulated in place.
    checkpoint : iterable of int, "none" or None
        Hidden activations (``1 .. L-1``) not kept from the forward pass (recomputed).
    schedule : str
        ``"listed"`` (the order in the module docstring) or ``"overlap"``.
    one_pass : bool
        Let the ``OPT`` run in one pass (its ``one_pass`` bit) when the step allows it: without
        clipping (see "One-pass OPT" in the module docstring). ``False`` keeps the two-pass
        step; the results are the same either way.
    mean_rows : int
        Rows the gradient is the mean over: the softmax's gradient scale ``imm`` is
        ``FP32(1 / mean_rows)``; ``0`` (default): ``batch``. Data parallelism over ``N`` cores
        (:mod:`sim.host.dataparallel`) compiles each core's step with ``batch = B / N`` and
        ``mean_rows = B``, so the sum of the cores' gradient regions (the all-reduce) is the
        mean over the global batch ``B`` with no extra multiply.
    head : bool
        The step ends in softmax cross-entropy (default). ``False``: a **pipeline stage**
        that is not the last (:mod:`sim.host.pipeline`): its last layer gets the ReLU of a
        hidden layer and its output goes to the next stage, which writes the gradient of that
        output into the same buffer before the backward pass (the labels / loss lines are
        then unused).
    input_grad : bool
        Also compute the gradient of the input (``BWD_DATA`` of layer 0 and ``RELU_GRAD``
        against the input, which is the previous stage's ReLU output): a pipeline stage that
        is not the first sends it back. Stage options (``head=False`` or ``input_grad=True``)
        need ``micro_batches = 1`` and schedule ``"listed"`` (the pipeline runs one
        micro-batch per program; :meth:`Compiled.stage_programs`).
    """

    layers: tuple = (64, 64, 10)
    batch: int = 32
    optimizer: object = Adam()
    loss_scale: LossScale | None = None
    clip: Clip | None = None
    micro_batches: int = 1
    checkpoint: frozenset = frozenset()
    schedule: str = "listed"
    one_pass: bool = True
    mean_rows: int = 0
    head: bool = True
    input_grad: bool = False

    def __post_init__(self):
        layers = self.layers
        if isinstance(layers, (str, bytes)) or not isinstance(layers, (tuple, list)):
            raise TypeError(f"MLP.layers must be a tuple of ints (input, hidden..., classes), "
                            f"not {type(layers).__name__} {layers!r}")
        if len(layers) < 2:
            raise ValueError(f"MLP.layers needs at least 2 sizes (input and classes), "
                             f"not {tuple(layers)!r}")
        for i, n in enumerate(layers):
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
                raise TypeError(f"MLP.layers[{i}] must be an int, not {type(n).__name__} {n!r}")
            if n < 1:
                raise ValueError(f"MLP.layers[{i}] must be >= 1, not {n!r}")
        if layers[-1] < 2:
            raise ValueError(f"MLP.layers[-1] (classes) must be >= 2 for softmax "
                             f"cross-entropy, not {layers[-1]!r}")
        object.__setattr__(self, "layers", tuple(int(n) for n in layers))
        check_int("MLP", "batch", self.batch, lo=1)
        check_int("MLP", "micro_batches", self.micro_batches, lo=1)
        if self.batch % self.micro_batches:
            raise ValueError(f"MLP.batch ({self.batch}) must be a multiple of "
                             f"MLP.micro_batches ({self.micro_batches})")
        if not isinstance(self.optimizer, (SGD, Momentum, Adam)):
            raise TypeError(f"MLP.optimizer must be sim.host.optim.SGD, Momentum, Adam or "
                            f"AdamW(...), not {type(self.optimizer).__name__} {self.optimizer!r}")
        if self.loss_scale is not None and not isinstance(self.loss_scale, LossScale):
            raise TypeError(f"MLP.loss_scale must be a sim.host.optim.LossScale or None, not "
                            f"{type(self.loss_scale).__name__} {self.loss_scale!r}")
        if self.clip is not None and not isinstance(self.clip, Clip):
            raise TypeError(f"MLP.clip must be a sim.host.optim.Clip or None, not "
                            f"{type(self.clip).__name__} {self.clip!r}")
        ck = self.checkpoint
        if ck is None or (isinstance(ck, str) and ck.strip().lower() in ("", "none", "off")):
            ck = frozenset()
        elif isinstance(ck, str):
            raise TypeError(f"MLP.checkpoint must be hidden-layer indices, 'none' or None, "
                            f"not {ck!r}")
        elif isinstance(ck, (int, np.integer)) and not isinstance(ck, bool):
            ck = frozenset([int(ck)])
        else:
            try:
                items = list(ck)
            except TypeError:
                raise TypeError(f"MLP.checkpoint must be an iterable of hidden-layer indices, "
                                f"'none' or None, not {type(ck).__name__} {ck!r}") from None
            for i in items:
                if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                    raise TypeError(f"MLP.checkpoint entries must be ints, not "
                                    f"{type(i).__name__} {i!r}")
            ck = frozenset(int(i) for i in items)
        L = len(self.layers) - 1
        bad = sorted(i for i in ck if not 1 <= i <= L - 1)
        if bad:
            hidden = f"1..{L - 1}" if L > 1 else "none (a single layer has no hidden activation)"
            raise ValueError(f"MLP.checkpoint: hidden activation(s) {bad} do not exist; "
                             f"layers {self.layers} have hidden activations {hidden}")
        object.__setattr__(self, "checkpoint", ck)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"MLP.schedule must be one of {SCHEDULES}, not {self.schedule!r}")
        if not isinstance(self.one_pass, (bool, np.bool_)):
            raise TypeError(f"MLP.one_pass must be a bool, not {type(self.one_pass).__name__} "
                            f"{self.one_pass!r}")
        object.__setattr__(self, "one_pass", bool(self.one_pass))
        check_int("MLP", "mean_rows", self.mean_rows, lo=0)
        for name in ("head", "input_grad"):
            v = getattr(self, name)
            if not isinstance(v, (bool, np.bool_)):
                raise TypeError(f"MLP.{name} must be a bool, not {type(v).__name__} {v!r}")
            object.__setattr__(self, name, bool(v))
        if self.is_stage:
            if self.micro_batches != 1:
                raise ValueError(f"MLP.micro_batches must be 1 for a pipeline stage (head=False "
                                 f"or input_grad=True), not {self.micro_batches!r}")
            if self.schedule != "listed":
                raise ValueError(f"MLP.schedule must be 'listed' for a pipeline stage, not "
                                 f"{self.schedule!r}")

    @property
    def is_stage(self) -> bool:
        """A pipeline stage that is not the whole network (``head=False`` or
        ``input_grad=True``)."""
        return not self.head or self.input_grad

    @property
    def L(self) -> int:
        """Number of Linear layers."""
        return len(self.layers) - 1

    @property
    def rows(self) -> int:
        """Rows per micro-batch ``m = B / k``."""
        return self.batch // self.micro_batches

    @property
    def states(self) -> tuple[str, ...]:
        """Optimizer state regions the update rule keeps."""
        mode = self.optimizer.mode
        return {Mode.SGD: (), Mode.MOMENTUM: ("m",), Mode.ADAM: ("m", "v")}[mode]

    def replace(self, **changes) -> "MLP":
        return replace(self, **changes)

    def describe(self) -> str:
        ck = ",".join(str(i) for i in sorted(self.checkpoint)) or "none"
        return (f"MLP {'-'.join(map(str, self.layers))}, batch {self.batch} "
                f"({self.micro_batches} x {self.rows}), "
                f"{getattr(self.optimizer, 'name', type(self.optimizer).__name__)}, "
                f"checkpoint {ck}, schedule {self.schedule}")


# ---- plan entries ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tensor:
    """One tensor of the plan: ``lines`` lines from global line ``line`` (bank ``bank``), a
    ``rows x cols`` matrix (a vector is ``1 x n``). ``count`` copies ``stride`` lines apart
    (the micro-batch records of ``x``, ``labels``, ``loss``). ``buffer``: the storage buffer it
    belongs to; ``live``: ``(first, last)`` instruction index of a transient, ``None`` for a
    persistent region."""
    name: str
    kind: str
    bank: int
    line: int
    lines: int
    rows: int
    cols: int
    count: int = 1
    stride: int = 0
    buffer: str = ""
    live: tuple | None = None
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


# ---- internal program representation ------------------------------------------------------
@dataclass
class _Buf:
    name: str
    lines: int
    kind: str
    persistent: bool
    alias: bool = False         # an OPT operand whose contents do not matter
    rows: int = 0
    cols: int = 0
    lo: int = -1
    hi: int = -1
    #: ``> 0``: line ``cut`` of the buffer starts a bank, and the banks of lines ``cut ..``
    #: hold no other buffer (:func:`compile_mlp` ``split_grads``)
    cut: int = 0


@dataclass
class _Ins:
    op: int
    fields: dict
    refs: dict = field(default_factory=dict)   # address field -> (buffer, line offset, flagged)
    note: str = ""


_ADDR_FIELDS = ("a", "b", "c", "d", "e", "w", "m", "v", "g")


def _port_kinds(ins: _Ins, S: int) -> dict:
    f = dict(ins.fields)
    for name in _ADDR_FIELDS:
        if name in ins.refs:
            f[name] = 0
    f.setdefault("loop", 0)
    return {r.port: r.kind for r in operand_ranges(ins.op, f, S)}


class _Builder:
    """The symbolic program of one description (buffers + instructions, no addresses)."""

    def __init__(self, desc: MLP, S: int, *, inplace_relu_grad: bool = True,
                 split_grads: bool = False, param_align: int = 1):
        self.desc, self.S, self.inplace = desc, S, inplace_relu_grad
        d, S = desc.layers, S
        self.d, self.L, self.m, self.k = d, desc.L, desc.rows, desc.micro_batches
        # parameter region layout (shared by grads / m / v)
        self.off_W, self.off_b, off = [], [], 0
        for l in range(self.L):
            self.off_W.append(off)
            off += d[l] * _cdiv(d[l + 1], S)
            self.off_b.append(off)
            off += _cdiv(d[l + 1], S)
        # rounded up to whole multiples of param_align lines (BFP links: whole groups)
        self.P = -(-off // param_align) * param_align
        # micro-batch record: x_j, labels_j, loss_j
        self.x_lines = self.m * _cdiv(d[0], S)
        self.nr = _cdiv(self.m, S)
        self.R = self.x_lines + 2 * self.nr
        # where x / labels / loss live: (buffer, line offset); one strided record region when
        # k > 1, else two regions (x, and labels + loss), which the allocator may put apart
        if self.k > 1:
            self.rec = {"x": ("data", 0), "labels": ("data", self.x_lines),
                        "loss": ("data", self.x_lines + self.nr)}
        else:
            self.rec = {"x": ("data", 0), "labels": ("labels", 0), "loss": ("labels", self.nr)}
        self.bufs: dict[str, _Buf] = {}
        self.ins: list[_Ins] = []
        self._rc = 0
        states = desc.states
        self._buf("params", self.P, "weights", True)
        self._buf("grads", self.P, "gradients", True)
        if split_grads and self.L >= 2:
            self.bufs["grads"].cut = self.off_W[self.L - 1]
        for s in ("m", "v"):
            self._buf(s, self.P, "optimizer_state", s in states, alias=s not in states)
        if self.k > 1:
            self._buf("data", self.k * self.R, "data", True)
        else:
            self._buf("data", self.x_lines, "data", True)
            self._buf("labels", 2 * self.nr, "data", True)
        self._build()

    # -- helpers
    def _buf(self, name, lines, kind, persistent, *, alias=False, rows=0, cols=0):
        assert name not in self.bufs, name
        self.bufs[name] = _Buf(name, lines, kind, persistent, alias, rows, cols)
        return (name, 0, False)

    def _act_buf(self, name, cols):
        return self._buf(name, self.m * _cdiv(cols, self.S), "activations", False,
                         rows=self.m, cols=cols)

    def _emit(self, op, note="", refs=None, **fields):
        self.ins.append(_Ins(op, fields, refs or {}, note))

    def _data(self, name):
        buf, off = self.rec[name]
        return (buf, off, self.k > 1)

    def _W(self, l):
        return ("params", self.off_W[l], False)

    def _nm(self, ref):
        buf, off = ref[0], ref[1]
        for name, where in self.rec.items():
            if where == (buf, off):
                return name
        return buf

    def _b(self, l):
        return ("params", self.off_b[l], False)

    def _mm(self, mode, l, a, b, c, acc, note):
        self._emit(Op.MATMUL, note, {"a": a, "b": b, "c": c}, mode=mode, acc=acc, layer=l,
                   M=self.m, K=self.d[l], N=self.d[l + 1])

    def _fwd_layer(self, l, src, dst, tag=""):
        last = l == self.L - 1 and self.desc.head
        self._mm(FWD, l, src, self._W(l), dst, Acc.OFF,
                 f"{tag}layer {l} forward: {self._nm(src)} x W{l} -> {dst[0]}")
        self._emit(Op.VEC, f"{tag}{dst[0]} += b{l}" + ("" if last else ", relu"),
                   {"a": dst, "b": self._b(l), "d": dst},
                   vop=Vop.ADD if last else Vop.ADD_RELU, bcast=1, rows=self.m,
                   cols=self.d[l + 1], imm=0)

    def _hname(self, i):
        return f"h{i}"

    def _act(self, i):
        """Reference to hidden activation ``i`` for the backward pass (recomputes it when
        checkpointed)."""
        if i == 0:
            return self._data("x")
        if i not in self.desc.checkpoint:
            return (self._hname(i), 0, False)
        p = max(j for j in range(i) if j == 0 or j not in self.desc.checkpoint)
        src = self._act(p)
        self._rc += 1
        for j in range(p + 1, i + 1):
            dst = self._act_buf(f"h{j}~{self._rc}", self.d[j])
            self._fwd_layer(j - 1, src, dst, tag="recompute ")
            src = dst
        return src

    # -- the step
    def _build(self):
        desc, d, L, m, k = self.desc, self.d, self.L, self.m, self.k
        if k > 1:
            self._emit(Op.LOOP, f"{k} micro-batches of {m} rows, record stride {self.R}",
                       count=k, stride=self.R)
        src = self._data("x")
        for l in range(L):
            dst = self._act_buf("z" if l == L - 1 else self._hname(l + 1), d[l + 1])
            self._fwd_layer(l, src, dst)
            src = dst
        z = ("z", 0, False)
        rows = desc.mean_rows or desc.batch
        imm = int(np.asarray(F32(1.0 / rows)).view(np.uint32))
        if desc.head:
            self._emit(Op.SOFTMAX_XENT, f"softmax cross-entropy, gradient scale 1/{rows} "
                       f"(x loss scale)",
                       {"a": z, "b": self._data("labels"), "d": z,
                        "e": self._data("loss")}, rows=m, cols=d[L], imm=imm)
        #: first instruction of the backward pass (a pipeline stage's forward program ends here)
        self.split = len(self.ins)
        dz = {L - 1: z}
        acc = Acc.AFTER_FIRST

        def bw_weight(l, a):
            self._mm(BWD_WEIGHT, l, a, ("grads", self.off_W[l], False), dz[l], acc,
                     f"dW{l} (+)= {self._nm(a)}^T x {dz[l][0]}")

        def reduce(l):
            self._emit(Op.REDUCE, f"db{l} (+)= column sums of {dz[l][0]}",
                       {"a": dz[l], "d": ("grads", self.off_b[l], False)},
                       rop=Rop.BIAS_GRAD, acc=acc, rows=m, cols=d[l + 1])

        def bw_data(l):
            dh = self._act_buf(f"dh{l}", d[l])
            self._mm(BWD_DATA, l, dh, self._W(l), dz[l], Acc.OFF,
                     f"{dh[0]} = {dz[l][0]} x W{l}^T")
            return dh

        def relu_grad(l, dh, a):
            out = dh if self.inplace else self._act_buf(f"dz{l - 1}", d[l])
            self._emit(Op.VEC, f"{out[0]} = {dh[0]} where {self._nm(a)} > 0",
                       {"a": dh, "b": a, "d": out}, vop=Vop.RELU_GRAD, bcast=0, rows=m,
                       cols=d[l], imm=0)
            dz[l - 1] = out

        if desc.schedule == "listed":
            for l in range(L - 1, -1, -1):
                a = self._act(l)
                bw_weight(l, a)
                reduce(l)
                if l > 0 or desc.input_grad:
                    relu_grad(l, bw_data(l), a)
        else:
            acts = {}
            if L > 1:
                acts[L - 1] = self._act(L - 1)
                relu_grad(L - 1, bw_data(L - 1), acts[L - 1])
            for l in range(L - 1, -1, -1):
                if l - 1 >= 1:
                    acts[l - 1] = self._act(l - 1)
                    dh = bw_data(l - 1)
                a = acts[l] if l in acts else self._act(l)
                if l >= 2:
                    reduce(l)
                    bw_weight(l, a)
                    relu_grad(l - 1, dh, acts[l - 1])
                else:
                    bw_weight(l, a)
                    reduce(l)
        self.dx = dz.get(-1)        # the input's gradient (input_grad)
        if k > 1:
            self._emit(Op.ENDLOOP)
        opt_name = getattr(desc.optimizer, "name", type(desc.optimizer).__name__)
        # one pass when clipping is off (it needs the sum of squares before the first write):
        # see "One-pass OPT" in the module docstring for why the skip decision is the same
        one_pass = int(desc.one_pass and desc.clip is None)
        self._emit(Op.OPT, f"{opt_name} step over {self.P * self.S} words"
                   + (", one pass" if one_pass else ""),
                   {"w": ("params", 0, False), "m": ("m", 0, False), "v": ("v", 0, False),
                    "g": ("grads", 0, False)}, count=self.P * self.S, one_pass=one_pass)
        self._emit(Op.HALT)
        # live intervals of the transients (and of the OPT-only aliased state operands)
        for i, ins in enumerate(self.ins):
            kinds = _port_kinds(ins, self.S) if ins.refs else {}
            for fname, (b, _, _) in ins.refs.items():
                buf = self.bufs[b]
                if buf.persistent:
                    continue
                if buf.lo < 0:
                    assert "w" in kinds[fname] or buf.alias, f"{b} read before written"
                    buf.lo = i
                buf.hi = i

    # -- constraints
    def constraints(self):
        """``(hard, soft)``: pairs of buffers that must / should avoid sharing a bank."""
        hard, soft = set(), {}
        for ins in self.ins:
            if not ins.refs:
                continue
            kinds = _port_kinds(ins, self.S)
            items = list(ins.refs.items())
            for i, (f1, r1) in enumerate(items):
                for f2, r2 in items[i + 1:]:
                    if r1[0] == r2[0]:
                        continue
                    k1, k2 = kinds[f1], kinds[f2]
                    if ("r" in k1 and "r" in k2) or ("w" in k1 and "w" in k2):
                        hard.add(frozenset((r1[0], r2[0])))
        for i, j in self.overlap_pairs():
            for b1 in self._bufs_of(self.ins[i]):
                for b2 in self._bufs_of(self.ins[j]):
                    if b1 != b2:
                        key = frozenset((b1, b2))
                        soft[key] = soft.get(key, 0) + 1
        return hard, soft

    def _bufs_of(self, ins):
        return {r[0] for r in ins.refs.values()}

    def _rw(self, ins):
        kinds = _port_kinds(ins, self.S)
        reads = {r[0] for f, r in ins.refs.items() if "r" in kinds[f]}
        writes = {r[0] for f, r in ins.refs.items() if "w" in kinds[f]}
        return reads, writes

    def overlap_pairs(self):
        """Consecutive instructions in issue order (with the loop's wrap-around) on different
        units without a data dependency: they could run at the same time."""
        seq = [i for i, ins in enumerate(self.ins) if ins.op in _UNIT]
        body = [i for i in seq if self.k > 1 and self.ins[i].op != Op.OPT]
        pairs = list(zip(seq, seq[1:]))
        if self.k > 1 and len(body) > 1:
            pairs.append((body[-1], body[0]))
        out = []
        for i, j in pairs:
            a, b = self.ins[i], self.ins[j]
            if _UNIT[a.op] == _UNIT[b.op]:
                continue
            ra, wa = self._rw(a)
            rb, wb = self._rw(b)
            if (ra | wa) & (rb | wb):    # a dependency, or one buffer (one bank) read by both
                continue
            out.append((i, j))
        return out


# ---- allocation ------------------------------------------------------------------------------
class _NoFit(Exception):
    def __init__(self, buf, message):
        self.buf = buf
        super().__init__(message)


def _live_overlap(a: _Buf, b: _Buf) -> bool:
    return a.persistent or b.persistent or not (a.hi < b.lo or b.hi < a.lo)


def _place_context(name, bufs, placed, hard_of, D):
    """For placing ``name``: its buffer, lines, banks spanned, the banks it must avoid (those
    of already placed hard conflicts) and the line ranges of placed buffers live with it."""
    bf = bufs[name]
    size = bf.lines
    nspan = max(1, _cdiv(size, D))
    if bf.cut:
        nspan = _cdiv(bf.cut, D) + _cdiv(size - bf.cut, D)
    excluded = set()
    for p in hard_of[name]:
        if p in placed:
            excluded |= placed[p][2]
    for p, (s, _, _) in placed.items():      # banks a cut buffer keeps to itself
        if bufs[p].cut and p != name:
            excluded |= _banks_of(s + bufs[p].cut, bufs[p].lines - bufs[p].cut, D)
    others = sorted((s, e) for q, (s, e, _) in placed.items() if _live_overlap(bf, bufs[q]))
    return bf, size, nspan, excluded, others


def _allocate(bufs: dict, order: list, hard_of: dict, soft_of: dict, D: int, NB: int,
              soft_first: bool, fixed: dict | None = None) -> dict:
    """Greedy placement of ``order``; returns ``{buffer: global start line}`` or raises
    :class:`_NoFit`. A buffer of ``n`` lines occupies ``ceil(n / D)`` banks (no needless
    straddling of a bank boundary); the lowest free start in each allowed first bank is a
    candidate; the best by ``(added used lines, soft conflicts)`` (or the reverse) wins."""
    placed: dict[str, tuple[int, int, frozenset]] = {}
    top = [0] * NB
    for name, s0 in (fixed or {}).items():
        e0 = s0 + bufs[name].lines
        placed[name] = (s0, e0, frozenset(_banks_of(s0, bufs[name].lines, D)))
        for bk in placed[name][2]:
            top[bk] = max(top[bk], min(e0, (bk + 1) * D) - bk * D)
    for name in order:
        bf, size, nspan, excluded, others = _place_context(name, bufs, placed, hard_of, D)
        soft_banks = [(placed[q][2], w) for q, w in soft_of[name].items() if q in placed]
        best = None
        largest = (0, None)
        if bf.cut:
            # line `cut` at the start of bank B; the banks from B on are this buffer's alone
            used = set().union(*(p[2] for p in placed.values())) if placed else set()
            for B in range(1, NB):
                start = B * D - bf.cut
                end = start + size
                if start < 0 or end > NB * D:
                    continue
                banks = frozenset(_banks_of(start, size, D))
                if (banks & excluded or _banks_of(B * D, size - bf.cut, D) & used
                        or any(s < end and start < e for s, e in others)):
                    continue
                growth = sum(max(0, min(end, (bk + 1) * D) - bk * D - top[bk]) for bk in banks)
                sv = sum(w for bs, w in soft_banks if bs & banks)
                key = (sv, growth, start) if soft_first else (growth, sv, start)
                if best is None or key < best[0]:
                    best = (key, start, banks)
            if best is None:
                raise _NoFit(name, f"tensor {name!r} ({bf.kind}, {size} lines) does not fit with "
                                   f"line {bf.cut} (the last layer's block) starting a bank "
                                   f"that holds nothing else (split_grads); banks excluded by "
                                   f"the port rules: {sorted(excluded)}")
        for b0 in range(NB - nspan + 1 if not bf.cut else 0):
            banks = frozenset(range(b0, b0 + nspan))
            if banks & excluded:
                continue
            lo, last = b0 * D, b0 * D + nspan * D - size     # allowed starts lo..last
            start = lo
            for s, e in others:
                if e <= start:
                    continue
                if s >= start + size:
                    break
                if nspan == 1 and s > start:
                    largest = max(largest, (s - start, b0))
                start = e
                if start > last:
                    break
            if start > last:
                if nspan == 1 and start < lo + D:
                    largest = max(largest, (lo + D - start, b0))
                continue
            end = start + size
            growth = 0
            for bk in banks:
                used = min(end, (bk + 1) * D) - bk * D
                growth += max(0, used - top[bk])
            sv = sum(w for bs, w in soft_banks if bs & banks)
            key = (sv, growth, start) if soft_first else (growth, sv, start)
            if best is None or key < best[0]:
                best = (key, start, banks)
        if best is None:
            allowed = [b for b in range(NB) if b not in excluded]
            where = (f"instructions {bf.lo}..{bf.hi}" if not bf.persistent
                     else "the whole program")
            if nspan > 1:
                msg = (f"needs {nspan} banks ({size} lines > bank_depth {D}) free during "
                       f"{where}")
            else:
                msg = (f"needs {size} consecutive free lines in one bank during {where}; the "
                       f"largest free run in the banks the port rules allow ({allowed}) is "
                       f"{largest[0]} lines" + (f" (bank {largest[1]})" if largest[1] is not None
                                                else ""))
            raise _NoFit(name, f"tensor {name!r} ({bf.kind}, {size} lines) does not fit: {msg}; "
                               f"banks excluded by the port rules: {sorted(excluded)}")
        _, start, banks = best
        placed[name] = (start, start + size, banks)
        for bk in banks:
            top[bk] = max(top[bk], min(start + size, (bk + 1) * D) - bk * D)
    return {n: s for n, (s, _, _) in placed.items()}


def _used_lines(bufs, place, D, NB):
    """Used lines per bank (each line once) and per kind (union over that kind's buffers)."""
    used = np.zeros(NB * D, bool)
    kind_used = {k: np.zeros(NB * D, bool) for k in KINDS}
    for n, b in bufs.items():
        s = place[n]
        used[s:s + b.lines] = True
        if not b.alias:
            kind_used[b.kind][s:s + b.lines] = True
    per_bank = [int(used[i * D:(i + 1) * D].sum()) for i in range(NB)]
    return per_bank, {k: int(v.sum()) for k, v in kind_used.items()}


# ---- compile --------------------------------------------------------------------------------
def _check_types(desc, config):
    if not isinstance(desc, MLP):
        raise TypeError(f"desc must be an MLP, not {type(desc).__name__} {desc!r}")
    if not isinstance(config, CoreConfig):
        raise TypeError(f"config must be a CoreConfig, not {type(config).__name__} {config!r}")


def _check_limits(desc: MLP, config: CoreConfig):
    dim_max = (1 << config.dim_bits) - 1
    if desc.L > config.layers:
        raise CompileError(f"{desc.L} layers do not fit the precision table: CoreConfig.layers "
                           f"= {config.layers} (a MATMUL's layer field is 0..{config.layers - 1})")
    for i, n in enumerate(desc.layers):
        if n > dim_max:
            raise CompileError(f"layer size {n} (layers[{i}]) exceeds the matmul engine's "
                               f"dimension limit {dim_max} = 2**dim_bits - 1 "
                               f"(CoreConfig.dim_bits = {config.dim_bits})")
    if desc.rows > dim_max:
        raise CompileError(f"micro-batch rows {desc.rows} (batch {desc.batch} / micro_batches "
                           f"{desc.micro_batches}) exceed the matmul engine's dimension limit "
                           f"{dim_max} = 2**dim_bits - 1; use more micro-batches")
    if desc.layers[-1] > config.max_classes:
        raise CompileError(f"{desc.layers[-1]} classes exceed the softmax unit's row limit "
                           f"CoreConfig.max_classes = {config.max_classes}")
    if desc.micro_batches >= 1 << 16:
        raise CompileError(f"micro_batches {desc.micro_batches} exceeds the LOOP count field "
                           f"(at most {(1 << 16) - 1})")


#: Nodes of the bounded branch-and-bound search over the transients' banks (per compile).
SEARCH_NODES = 20000


def _build_and_place(desc, config, inplace, split_grads=False, param_align=1):
    S, D, NB = config.size, config.bank_depth, config.banks
    bld = _Builder(desc, S, inplace_relu_grad=inplace, split_grads=split_grads,
                   param_align=param_align)
    if bld.P * S > OPT_MAX_COUNT:
        raise CompileError(f"{bld.P * S} parameter words (with row padding) exceed the largest "
                           f"OPT region ({OPT_MAX_COUNT} words, the optimizer engine's N range)")
    if bld.R >= 1 << 16 and desc.micro_batches > 1:
        raise CompileError(f"micro-batch record of {bld.R} lines exceeds the LOOP stride field")
    if len(bld.ins) > config.prog_depth:
        raise CompileError(f"program of {len(bld.ins)} instructions is longer than the program "
                           f"memory (CoreConfig.prog_depth = {config.prog_depth})")
    bufs = bld.bufs
    persistent = sum(b.lines for b in bufs.values() if b.persistent)
    peak = max((sum(b.lines for b in bufs.values() if not b.persistent and b.lo <= i <= b.hi)
                for i in range(len(bld.ins))), default=0)
    if persistent + peak > config.lines:
        parts = {k: sum(b.lines for b in bufs.values() if b.persistent and b.kind == k)
                 for k in KINDS if k != "activations"}
        detail = ", ".join(f"{k} {v}" for k, v in parts.items())
        raise CompileError(f"the plan needs at least {persistent + peak} lines ({detail}, peak "
                           f"live activations {peak}) but the scratchpad has {config.lines} "
                           f"lines ({NB} banks x {D})")
    hard, soft = bld.constraints()
    hard_of = {n: set() for n in bufs}
    for pair in hard:
        a, b = tuple(pair)
        hard_of[a].add(b)
        hard_of[b].add(a)
    soft_of = {n: {} for n in bufs}
    for pair, w in soft.items():
        a, b = tuple(pair)
        soft_of[a][b] = soft_of[b][a] = w
    # a cut buffer first (the banks it keeps to itself must still be empty)
    pers = sorted((n for n, b in bufs.items() if b.persistent),
                  key=lambda n: (not bufs[n].cut, -bufs[n].lines))
    trans = [n for n, b in bufs.items() if not b.persistent]
    orders = [
        sorted(trans, key=lambda n: (-bufs[n].lines, bufs[n].lo)),
        sorted(trans, key=lambda n: (bufs[n].lo, -bufs[n].lines)),
        sorted(trans, key=lambda n: (-len(hard_of[n]), -bufs[n].lines, bufs[n].lo)),
    ]

    def score(place):
        per_bank, per_kind = _used_lines(bufs, place, D, NB)
        viol = sum(w for pair, w in soft.items() if _banks_meet(place, bufs, tuple(pair), D))
        return (per_kind["activations"], sum(per_bank), viol)

    best, first_err = None, None
    for order in orders:
        for soft_first in (False, True):
            try:
                place = _allocate(bufs, pers + order, hard_of, soft_of, D, NB, soft_first)
            except _NoFit as exc:
                first_err = first_err or exc
                continue
            key = score(place)
            if best is None or key < best[0]:
                best = (key, place)
    # exhaustive search (bounded) over the transients' banks, persistent regions as placed by
    # the first greedy run that succeeded
    # (the aliased optimizer-state operands are placed greedily afterwards)
    if best is not None:
        pers_place = {n: best[1][n] for n in pers}
        acts = [n for n in trans if not bufs[n].alias]
        found = _search(bufs, pers_place, acts, hard_of, soft_of, D, NB, SEARCH_NODES)
        if found is not None:
            rest = [n for n in trans if bufs[n].alias]
            found = _search(bufs, found, rest, hard_of, soft_of, D, NB, SEARCH_NODES)
        if found is not None:
            key = score(found)
            if key < best[0]:
                best = (key, found)
    if best is None:
        raise first_err
    return bld, best[1], hard, soft


def _search(bufs, pers_place, trans, hard_of, soft_of, D, NB, node_limit):
    """Branch and bound over the transients in order of their first instruction: each takes a
    first-fit start in one of the banks the port rules allow (of the banks holding nothing yet
    only the first is tried: they are interchangeable); the partial cost ``(sum of bank tops,
    activation lines above the persistent regions, overlap conflicts)`` only grows, so a branch
    that reaches the best complete cost is cut. At most ``node_limit`` nodes."""
    order = sorted(trans, key=lambda n: (bufs[n].lo, -bufs[n].lines, n))
    placed = {}
    top = [0] * NB
    for n, s0 in pers_place.items():
        e0 = s0 + bufs[n].lines
        banks = frozenset(_banks_of(s0, bufs[n].lines, D))
        placed[n] = (s0, e0, banks)
        for bk in banks:
            top[bk] = max(top[bk], min(e0, (bk + 1) * D) - bk * D)
    pers_top = list(top)
    act_top = list(top)
    best = [None, None]
    nodes = [0]

    def cost(viol):
        return (sum(a - p for a, p in zip(act_top, pers_top)), sum(top), viol)

    def rec(i, viol):
        nodes[0] += 1
        if nodes[0] > node_limit:
            return
        c = cost(viol)
        if best[0] is not None and c >= best[0]:
            return
        if i == len(order):
            best[0], best[1] = c, {n: s for n, (s, _, _) in placed.items()}
            return
        name = order[i]
        bf, size, nspan, excluded, others = _place_context(name, bufs, placed, hard_of, D)
        cands = []
        empty_seen = False
        for b0 in range(NB - nspan + 1):
            banks = frozenset(range(b0, b0 + nspan))
            if banks & excluded:
                continue
            if nspan == 1 and top[b0] == 0:
                if empty_seen:
                    continue
                empty_seen = True
            lo, last = b0 * D, b0 * D + nspan * D - size
            start = lo
            for s, e in others:
                if e <= start:
                    continue
                if s >= start + size:
                    break
                start = e
                if start > last:
                    break
            if start > last:
                continue
            end = start + size
            grow = sum(max(0, min(end, (bk + 1) * D) - bk * D - top[bk]) for bk in banks)
            sv = sum(w for q, w in soft_of[name].items() if q in placed and placed[q][2] & banks)
            cands.append((grow, sv, start, banks))
        cands.sort(key=lambda t: (t[0], t[1], t[2]))     # least growth first: greedy leaf first
        for grow, sv, start, banks in cands:
            end = start + size
            saved = [(bk, top[bk], act_top[bk]) for bk in banks]
            for bk in banks:
                used = min(end, (bk + 1) * D) - bk * D
                top[bk] = max(top[bk], used)
                if bf.kind == "activations" and not bf.alias:
                    act_top[bk] = max(act_top[bk], used)
            placed[name] = (start, end, banks)
            rec(i + 1, viol + sv)
            del placed[name]
            for bk, t, a in saved:
                top[bk], act_top[bk] = t, a
            if nodes[0] > node_limit:
                return

    rec(0, 0)
    return best[1]


def _banks_of(start, lines, D):
    return set(range(start // D, (start + lines - 1) // D + 1))


def _banks_meet(place, bufs, pair, D):
    a, b = pair
    return bool(_banks_of(place[a], bufs[a].lines, D) & _banks_of(place[b], bufs[b].lines, D))


def compile_mlp(desc: MLP | None = None, config: CoreConfig | None = None, *,
                split_grads: bool = False, param_align: int = 1) -> "Compiled":
    """Compile ``desc`` (default :class:`MLP` ``()``) for ``config`` (default
    ``CoreConfig()``). Raises :class:`CompileError` (a ``ValueError``) naming the problem
    when the description does not fit the configuration; the returned program passes
    :func:`hdl.core.isa.check_program`.

    ``split_grads`` (for a per-layer all-reduce, :meth:`Compiled.dataparallel_program`
    ``per_layer=True``): place the gradient region so that the last layer's block
    (``dW_{L-1}, db_{L-1}``, the end of the region) starts a bank and its banks hold no other
    buffer; the region stays one contiguous range in the parameter layout (the ``OPT`` is
    unchanged), only its start moves. Its ``ALLREDUCE`` then owns no bank the backward pass of
    the earlier layers touches (docs/multicore.md, "Per-layer all-reduce"). It costs the rest
    of that bank and may not fit (``CompileError``), e.g. with 4 banks and Adam (params, m, v
    and the two parts of grads need 5). No effect for one layer.

    ``param_align``: the parameter regions (params, grads, m, v) get a multiple of this many
    lines (zero padding lines at the end, which the ``OPT`` updates as zeros), e.g. whole BFP
    groups for an ``ALLREDUCE`` with BFP links (``group_size / S`` lines; what
    :class:`sim.host.dataparallel.DataParallel` asks for with ``compression="bfp"``)."""
    desc = MLP() if desc is None else desc
    config = CoreConfig() if config is None else config
    _check_types(desc, config)
    _check_limits(desc, config)
    split_grads = bool(split_grads)
    check_int("compile_mlp", "param_align", param_align, lo=1, hi=1 << 12)
    try:
        bld, place, hard, soft = _build_and_place(desc, config, True, split_grads, param_align)
    except _NoFit as exc:
        if desc.L < 2:
            raise CompileError(str(exc)) from None
        try:
            bld, place, hard, soft = _build_and_place(desc, config, False, split_grads,
                                                      param_align)
        except _NoFit as exc2:
            hint = ""
            if config.banks == 4 and desc.micro_batches > 1:
                hint = ("; with 4 banks and micro-batches (x and labels share one record "
                        "region, so z must avoid its bank) an even number of layers cannot be "
                        "placed: use 8 banks or micro_batches=1")
            if split_grads:
                hint += ("; split_grads=True: the last layer's gradient block needs a bank of "
                         "its own (compile without it)")
            raise CompileError(f"{exc2} (with a separate dz buffer; in place: {exc}){hint}") \
                from None
    return Compiled(desc, config, bld, place, soft)


# ---- compiled result -------------------------------------------------------------------------
class Compiled:
    """A compiled MLP step: :attr:`program`, :attr:`plan`, :meth:`report` and the host actions.

    Host-action lists (for :meth:`sim.model.core.CoreModel.apply` or the hardware driver)::

        model.apply(c.init_actions(weights, biases))          # once
        res = model.apply(c.step_actions(x, y, t) + c.read_actions())
        step = c.decode_step(res); weights, biases = c.decode_params(res)
    """

    def __init__(self, desc: MLP, config: CoreConfig, bld: _Builder, place: dict, soft: dict):
        self.desc, self.config = desc, config
        D = config.bank_depth
        self._b = bld
        self.place = dict(place)           #: buffer -> global start line
        self.inplace_relu_grad = bld.inplace
        #: the last layer's gradient block starts a bank of its own (``split_grads``)
        self.split_grads = bool(bld.bufs["grads"].cut)
        self.regions = {n: (place[n], b.lines) for n, b in bld.bufs.items() if b.persistent}
        words, notes = [], []
        for ins in bld.ins:
            f = dict(ins.fields)
            loop = 0
            for name, (buf, off, flagged) in ins.refs.items():
                f[name] = place[buf] + off
                if flagged:
                    loop |= 1 << LOOP_FIELDS[ins.op].index(name)
            if ins.op in LOOP_FIELDS:
                f["loop"] = loop
            words.append(encode(ins.op, **f))
            notes.append(ins.note)
        self.program: list[int] = words
        self.notes: list[str] = notes
        st, pc = self.check()
        if st != Status.OK:     # a compiler bug: the plan is built to satisfy the rules
            raise AssertionError(f"compiled program rejected: {STATUS_NAMES[st]} at pc {pc}: "
                                 f"{disassemble(words[pc])}")
        self.plan: dict[str, Tensor] = self._make_plan()
        self._overlap = bld.overlap_pairs()
        self._overlap_disjoint = sum(
            1 for i, j in self._overlap
            if not ({b for r in bld.ins[i].refs.values()
                     for b in _banks_of(place[r[0]], bld.bufs[r[0]].lines, D)}
                    & {b for r in bld.ins[j].refs.values()
                       for b in _banks_of(place[r[0]], bld.bufs[r[0]].lines, D)}))
        self._soft = soft

    # -- program / plan ----------------------------------------------------------------------
    def check(self) -> tuple[int, int]:
        """:func:`hdl.core.isa.check_program` of the program on this configuration."""
        c = self.config
        return check_program_for(self.program, c)

    def split_programs(self) -> tuple[list[int], list[int]]:
        """The step as two programs, for a host that acts between the backward pass and the
        optimizer (data parallelism, :mod:`sim.host.dataparallel`, all-reduces the gradient
        region there): ``(backward, optimizer)`` = the program up to its ``OPT`` then
        ``HALT``, and that ``OPT`` then ``HALT`` (same words, same addresses). Run one after
        the other they do what :attr:`program` does, except for a one-pass ``OPT``: its skip
        decision is the flags of *its* run, which the backward pass no longer shares, so split
        a step compiled with ``one_pass=False`` (the two-pass ``OPT`` tests the gradients
        itself)."""
        pcs = [pc for pc, w in enumerate(self.program) if decode(w)[0] == Op.OPT]
        halt = encode(Op.HALT)
        if len(pcs) != 1:      # the compiler emits exactly one OPT
            raise AssertionError(f"expected one OPT in the program, found {len(pcs)}")
        pc = pcs[0]
        return self.program[:pc] + [halt], [self.program[pc], halt]

    def grad_blocks(self) -> list[list[tuple[int, int]]]:
        """Per layer ``l``: the ``(line, lines)`` ranges (global lines) of ``dW_l`` and
        ``db_l`` in the gradient region, merged when adjacent (the compiler's layout puts
        ``db_l`` right after ``dW_l``: one range per layer, the layers in order)."""
        b, S, g0 = self._b, self.config.size, self.place["grads"]
        out = []
        for l in range(b.L):
            parts = sorted([(g0 + b.off_W[l], b.d[l] * _cdiv(b.d[l + 1], S)),
                            (g0 + b.off_b[l], _cdiv(b.d[l + 1], S))])
            merged = [parts[0]]
            for s, n in parts[1:]:
                if merged[-1][0] + merged[-1][1] == s:
                    merged[-1] = (merged[-1][0], merged[-1][1] + n)
                else:
                    merged.append((s, n))
            out.append(merged)
        return out

    def dataparallel_program(self, comp: int = 0, width: int = 8, timeout: int = 0xFFFF,
                             seg: int | None = None, per_layer: bool = False,
                             rounding: int = 0) -> list[int]:
        """The data-parallel step as one program per core (every core runs the same words):
        :attr:`program` with ``ALLREDUCE a=<grads line> lines=<grads lines> seg timeout comp
        width poison=1`` right before its ``OPT``, so the collective engine all-reduces the
        gradient region of every core (``P * S`` words, padding lanes included) between the
        backward pass and the optimizer, and a core whose run raised a flag poisons the sum
        (docs/multicore.md, "ALLREDUCE in the golden model").

        ``per_layer=True``: one ``ALLREDUCE`` per layer ``l`` over its block of the region
        (:meth:`grad_blocks`: ``dW_l, db_l``; one per range if a layer's were not adjacent),
        right after the last instruction that writes any of its lines (so the all-reduce of
        the last layer can run while the backward pass of the earlier ones continues; compile
        with ``split_grads=True`` so that it owns no bank they touch, see
        :meth:`allreduce_overlap`). Only the ``ALLREDUCE`` last in program order (layer 0's,
        after every backward ``MATMUL``, so it sees all the run's flags) has ``poison=1``; the
        two-pass ``OPT`` tests the whole region. Needs ``micro_batches = 1`` (with a ``LOOP``
        the gradients accumulate until its last iteration: ``ValueError``; use the single
        ``ALLREDUCE``). Each block has its own segments (``seg``, default
        :func:`allreduce_seg_lines` of the block), so with more than 2 ranks an element's sum
        may start at another rank than in the single all-reduce and round differently (with 2
        ranks, and FP32 links, the sums are the same bits: addition is commutative).

        Parameters
        ----------
        comp : int
            Link compression (:class:`hdl.multi.config.CollComp`): 0 FP32 words, 1 BFP groups,
            2 top-k with error feedback (the residual and message buffer placed by
            :meth:`topk_regions`; with ``per_layer`` one residual per block, one shared
            message buffer).
        width : int
            BFP mantissa width (``comp = 1``; one of the engine's ``bfp.widths``).
        timeout : int
            Cycles without link progress before ``ERR_LINK`` (1..65535).
        rounding : int
            How the links' converters round (``comp = 1``;
            :class:`hdl.bfp.converter.Rounding`: 0 nearest even, 1 stochastic, 2 truncation).
        seg : int or None
            Lines per segment (of every ``ALLREDUCE``); ``None``: :func:`allreduce_seg_lines`
            of each one's lines (``ceil(lines / ranks)``, rounded up to whole BFP groups with
            ``comp = 1``).
        per_layer : bool
            One ``ALLREDUCE`` per layer (above) instead of one before the ``OPT``.

        Raises ``ValueError`` for a config with ``ranks < 2``, a step compiled with a one-pass
        ``OPT`` (compile with ``one_pass=False``: the two-pass ``OPT`` tests the all-reduced
        gradients, so a poisoned or non-finite sum skips on every core; a one-pass ``OPT``
        would decide from its own core's flags only), ``per_layer`` with ``micro_batches > 1``,
        a program longer than ``prog_depth``, or fields the program check rejects. A BFP
        gradient block need not be whole groups: the engine pads each segment on the link."""
        cfg = self.config
        S = cfg.size
        if cfg.ranks < 2:
            raise ValueError(f"dataparallel_program needs a config with ranks >= 2 (the cores "
                             f"of the ring), not ranks = {cfg.ranks}")
        pcs = [pc for pc, w in enumerate(self.program) if decode(w)[0] == Op.OPT]
        if len(pcs) != 1:      # the compiler emits exactly one OPT
            raise AssertionError(f"expected one OPT in the program, found {len(pcs)}")
        pc = pcs[0]
        if decode(self.program[pc])[1]["one_pass"]:
            raise ValueError("dataparallel_program needs the step compiled with "
                             "one_pass=False (its OPT must test the all-reduced gradients)")
        G = cfg.collective.bfp.group_size if comp == 1 else None
        tk = self.topk_regions(per_layer) if comp == 2 else {}
        a_grads = self.regions["grads"][0]

        def allreduce(line, lines, poison):
            if comp == 2:
                # a block's residual sits at the same offset in the residual region as the
                # block in the gradient region; the blocks share the message buffer (the
                # engine runs one ALLREDUCE at a time)
                return encode(Op.ALLREDUCE, a=line, lines=lines, timeout=timeout, comp=2,
                              poison=poison, b=tk["b"] + line - a_grads, g=tk["g"],
                              glines=tk["glines"])
            sg = seg if seg is not None else allreduce_seg_lines(lines, cfg.ranks, S, G)
            return encode(Op.ALLREDUCE, a=line, lines=lines, seg=sg, timeout=timeout,
                          comp=comp, width=width, poison=poison,
                          rounding=rounding if comp == 1 else 0)

        if not per_layer:
            line, lines = self.regions["grads"]
            prog = self.program[:pc] + [allreduce(line, lines, 1)] + self.program[pc:]
            what = f"grads: {lines} lines of {S} words"
        else:
            if self._b.k != 1:
                raise ValueError(f"per_layer needs micro_batches = 1, not {self._b.k}: the "
                                 f"LOOP accumulates the gradients until its last iteration "
                                 f"(use per_layer=False: one ALLREDUCE after the ENDLOOP)")
            blocks = self.grad_blocks()
            after = {l: self._last_write(bl, pc) for l, bl in enumerate(blocks)}
            order = sorted(after, key=lambda l: (after[l], -l))
            ins = {}
            for l in order:
                for s, n in blocks[l]:
                    ins.setdefault(after[l], []).append([s, n, 0])
            ins[after[order[-1]]][-1][2] = 1         # poison: the last ALLREDUCE
            prog = []
            for i, w in enumerate(self.program):
                prog.append(w)
                prog += [allreduce(*x) for x in ins.get(i, [])]
            what = ("layer blocks " + ", ".join(f"{n} lines" for bl in blocks for _, n in bl)
                    + f" of {S} words")
        if len(prog) > cfg.prog_depth:
            raise ValueError(f"dataparallel_program: {len(prog)} instructions exceed the "
                             f"program memory (CoreConfig.prog_depth = {cfg.prog_depth})")
        st, bad = check_program_for(prog, cfg)
        if st != Status.OK:
            raise ValueError(f"dataparallel_program: {STATUS_NAMES[st]} at pc {bad}: "
                             f"{disassemble(prog[bad])} ({what}; see "
                             f"hdl.core.isa.check_allreduce)")
        return prog

    def topk_regions(self, per_layer: bool = False) -> dict:
        """Where a top-k ``ALLREDUCE`` of the gradient region keeps its residual and gathers
        the messages: ``dict(b=<first line>, g=<first line>, glines=<lines>)``. With
        ``per_layer`` (one top-k ``ALLREDUCE`` per block of :meth:`grad_blocks`) the residual
        region mirrors the gradient region (a block's residual at ``b`` plus the block's
        offset) and the message buffer holds the largest block's messages. Both go in
        lines no buffer of the step ever uses (the residual lives across steps), at or after
        the gradient region's first line, each in banks that neither the gradients nor the
        other touch (the three ranges are read and written by one instruction), within the
        engine's 65,536 words from the gradients' first line; banks that hold no buffer of
        the step first (an instruction of the backward pass sharing a bank with them would
        wait for the whole all-reduce). ``ValueError`` when the
        scratchpad has no such place or the config has no top-k engine."""
        cfg = self.config
        S, D, L = cfg.size, cfg.bank_depth, cfg.lines
        coll = cfg.collective
        if coll is None or coll.topk is None:
            raise ValueError("top-k needs a core with a top-k collective engine (ranks >= 2)")
        a, lines = self.regions["grads"]
        sizes = [n for bl in self.grad_blocks() for _, n in bl] if per_layer else [lines]
        glines = max(-(-coll.ranks * coll.topk.message_words(n * S) // S) for n in sizes)
        used = sorted((self.place[n], self.place[n] + buf.lines)
                      for n, buf in self._b.bufs.items())
        free, at = [], 0
        for lo, hi in used:
            if lo > at:
                free.append((at, lo))
            at = max(at, hi)
        if at < L:
            free.append((at, L))
        taken = set(range(a // D, (a + lines - 1) // D + 1))
        reach = a + coll.depth // S                    # one past the last line it reaches
        # banks holding any buffer of the step: the ALLREDUCE owns its ranges' banks until it
        # ends, so a residual or message buffer there stalls every later instruction of the
        # backward pass that touches one of that bank's buffers (a per-layer all-reduce would
        # hide nothing); take free lines of such a bank only when no empty bank has room
        busy = {k for lo, hi in used for k in range(lo // D, (hi - 1) // D + 1)}

        def take(n):
            for avoid in (busy, set()):
                for lo, hi in free:
                    for st in sorted({max(lo, a)} | {k * D for k in range(L // D)
                                                     if max(lo, a) < k * D < hi}):
                        banks = set(range(st // D, (st + n - 1) // D + 1))
                        if st + n <= min(hi, reach) and not banks & (taken | avoid):
                            taken.update(banks)
                            return st
            raise ValueError(f"top-k all-reduce: no {n} free lines in banks of their own "
                             f"after line {a} within the engine's reach (the residual needs "
                             f"{lines} lines, the message buffer {glines})")
        b = take(lines)
        return {"b": b, "g": take(glines), "glines": glines}

    def _last_write(self, ranges, end: int) -> int:
        """The last pc before ``end`` that writes any line of ``ranges`` (``[(line, lines)]``);
        checks that no instruction between it and ``end`` reads them."""
        S = self.config.size
        last = None
        for i, w in enumerate(self.program[:end]):
            op, f = decode(w)
            for r in operand_ranges(op, f, S):
                if "w" in r.kind and any(r.start < s + n and s < r.start + r.lines
                                         for s, n in ranges):
                    last = i
        if last is None:      # every layer block is written by BWD_WEIGHT / REDUCE
            raise AssertionError(f"no instruction writes the gradient lines {ranges}")
        for i, w in enumerate(self.program[last + 1:end], last + 1):
            op, f = decode(w)
            for r in operand_ranges(op, f, S):
                if any(r.start < s + n and s < r.start + r.lines for s, n in ranges):
                    raise AssertionError(f"pc {i} reads the gradient lines {ranges} after "
                                         f"their last write (pc {last})")
        return last

    def allreduce_overlap(self, program: list[int]) -> list[dict]:
        """What each ``ALLREDUCE`` of ``program`` (e.g. :meth:`dataparallel_program`) can run
        beside, under the sequencer's in-order issue and bank scoreboard (docs/core.md): per
        ``ALLREDUCE``, in program order, ``pc``, ``a``, ``lines``, ``poison``, ``banks`` (the
        banks it owns while it runs), ``wait`` (the pc of the first later instruction that
        cannot issue until it ends: one touching an owned bank, the next ``ALLREDUCE`` (one
        collective engine), or ``HALT``; every later one waits behind it), ``why``
        (``"bank"``, ``"unit"``, ``"halt"``), and ``hidden`` (the pcs in between, which issue
        while it runs). Static: it does not say how long either side takes."""
        cfg = self.config
        S, D = cfg.size, cfg.bank_depth
        words = list(program)
        dec = [decode(w) for w in words]
        out = []
        for pc, (op, f) in enumerate(dec):
            if op != Op.ALLREDUCE:
                continue
            banks = set()
            for r in operand_ranges(op, f, S):
                banks |= r.banks(D)
            wait, why = len(words), "halt"
            for j in range(pc + 1, len(words)):
                op2, f2 = dec[j]
                if op2 == Op.HALT:
                    wait, why = j, "halt"
                    break
                if op2 == Op.ALLREDUCE:
                    wait, why = j, "unit"
                    break
                if any(r.banks(D) & banks for r in operand_ranges(op2, f2, S)):
                    wait, why = j, "bank"
                    break
            out.append({"pc": pc, "a": f["a"], "lines": f["lines"], "poison": f["poison"],
                        "banks": sorted(banks), "wait": wait, "why": why,
                        "hidden": list(range(pc + 1, wait))})
        return out

    def stage_programs(self) -> dict:
        """A pipeline stage's step as programs, for a host that moves activations and
        gradients between stages (:mod:`sim.host.pipeline`); each ends in ``HALT``, same
        words and addresses as :attr:`program`:

        * ``forward``: the forward pass (and ``SOFTMAX_XENT`` with ``head``) of one
          micro-batch;
        * ``backward``: the backward pass of the first micro-batch of a step (``BWD_WEIGHT`` /
          ``REDUCE`` overwrite the gradients: ``AFTER_FIRST`` outside a loop);
        * ``backward_acc``: the same with ``acc = ON`` (later micro-batches add into them,
          what ``AFTER_FIRST`` does in iterations ``> 0`` of the one-core loop);
        * ``optimizer``: the ``OPT`` (compile with ``one_pass=False``, see
          :meth:`split_programs`).

        Needs ``micro_batches = 1`` (one micro-batch per program)."""
        if self._b.k != 1:
            raise ValueError(f"stage_programs needs micro_batches = 1, not {self._b.k}")
        back, opt = self.split_programs()
        sp, halt = self._b.split, encode(Op.HALT)

        def acc_on(w):
            op, f = decode(w)
            if op in (Op.MATMUL, Op.REDUCE) and f["acc"] == Acc.AFTER_FIRST:
                return encode(op, **{**f, "acc": Acc.ON})
            return w
        return {"forward": back[:sp] + [halt], "backward": back[sp:],
                "backward_acc": [acc_on(w) for w in back[sp:]], "optimizer": opt}

    def stage_io(self) -> dict:
        """Where a pipeline stage's transfers are (global lines; see :meth:`stage_programs`):
        ``input`` (the ``x`` matrix, ``m x d_0``), ``output`` (the last layer's ``m x d_L``
        output: the activation sent on; the gradient that comes back is written here before
        the backward pass; with ``head`` the logits, turned into their gradient), ``dx`` (the
        input's gradient, ``m x d_0``, with ``input_grad``; else ``None``) as ``(line, rows,
        cols)``; ``stash``: ``[(line, lines)]`` of every buffer the backward pass reads that
        the forward pass wrote or the host loaded (the input and the activations live
        across the split: what a stage keeps per micro-batch in flight)."""
        b = self._b
        sp, d, m = b.split, b.d, b.m
        stash = [(self.place["data"], b.x_lines)]
        for n, buf in b.bufs.items():
            if not buf.persistent and not buf.alias and buf.lo < sp <= buf.hi:
                stash.append((self.place[n], buf.lines))
        return {"input": (self.place["data"], m, d[0]),
                "output": (self.place["z"], m, d[-1]),
                "dx": (self.place[b.dx[0]], m, d[0]) if b.dx is not None else None,
                "stash": sorted(stash)}

    def asm(self) -> str:
        """The program as assembly (:func:`hdl.core.isa.assemble_program` reads it back)."""
        head = [f"# {self.desc.describe()}",
                f"# CoreConfig S={self.config.size} banks={self.config.banks} "
                f"bank_depth={self.config.bank_depth}"]
        for n, t in self.plan.items():
            head.append(f"#   {n:<10} {t.kind:<16} bank {t.bank:>2} line 0x{t.line:04x} "
                        f"{t.lines:>5} lines" + (f" x{t.count} stride {t.stride}"
                                                 if t.count > 1 else ""))
        body = [f"{disassemble(w):<100} # {n}" if n else disassemble(w)
                for w, n in zip(self.program, self.notes)]
        return "\n".join(head + body) + "\n"

    def _make_plan(self) -> dict:
        b, S, D = self._b, self.config.size, self.config.bank_depth
        d, L, k = b.d, b.L, b.k
        plan = {}

        def add(name, kind, buf, off, lines, rows, cols, count=1, stride=0, note=""):
            line = self.place[buf] + off
            bf = b.bufs[buf]
            live = None if bf.persistent else (bf.lo, bf.hi)
            plan[name] = Tensor(name, kind, line // D, line, lines, rows, cols, count, stride,
                                buf, live, note)

        shapes = [(d[l] * _cdiv(d[l + 1], S), _cdiv(d[l + 1], S)) for l in range(L)]
        for prefix, kind, buf in [("", "weights", "params"), ("d", "gradients", "grads")] + \
                [(f"{s}.", "optimizer_state", s) for s in self.desc.states]:
            for l, (wl, bl) in enumerate(shapes):
                add(f"{prefix}W{l}", kind, buf, b.off_W[l], wl, d[l], d[l + 1])
                add(f"{prefix}b{l}", kind, buf, b.off_b[l], bl, 1, d[l + 1])
        for s in ("m", "v"):
            if s not in self.desc.states:
                add(f"{s}.unused", "optimizer_state", s, 0, b.P, 1, b.P * S,
                    note="OPT operand the update rule neither keeps nor writes; dead lines")
        stride = b.R if k > 1 else 0
        for name, lines, rows, cols in (("x", b.x_lines, b.m, d[0]), ("labels", b.nr, 1, b.m),
                                        ("loss", b.nr, 1, b.m)):
            add(name, "data", *b.rec[name], lines, rows, cols, k, stride)
        for name, bf in b.bufs.items():
            if not bf.persistent and not bf.alias:
                add(name, "activations", name, 0, bf.lines, bf.rows, bf.cols)
        return plan

    def report(self) -> dict:
        """Memory words per kind (``lines * S``), ``total`` (each used line once), used lines
        per bank and some program facts."""
        b, c = self._b, self.config
        S, D, NB = c.size, c.bank_depth, c.banks
        per_bank, per_kind = _used_lines(b.bufs, self.place, D, NB)
        peak = max((sum(x.lines for x in b.bufs.values()
                        if not x.persistent and not x.alias and x.lo <= i <= x.hi)
                    for i in range(len(b.ins))), default=0)
        out = {k: per_kind[k] * S for k in KINDS}
        out["total"] = sum(per_bank) * S
        out.update({
            "lines_per_bank": per_bank,
            "bank_depth": D, "banks": NB, "S": S,
            "scratchpad_words": c.words,
            "activation_peak_live_words": peak * S,
            "parameters": sum(d0 * d1 + d1 for d0, d1 in zip(b.d, b.d[1:])),
            "parameter_words_padded": b.P * S,
            "instructions": len(self.program),
            "recompute_passes": sum(1 for n in self.notes if n.startswith("recompute layer")),
            "overlap_pairs": len(self._overlap),
            "overlap_pairs_disjoint_banks": self._overlap_disjoint,
            "inplace_relu_grad": self.inplace_relu_grad,
        })
        return out

    # -- host data layout helpers -------------------------------------------------------------
    def _check_params(self, weights, biases, what="weights"):
        d, L = self._b.d, self._b.L
        if weights is None or biases is None or len(weights) != L or len(biases) != L:
            raise ValueError(f"{what}: need {L} weight matrices and {L} bias vectors for layers "
                             f"{d}, not {None if weights is None else len(weights)} and "
                             f"{None if biases is None else len(biases)}")
        Ws, bs = [], []
        for l in range(L):
            W, bb = np.asarray(weights[l]), np.asarray(biases[l])
            if W.shape != (d[l], d[l + 1]):
                raise ValueError(f"{what}: W{l} must have shape {(d[l], d[l + 1])}, not {W.shape}")
            if bb.shape != (d[l + 1],):
                raise ValueError(f"{what}: b{l} must have shape {(d[l + 1],)}, not {bb.shape}")
            Ws.append(W.astype(F32))
            bs.append(bb.astype(F32))
        return Ws, bs

    def _region_image(self, Ws=None, bs=None) -> np.ndarray:
        b, S = self._b, self.config.size
        img = np.zeros((b.P, S), np.uint32)
        if Ws is not None:
            for l in range(b.L):
                set_matrix(img, b.off_W[l], Ws[l], S)
                set_vector(img, b.off_b[l], bs[l], S)
        return img

    def _region_decode(self, img, key=""):
        b, S = self._b, self.config.size
        img = np.asarray(img, np.uint32)
        if img.shape != (b.P, S):
            raise ValueError(f"result {key!r} must have shape {(b.P, S)}, not {img.shape}")
        Ws = [get_matrix(img, b.off_W[l], b.d[l], b.d[l + 1], S).view(F32) for l in range(b.L)]
        bs = [get_vector(img, b.off_b[l], b.d[l + 1], S).view(F32) for l in range(b.L)]
        return Ws, bs

    # -- host actions -------------------------------------------------------------------------
    def init_actions(self, weights, biases, opt_state=None) -> list:
        """Write the parameters (FP32), zero the gradient region (its padding lanes must stay
        finite zeros for OPT), write the optimizer state the update rule keeps (``opt_state``:
        ``{"m": {"W": [...], "b": [...]}, "v": {...}}`` as :func:`sim.model.reference.zeros_state`;
        ``None`` or a missing entry: zeros; an optional ``"scale_exp"`` sets the loss-scale
        exponent, default ``LossScale.init_exp``), and set every optimizer register (step 1)
        and clear its counters."""
        Ws, bs = self._check_params(weights, biases)
        acts = [("write", self.regions["params"][0], self._region_image(Ws, bs)),
                ("write", self.regions["grads"][0], self._region_image())]
        st = opt_state or {}
        if not isinstance(st, dict):
            raise TypeError(f"opt_state must be a dict (or None), not {type(st).__name__}")
        for s in self.desc.states:
            if st.get(s) is not None:
                e = st[s]
                sW, sb = self._check_params(e["W"], e["b"], f"opt_state[{s!r}]")
                img = self._region_image(sW, sb)
            else:
                img = self._region_image()
            acts.append(("write", self.regions[s][0], img))
        scale = self.desc.loss_scale
        k0 = st.get("scale_exp", scale.init_exp if scale is not None else 0)
        regs = self._registers(1, k0)
        acts += [("setreg", r, reg_word(v)) for r, v in sorted(regs.items())]
        acts.append(("setreg", Reg.CLEAR, 0))
        return acts

    def _registers(self, t, scale_exp):
        desc = self.desc
        regs = optimizer_registers(desc.optimizer, t, self._b.P * self.config.size,
                                   desc.loss_scale, desc.clip, first=True)
        regs.pop(Reg.SCALE_EXP)
        if scale_exp is not None:
            check_int("step", "scale_exp", scale_exp, lo=0, hi=SCALE_EXP_MAX)
            regs[Reg.SCALE_EXP] = scale_exp
        return regs

    def precision_table(self, precision=None) -> dict:
        """``{(layer, mode): (width_a, width_b, rounding)}`` for every layer and pass.

        ``precision``: ``None`` (8/8 or the widest width, nearest), one width ``w`` (``w/w``
        nearest), a tuple ``(wa, wb, rounding)`` for all, or a dict ``{(layer, mode): w |
        (wa, wb) | (wa, wb, rounding)}`` (mode 0/1/2 or "FWD"/"BWD_DATA"/"BWD_WEIGHT"; missing
        entries get the default)."""
        cfg = self.config
        widths = cfg.array.widths
        w0 = 8 if 8 in widths else max(widths)
        default = (w0, w0, 0)

        def norm(spec, where):
            if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
                spec = (int(spec), int(spec), 0)
            if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3):
                raise ValueError(f"precision{where} must be a width, (wa, wb) or "
                                 f"(wa, wb, rounding), not {spec!r}")
            spec = tuple(int(v) for v in spec) + ((0,) if len(spec) == 2 else ())
            for name, v in zip(("width_a", "width_b"), spec[:2]):
                if v not in widths:
                    raise ValueError(f"precision{where} {name} must be one of {widths}, not {v}")
            if spec[2] not in (0, 1, 2):
                raise ValueError(f"precision{where} rounding must be 0 (nearest), 1 "
                                 f"(stochastic) or 2 (truncate), not {spec[2]}")
            return spec

        table = {(l, mode): default for l in range(self._b.L) for mode in MODES}
        if precision is None:
            return table
        if not isinstance(precision, dict):
            spec = norm(precision, "")
            return {key: spec for key in table}
        for key, spec in precision.items():
            if not isinstance(key, tuple) or len(key) != 2:
                raise ValueError(f"precision keys must be (layer, mode), not {key!r}")
            layer, mode = key
            mode = _MODE_KEYS.get(mode, mode)
            if (layer, mode) not in table:
                raise ValueError(f"precision key {key!r}: layer must be in 0..{self._b.L - 1} "
                                 f"and mode in {MODES} or {tuple(_MODE_KEYS)[:3]}")
            table[(layer, mode)] = norm(spec, f"[{key!r}]")
        return table

    def precision_by_tensor(self, *, weights=8, activations=8, gradients=8,
                            rounding: int = 0) -> dict:
        """A precision dict for :meth:`precision_table` / :meth:`step_actions` from widths per
        tensor kind: each of ``weights``, ``activations`` (the layer's input ``X``) and
        ``gradients`` (the layer's output gradient ``dY``) is one width or a sequence of one
        width per layer. The operands of each pass (:data:`OPERAND_TENSORS`): ``FWD`` ``X`` /
        ``W``, ``BWD_DATA`` ``dY`` / ``W``, ``BWD_WEIGHT`` ``X`` / ``dY`` (``width_a`` /
        ``width_b``)."""
        L = self._b.L
        kinds = {"weights": weights, "activations": activations, "gradients": gradients}
        per_layer = {}
        for name, spec in kinds.items():
            if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
                per_layer[name] = [int(spec)] * L
            elif isinstance(spec, (list, tuple)) and len(spec) == L:
                per_layer[name] = [int(v) for v in spec]
            else:
                raise ValueError(f"{name} must be a width or {L} widths (one per layer), "
                                 f"not {spec!r}")
        table = {(l, mode): tuple(per_layer[k][l] for k in OPERAND_TENSORS[mode]) + (rounding,)
                 for l in range(L) for mode in MODES}
        return self.precision_table(table)

    def _batch(self, x, y):
        b, B, k = self._b, self.desc.batch, self._b.k
        def cat(v, ndim):     # a list of micro-batches, or one array (nested lists too)
            if isinstance(v, (list, tuple)) and v and all(np.ndim(e) == ndim for e in v):
                return np.concatenate([np.asarray(e) for e in v])
            return np.asarray(v)

        x, y = cat(x, 2), cat(y, 1)
        if x.shape != (B, b.d[0]):
            raise ValueError(f"x must have shape {(B, b.d[0])} (batch x inputs), not {x.shape}")
        if y.shape != (B,):
            raise ValueError(f"y must have shape {(B,)} (one label per row), not {y.shape}")
        if not np.issubdtype(y.dtype, np.integer):
            raise TypeError(f"y must hold integer labels, not {y.dtype}")
        C = b.d[-1]
        if y.size and (y.min() < 0 or y.max() >= C):
            raise ValueError(f"labels must be in 0..{C - 1}, not {y.min()}..{y.max()}")
        return x.astype(F32), y.astype(np.uint32)

    def data_writes(self, x, y) -> list:
        """The batch as ``("write", line, words)`` actions: ``x_j`` and ``labels_j`` of every
        micro-batch (the loss lines are written as zeros)."""
        x, y = self._batch(x, y)
        b, S = self._b, self.config.size
        imgs = {n: np.zeros((b.bufs[n].lines, S), np.uint32)
                for n in {b.rec["x"][0], b.rec["labels"][0]}}
        stride = b.R if b.k > 1 else 0
        for j in range(b.k):
            rows = slice(j * b.m, (j + 1) * b.m)
            buf, off = b.rec["x"]
            set_matrix(imgs[buf], j * stride + off, x[rows], S)
            buf, off = b.rec["labels"]
            set_vector(imgs[buf], j * stride + off, y[rows], S)
        return [("write", self.place[n], img) for n, img in sorted(imgs.items())]

    def step_actions(self, x, y, t: int, *, precision=None, scale_exp=None,
                     load_program: bool = True, part: str = "step",
                     program: list | None = None) -> list:
        """One training step: write the batch (``x``: ``B x d_0`` float, ``y``: ``B`` int
        labels; or lists of ``k`` micro-batches), set the precision table
        (:meth:`precision_table`), the optimizer registers of step ``t``
        (:func:`sim.host.optim.optimizer_registers`: rule, ``N``, loss-scale and clipping bits;
        the loss-scale exponent only when ``scale_exp`` is given, as writing it restarts the
        growth count), load the program (unless ``load_program`` is false: the program memory
        keeps the one loaded before, and only the table and registers change), run it, read
        the per-row losses (keys ``loss0`` .. ``loss{k-1}``) and the optimizer status. Decode
        with :meth:`decode_step`. ``part="backward"`` loads and runs only the backward
        program of :meth:`split_programs` (the optimizer status read is then that of the
        previous ``OPT``); :meth:`optimizer_actions` runs the rest. ``program`` (with
        ``part="step"``) loads those words instead of :attr:`program`, e.g. the
        :meth:`dataparallel_program` (run the cores together in
        :class:`sim.model.multicore.MultiCoreModel`)."""
        if part not in ("step", "backward"):
            raise ValueError(f"part must be 'step' or 'backward', not {part!r}")
        if program is not None and part != "step":
            raise ValueError("program= replaces the whole step's program: use part='step'")
        b = self._b
        acts = self.data_writes(x, y) + self.setup_actions(t, precision=precision,
                                                           scale_exp=scale_exp)
        if load_program:
            if part == "backward":
                acts.append(("program", self.split_programs()[0]))
            else:
                acts.append(("program", list(self.program if program is None else program)))
        acts.append(("run",))
        loss0 = self.plan["loss"].line
        acts += [("read", f"loss{j}", loss0 + j * b.R, b.nr) for j in range(b.k)]
        acts.append(("status",))
        return acts

    def setup_actions(self, t: int, *, precision=None, scale_exp=None) -> list:
        """The precision table (:meth:`precision_table`) and the optimizer registers of step
        ``t`` (see :meth:`step_actions`, which writes them after the batch)."""
        acts = [("prec", l, mode, wa, wb, r)
                for (l, mode), (wa, wb, r) in sorted(self.precision_table(precision).items())]
        acts += [("setreg", r, reg_word(v)) for r, v in sorted(self._registers(t, scale_exp)
                                                                 .items())]
        return acts

    def optimizer_actions(self) -> list:
        """Load and run the optimizer program of :meth:`split_programs` (after
        ``step_actions(..., part="backward")`` set the registers) and read the optimizer
        status (key ``status``)."""
        return [("program", self.split_programs()[1]), ("run",), ("status",)]

    def read_actions(self) -> list:
        """Read the parameters, the gradient region and the kept optimizer state (keys
        ``params``, ``grads``, ``m``, ``v``)."""
        keys = ("params", "grads") + self.desc.states
        return [("read", key, self.regions[key][0], self.regions[key][1]) for key in keys]

    # -- decoding ----------------------------------------------------------------------------
    @staticmethod
    def _last(v):
        return v[-1] if isinstance(v, list) else v

    def decode_loss(self, results) -> np.ndarray:
        """Per-row losses (``B`` float32) from :meth:`step_actions` results."""
        b, S = self._b, self.config.size
        parts = [get_vector(np.asarray(results[f"loss{j}"], np.uint32), 0, b.m, S)
                 for j in range(b.k)]
        return np.concatenate(parts).view(F32)

    def decode_step(self, results) -> dict:
        """``dict(run=(status, pc), ok, losses, loss (mean, float64 of the FP32 values),
        status (optimizer), skipped, scale_exp)``."""
        run = tuple(self._last(results["run"]))
        st = dict(self._last(results["status"]))
        losses = self.decode_loss(results)
        return {"run": run, "ok": run[0] == Status.OK, "losses": losses,
                "loss": float(np.mean(losses.astype(np.float64))), "status": st,
                "skipped": bool(st["last_skipped"]), "scale_exp": int(st["scale_exp"])}

    def decode_params(self, results) -> tuple[list, list]:
        """``(weights, biases)`` float32 from :meth:`read_actions` results."""
        return self._region_decode(results["params"], "params")

    def decode_grads(self, results, scale_exp: int = 0) -> dict:
        """``{"W": [...], "b": [...]}``: the gradient region times ``2**-scale_exp`` (the loss
        scale of the step; an exact power-of-two multiply)."""
        Ws, bs = self._region_decode(results["grads"], "grads")
        f = F32(2.0 ** -scale_exp)
        with np.errstate(all="ignore"):
            return {"W": [(W * f).astype(F32) for W in Ws], "b": [(v * f).astype(F32) for v in bs]}

    def decode_opt_state(self, results) -> dict:
        """``{"m": {"W", "b"}, "v": {...}}`` for the state the update rule keeps."""
        out = {}
        for s in self.desc.states:
            Ws, bs = self._region_decode(results[s], s)
            out[s] = {"W": Ws, "b": bs}
        return out
