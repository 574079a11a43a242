"""Data-parallel training across ``N`` training cores, in the golden model.

``N`` :class:`sim.model.core.CoreModel` cores hold the same parameters. A step of global batch
``B`` (``B % N == 0``):

1. rank ``r`` takes rows ``r*B/N .. (r+1)*B/N - 1`` and runs the **backward program** of the
   step (:meth:`sim.host.compiler.Compiled.split_programs`: forward, softmax cross-entropy,
   backward, no ``OPT``). Each core's step is compiled with ``batch = B/N`` and
   ``mean_rows = B`` (:class:`sim.host.compiler.MLP`), so the softmax's gradient scale is
   ``FP32(1/B)`` -- the single core's -- and each core's gradient region holds
   ``(1/B) * sum over its rows`` (times the loss scale);
2. the gradient regions (``P * S`` words, padding lanes included: zeros) are **all-reduced**:
   the sum of the ``N`` regions is the global-batch mean with no extra multiply (this is what
   the hardware would do: the collective engine runs on the gradient lines of every core's
   scratchpad, nothing else changes). Link modes: plain FP32 and BFP groups use
   :func:`sim.model.collective.ring_allreduce` (the engine's segments, schedule and FP32
   additions, with a :class:`hdl.multi.config.CollectiveConfig` of ``ranks = N``, and the
   segments of the compiled ``ALLREDUCE``: :func:`sim.host.compiler.allreduce_seg_lines` lines
   of ``S`` words); top-k uses :func:`sim.model.compress.topk_allreduce` (each rank's
   error-feedback residual);
3. every core runs the **optimizer program** (the same ``OPT``; two-pass, see below) and so
   holds bit-identical parameters and state.

Skips. A one-pass ``OPT`` decides its skip from the flags of its own run, which the split no
longer shares with the backward pass, so the per-core step is compiled with
``one_pass=False``: the two-pass ``OPT`` tests the all-reduced gradients itself, and a NaN or
infinity in any core's gradients reaches every core through the FP32 sum (every core skips).
What a single core also skips on -- a converter's NaN / Inf flag in a matmul pass (the
converter sends such a group as zeros), or a link that flagged a non-finite group -- is
gathered by the host: when any core's
backward run raised a flag, or any link flagged a group, the host writes the canonical NaN
into word 0 of every core's gradient region before the ``OPT``, so every core skips (and
dynamic loss scaling backs off) as one core would.

Only the order in which the batch's per-row gradient contributions are summed differs from
one core running the global batch (rows of one shard are summed inside a core, shards by the
ring): with shards of whole batch tiles (``B/N`` a multiple of ``S``), each ``BWD_WEIGHT``
tile's FP32 value and every BFP group are the same on both sides (tests/test_dataparallel.py).

Engine mode (``engine=True``, links ``"none"`` and ``"bfp"``): no host between the passes.
Every core runs one program, :meth:`sim.host.compiler.Compiled.dataparallel_program` (the step
with ``ALLREDUCE ... poison=1`` before its two-pass ``OPT``), on cores built with ``ranks = N``
(:class:`sim.model.multicore.MultiCoreModel`): the collective engine all-reduces the gradient
lines, and a core whose run raised a flag contributes the canonical NaN as word 0. For finite
steps this equals the host-mediated mode bit for bit (same segments, sum order and BFP relay;
tests/test_multicore_model.py); with FP32 links a flag on any core makes every core skip, as
the host's poisoning does, and with BFP links too: the poisoned group (like any non-finite
gradient group) crosses as a NaN group, canonical NaNs on every core, so every core skips;
parameters and optimizer state equal the host-mediated mode's, the gradients differ in that
group's other words (docs/multicore.md, "ALLREDUCE in the golden model").

Per-layer all-reduce (``per_layer=True``, any links, ``micro_batches = 1``; top-k keeps one
residual per block):
the gradient region is all-reduced as one ring all-reduce per layer block (``dW_l, db_l``,
:meth:`sim.host.compiler.Compiled.grad_blocks`), each with its own segments
(:func:`sim.host.compiler.allreduce_seg_lines` of the block); in engine mode the program is
``dataparallel_program(per_layer=True)`` (one ``ALLREDUCE`` per layer right after the layer's
last gradient write, poison on the last one), in host mode the host does the same
all-reduces, so the two modes still agree bit for bit. Against the single all-reduce only the
rank at which each element's sum starts can change (its segment index within the block): the
same bits with 2 ranks (FP32 addition is commutative), within the summation-order bound with
more. The step is compiled with ``split_grads`` (the last layer's block in a bank of its own,
so that in hardware its all-reduce runs beside the rest of the backward pass) when it fits.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from hdl.core.config import CoreConfig
from hdl.multi.config import CollComp, CollectiveConfig
from sim.model.collective import link_flits, ring_allreduce
from sim.model.compress import TopK, TopKState, topk_allreduce
from sim.model.core import CoreModel
from sim.model.bfp import LFSR, ROUND_NEAREST, ROUNDING_MODES
from sim.model.multicore import MultiCoreModel

from .compiler import MLP, CompileError, allreduce_seg_lines, compile_mlp

__all__ = ["DataParallel", "COMPRESSIONS", "NAN_BITS"]

#: Link compression modes: ``"none"`` (FP32 words), ``"bfp"`` (BFP groups, ``width``),
#: ``"topk"`` (:class:`sim.model.compress.TopK`).
COMPRESSIONS = ("none", "bfp", "topk")
#: The canonical NaN the host writes to make every core's ``OPT`` skip.
NAN_BITS = 0x7FC00000


class DataParallel:
    """``ranks`` golden-model cores training ``desc`` (global batch ``desc.batch``)
    data-parallel.

    Parameters
    ----------
    desc : MLP
        The single-core description of the step: ``batch`` is the global batch ``B``
        (``B % ranks == 0``), ``micro_batches`` per core's shard.
    config : CoreConfig
    ranks : int
        Cores, 2..16.
    compression : str
        ``"none"``, ``"bfp"`` or ``"topk"`` (:data:`COMPRESSIONS`).
    width : int
        BFP mantissa width (``"bfp"``), one of the collective's ``bfp.widths``.
    rounding : int
        How the links' BFP converters round (``"bfp"``; ``sim.model.bfp.ROUND_*``: 0 nearest
        even, 1 stochastic with each rank's converter LFSR, 2 truncation). Each rank's LFSR
        (:attr:`lfsr`, or the engine's) steps for every group it sends from one step to the
        next, as on the hardware.
    topk : TopK or None
        Segment and ``k`` (``"topk"``; default :class:`TopK` ``()``).
    engine : bool
        Run the step as one program per core with the ``ALLREDUCE`` inside
        (:meth:`sim.host.compiler.Compiled.dataparallel_program`) on a
        :class:`sim.model.multicore.MultiCoreModel` of cores built with ``ranks`` (``config``
        with ``ranks`` replaced); with ``"topk"`` the engine's top-k all-reduce
        (``topk`` must be the core's, :class:`TopK` ``()``), its residual and message buffer
        in free banks (:attr:`topk_regions`). Default: the host all-reduces between a
        backward and an optimizer program.
    timeout : int
        The ``ALLREDUCE``'s ``timeout`` field (engine mode).
    per_layer : bool
        All-reduce the gradients one layer block at a time (engine mode:
        ``dataparallel_program(per_layer=True)``; host mode: the same all-reduces by the host).
        ``micro_batches = 1``. With top-k each block has its own residual (and top-k segments
        start at each block's first word).
    split_grads : bool or None
        Compile with :func:`sim.host.compiler.compile_mlp` ``split_grads`` (the last layer's
        gradient block in a bank of its own; results are unchanged, only addresses move).
        ``None`` (default): when ``per_layer`` and the placement fits, else not
        (:attr:`split_grads` tells which).
    """

    def __init__(self, desc: MLP, config: CoreConfig | None = None, ranks: int = 2, *,
                 compression: str = "none", width: int = 8, topk: TopK | None = None,
                 engine: bool = False, timeout: int = 0xFFFF, per_layer: bool = False,
                 split_grads: bool | None = None, rounding: int = ROUND_NEAREST):
        if not isinstance(desc, MLP):
            raise TypeError(f"desc must be an MLP, not {type(desc).__name__}")
        config = CoreConfig() if config is None else config
        if isinstance(ranks, bool) or not isinstance(ranks, int) or not 2 <= ranks <= 16:
            raise ValueError(f"ranks must be an int in 2..16, not {ranks!r}")
        if desc.batch % (ranks * desc.micro_batches):
            raise ValueError(f"desc.batch ({desc.batch}) must be a multiple of ranks * "
                             f"micro_batches ({ranks} * {desc.micro_batches})")
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, not {compression!r}")
        if rounding not in ROUNDING_MODES or isinstance(rounding, bool):
            raise ValueError(f"rounding must be one of {ROUNDING_MODES}, not {rounding!r}")
        if rounding != ROUND_NEAREST and compression != "bfp":
            raise ValueError(f"rounding {rounding} needs compression 'bfp', not "
                             f"{compression!r}")
        if rounding != ROUND_NEAREST and per_layer and not engine:
            raise ValueError("per_layer with stochastic rounding or truncation needs "
                             "engine=True: each rank's LFSR sequence depends on the order of "
                             "the blocks' all-reduces, which only the program fixes")
        self.ranks, self.compression, self.width = ranks, compression, width
        self.rounding = rounding
        self.engine = bool(engine)
        self.per_layer = bool(per_layer)
        if per_layer and desc.micro_batches != 1:
            raise ValueError(f"per_layer needs micro_batches = 1, not {desc.micro_batches} "
                             f"(the loop accumulates the gradients until its last iteration)")
        self.local = desc.replace(batch=desc.batch // ranks, mean_rows=desc.batch,
                                  one_pass=False)
        if engine:
            config = dataclasses.replace(config, ranks=ranks)
        split = per_layer if split_grads is None else bool(split_grads)
        # BFP links: the gradient region in whole groups (zero padding lines at its end), so
        # no segment ends in a padded group (the engine would pad one; per-layer blocks are
        # not padded and may end in one)
        G0 = CollectiveConfig(ranks=max(2, ranks)).bfp.group_size
        align = max(1, G0 // config.size) if compression == "bfp" and not per_layer else 1
        try:
            self.compiled = compile_mlp(self.local, config, split_grads=split,
                                        param_align=align)
        except CompileError:
            if split_grads is not None or not split:
                raise
            self.compiled = compile_mlp(self.local, config, param_align=align)
        #: whether the step was compiled with ``split_grads``
        self.split_grads = self.compiled.split_grads
        self.config = config
        line, lines = self.compiled.regions["grads"]
        self._grads = (line, lines)
        S = config.size
        self.length = lines * S
        self.topk = None
        if compression == "topk":
            self.topk = TopK() if topk is None else topk
            if not isinstance(self.topk, TopK):
                raise TypeError(f"topk must be a TopK, not {type(self.topk).__name__}")
            engine_topk = dataclasses.replace(config, ranks=ranks).collective.topk
            if engine and self.topk != engine_topk:
                raise ValueError(f"engine=True uses the core's top-k engine ({engine_topk}), "
                                 f"not {self.topk}")
        self.coll = CollectiveConfig(ranks=ranks, depth=max(2, self.length,
                                                            self.topk.seg if self.topk else 2),
                                     topk=self.topk if engine else None)
        G = self.coll.bfp.group_size
        if compression == "bfp" and width not in self.coll.bfp.widths:
            raise ValueError(f"width must be one of {self.coll.bfp.widths}, not {width!r}")
        Gs = G if compression == "bfp" else None
        if per_layer:
            blocks = []
            for l, bl in enumerate(self.compiled.grad_blocks()):
                for s, n in bl:
                    blocks.append(((s - line) * S, n * S,
                                   S * allreduce_seg_lines(n, ranks, S, Gs)))
        else:
            blocks = [(0, self.length, S * allreduce_seg_lines(lines, ranks, S, Gs))]
        #: the ring all-reduces of a step: ``(first word in the region, words, words per
        #: segment)``, whole lines as the ALLREDUCE's ``a``, ``lines`` and ``seg``
        self.blocks = blocks
        #: words per segment of the single ring all-reduce (``None`` with ``per_layer``)
        self.seg = None if per_layer else blocks[0][2]
        if engine:
            comp = {"none": CollComp.NONE, "bfp": CollComp.BFP,
                    "topk": CollComp.TOPK}[compression]
            #: the one program every core runs (engine mode)
            self.program = self.compiled.dataparallel_program(comp=comp, width=width,
                                                              timeout=timeout,
                                                              per_layer=per_layer,
                                                              rounding=rounding)
            self.multi = MultiCoreModel(config)
            self.cores = self.multi.cores
        else:
            self.program = None
            self.multi = None
            self.cores = [CoreModel(config) for _ in range(ranks)]
        #: host mode: each rank's link converter LFSR (``sim.model.bfp.LFSR``), kept from step
        #: to step (engine mode: the :class:`MultiCoreModel`'s)
        self.lfsr = None if engine else [LFSR(self.coll.bfp) for _ in range(ranks)]
        if compression == "topk" and not engine:
            #: host mode, top-k: per block of :attr:`blocks`, each rank's residual
            self.states = [[TopKState(length, self.topk) for _ in range(ranks)]
                           for _, length, _ in self.blocks]
        #: engine mode, top-k: the ALLREDUCE's residual and buffer lines
        #: (:meth:`sim.host.compiler.Compiled.topk_regions`), else ``None``
        self.topk_regions = (self.compiled.topk_regions(per_layer)
                             if engine and compression == "topk" else None)
        #: link bits of every all-reduce so far (32-bit flits), and what plain FP32 links
        #: would have carried
        self.link_bits = 0
        self.plain_bits = 0

    # -- host actions on every core ------------------------------------------------------------
    def init(self, weights, biases, opt_state=None) -> None:
        """Write the same parameters (and state) into every core."""
        acts = self.compiled.init_actions(weights, biases, opt_state)
        if self.topk_regions is not None:       # the error-feedback residual starts at 0
            acts.append(("write", self.topk_regions["b"],
                         np.zeros((self._grads[1], self.config.size), np.uint32)))
        for core in self.cores:
            core.apply(acts)

    def _allreduce(self, grads: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
        N, n = self.ranks, self.length
        self.plain_bits += sum(link_flits(self.coll, 32, length=n, seg=-(-n // N))) * 32
        if self.compression == "topk":
            out = [g.copy() for g in grads]
            for (off, length, _), states in zip(self.blocks, self.states):
                part, bits = topk_allreduce([g[off:off + length] for g in grads], states)
                self.link_bits += sum(bits)
                for o, p in zip(out, part):
                    o[off:off + length] = p
            return out, 0
        comp = CollComp.BFP if self.compression == "bfp" else CollComp.NONE
        flags = [0] * N
        out = [g.copy() for g in grads]
        for off, length, seg in self.blocks:
            part = ring_allreduce([g[off:off + length] for g in grads], seg, comp=comp,
                                  bfp=(self.coll.bfp, self.width), flags=flags,
                                  rounding=self.rounding, lfsrs=self.lfsr)
            for o, p in zip(out, part):
                o[off:off + length] = p
        self._count_link_bits(comp)
        return out, int(any(flags))

    def _count_link_bits(self, comp):
        self.link_bits += sum(sum(link_flits(self.coll, 32, length=length, seg=seg, comp=comp,
                                             width=self.width))
                              for _, length, seg in self.blocks) * 32

    def step(self, x, y, t: int, *, precision=None, scale_exp=None) -> dict:
        """One data-parallel step on the global batch ``x`` (``B x d_0``), ``y`` (``B``) at
        optimizer step ``t``: ``dict(losses (B, rank order = row order), loss, status (rank
        0's optimizer status), skipped, poisoned (the host forced the skip; engine mode: some
        core poisoned its contribution), runs)``. ``runs``: the backward runs then the
        optimizer runs of the ranks; engine mode: one run per rank."""
        c, N = self.compiled, self.ranks
        x, y = np.asarray(x), np.asarray(y)
        m = self.local.batch
        if len(x) != m * N or len(y) != m * N:
            raise ValueError(f"x and y must hold the global batch of {m * N} rows, not "
                             f"{len(x)} and {len(y)}")
        if self.engine:
            return self._engine_step(x, y, t, precision=precision, scale_exp=scale_exp)
        losses, runs, flagged = [], [], False
        for r, core in enumerate(self.cores):
            rows = slice(r * m, (r + 1) * m)
            res = core.apply(c.step_actions(x[rows], y[rows], t, precision=precision,
                                            scale_exp=scale_exp, part="backward"))
            runs.append(tuple(res["run"][-1]))
            losses.append(c.decode_loss(res))
            flagged |= bool(core.run_flags)
        line, lines = self._grads
        S = self.config.size
        grads = [core.read_lines(line, lines).reshape(-1) for core in self.cores]
        out, link_flag = self._allreduce(grads)
        poisoned = flagged or bool(link_flag)
        for core, g in zip(self.cores, out):
            g = g.copy()
            if poisoned:
                g[0] = NAN_BITS
            core.write_lines(line, g.reshape(lines, S))
        st = None
        for core in self.cores:
            res = core.apply(c.optimizer_actions())
            runs.append(tuple(res["run"][-1]))
            st = st or dict(res["status"])
        losses = np.concatenate(losses)
        return {"losses": losses, "loss": float(np.mean(losses.astype(np.float64))),
                "status": st, "skipped": bool(st["last_skipped"]), "poisoned": poisoned,
                "runs": runs}

    def _engine_step(self, x, y, t, *, precision, scale_exp) -> dict:
        c, N, m = self.compiled, self.ranks, self.local.batch
        acts = [c.step_actions(x[r * m:(r + 1) * m], y[r * m:(r + 1) * m], t,
                               precision=precision, scale_exp=scale_exp, program=self.program)
                for r in range(N)]
        res = self.multi.apply(acts)
        n = self.length
        comp = {"none": CollComp.NONE, "bfp": CollComp.BFP,
                "topk": CollComp.TOPK}[self.compression]
        self.plain_bits += sum(link_flits(self.coll, 32, length=n, seg=-(-n // N))) * 32
        self._count_link_bits(comp)
        losses = np.concatenate([c.decode_loss(r) for r in res])
        st = dict(res[0]["status"])
        return {"losses": losses, "loss": float(np.mean(losses.astype(np.float64))),
                "status": st, "skipped": bool(st["last_skipped"]),
                "poisoned": any(self.multi.poisoned),
                "runs": [tuple(r["run"][-1]) for r in res]}

    def read(self, rank: int = 0) -> dict:
        """:meth:`sim.host.compiler.Compiled.read_actions` results of core ``rank``."""
        return self.cores[rank].apply(self.compiled.read_actions())

    def params(self, rank: int = 0) -> tuple[list, list]:
        """``(weights, biases)`` float32 of core ``rank``."""
        return self.compiled.decode_params(self.read(rank))

    @property
    def bytes_ratio(self) -> float:
        """Link bytes of the all-reduces so far over those of plain FP32 ring all-reduces."""
        return self.link_bits / self.plain_bits if self.plain_bits else 0.0
