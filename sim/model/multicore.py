"""Golden model of ``N`` training cores joined in a ring (:class:`hdl.multi.cores.TrainingRing`):
``config.ranks`` :class:`sim.model.core.CoreModel` cores whose ``ALLREDUCE`` instructions meet
over the ring (pure numpy, bit-exact; docs/multicore.md, "ALLREDUCE in the golden model").

ALLREDUCE
---------
Fields (:data:`hdl.core.isa.ALLREDUCE_ARGS`): ``a`` (first line), ``lines``, ``seg`` (lines per
segment), ``timeout``, ``comp`` (0 FP32 words, 1 BFP groups), ``width`` (BFP mantissa width),
``poison``. The program check (:func:`hdl.core.isa.check_allreduce`) has already rejected every
field combination the collective engine would refuse.

* **Vector.** Core ``r``'s vector is the ``lines * S`` words of lines ``a .. a + lines - 1``,
  word ``i`` at line ``a + i // S``, lane ``i % S`` (padding lanes included).
* **Poison.** With ``poison = 1``, a core whose run flags (:attr:`CoreModel.run_flags`: set
  earlier in the same run) are nonzero when the ``ALLREDUCE`` executes contributes its vector
  with word 0 replaced by :data:`POISON_BITS` (the canonical NaN). With FP32 links every
  rank's word 0 is then the canonical NaN and every core's two-pass ``OPT`` skips; with BFP
  links the NaN's group crosses as a NaN group (flagged in :attr:`MultiCoreModel.flags` by
  each rank that sends it), so that whole group is canonical NaNs on every rank and every
  core skips as well (docs/multicore.md, "NaN and infinity").
* **Reduce.** :func:`sim.model.collective.ring_allreduce` over the ``N`` vectors in rank order
  with ``seg * S`` words per segment, ``comp``, and ``bfp = (config.collective.bfp, width)``:
  the engine's segments, schedule, FP32 sum order and BFP relay. Each core's lines are
  overwritten with its result (every rank gets the same bits).
* **Top-k** (``comp = 2``; ``seg`` and ``width`` unused, ``b``, ``g`` and ``glines`` per
  core): the engine's top-k all-reduce (:func:`sim.model.compress.topk_ring`) of each core's
  gradient (lines ``a``), with its residual in lines ``b`` and the gathered messages in the
  first ``N * TopK.message_words(lines * S)`` words of lines ``g``; the gradient lines end
  with the rank-order sum, the residual lines with the new residual. A poisoned core's word
  0 is the canonical NaN, as above (sent: it has the largest magnitude).
* **Order.** The result is as if the ``ALLREDUCE`` executed in program order (the hardware's
  scoreboard guarantees it); the model has no timing, so ``timeout`` is never reached and a
  run never ends in ``ERR_LINK``.

SENDRECV
--------
Fields (:data:`hdl.core.isa.SENDRECV_ARGS`): ``a``, ``lines`` (sent to rank ``r + 1``; with
``sdir = 1`` to rank ``r - 1``), ``b``, ``rlines`` (received from rank ``r - 1``; with
``rdir = 1`` from rank ``r + 1``), ``timeout``, ``sdir``, ``rdir`` (1 only on cores with
``CoreConfig.reverse_links``: the program check rejects them otherwise). The words sent by
rank ``r`` (its lines ``a ..``, ``lines * S`` words, padding lanes included, bit for bit) are
what the receiving neighbour's ``SENDRECV`` with a receive part in the same direction writes at
its ``b``: a core's send part meets the receive part of the core it sends to while both cores
are at their ``SENDRECV`` (a *rendezvous*), per direction: an ``sdir = 0`` send (forward
link ``r``) meets rank ``r + 1``'s ``rdir = 0`` receive, an ``sdir = 1`` send (reverse link
``r``) rank ``r - 1``'s ``rdir = 1`` receive (on two ranks both neighbours are the other
rank, the direction bits tell the links apart). A ``SENDRECV`` completes when both its parts
have met theirs; so a core may send one way and receive the other in one instruction. The
sent ``lines`` must equal the partner's ``rlines`` (``ValueError``: the engine that expects
more words would time out, one that gets more would leave them for its next command). The hardware's links buffer a few
words, so a transfer shorter than that can finish before the receiver reaches its
``SENDRECV``; the model does not rely on it: a program the model runs without a deadlock runs
on the hardware (the converse need not hold).

Running cores together (``apply``, ``run``): every running core executes its program until its
next ``ALLREDUCE`` or ``SENDRECV`` (or its ``HALT``); a ``SENDRECV`` resumes its core once its
parts have met their neighbours' (above); when every core of the ring is at an ``ALLREDUCE``,
the all-reduce happens and they all resume. The cores' ``ALLREDUCE`` s must agree on what the ring carries:
``lines``, ``seg``, ``comp`` and, with BFP, ``width`` (otherwise the engines would hang, time
out or mis-frame: ``ValueError``); ``a``, ``timeout`` and ``poison`` are per core. A core that
halts, is not running or had its program rejected while others wait at an ``ALLREDUCE`` is
also a ``ValueError`` (the hardware's waiting cores would time out with ``ERR_LINK``). After
such an error the cores are left mid-run. So is a ring in which no core can go on (e.g. a
core waiting at a ``SENDRECV`` whose neighbour waits at an ``ALLREDUCE``, or two cores whose
sends each wait for the other's receive): ``ValueError`` naming every waiting core.
"""
from __future__ import annotations

import numpy as np

from hdl.core.config import CoreConfig
from hdl.core.isa import Status
from hdl.multi.config import CollComp, CollStatus

from .collective import ring_allreduce
from .bfp import LFSR
from .compress import topk_ring
from .core import CoreModel

__all__ = ["MultiCoreModel", "POISON_BITS", "RING_FIELDS"]

#: What a poisoned core contributes as word 0 of its vector: the canonical NaN
#: (:data:`hdl.core.core.POISON_BITS`).
POISON_BITS = 0x7FC00000
#: ``ALLREDUCE`` fields every core of the ring must agree on (``width`` and ``rounding`` only
#: with ``comp = 1``).
RING_FIELDS = ("lines", "seg", "comp", "width", "rounding")


class MultiCoreModel:
    """``config.ranks`` golden-model training cores in a ring (see the module docstring).

    Parameters
    ----------
    config : CoreConfig
        Every core's config; ``config.ranks`` (2..16) is the number of cores.
    **core_kwargs
        Passed to every :class:`~sim.model.core.CoreModel` (``grad_config``,
        ``optim_config``, ...).

    Attributes
    ----------
    cores : list of CoreModel
        Core ``r`` is rank ``r``.
    flags : list of int
        Per rank, the last all-reduce's flags of the BFP groups that rank sent (bit 0 a NaN,
        bit 1 an infinity; all 0 with FP32 links): the ``rsp.flags`` of each engine, also in
        each core's ``coll_flags``.
    poisoned : list of bool
        Per rank, whether the last all-reduce replaced that core's word 0 by
        :data:`POISON_BITS`.
    allreduces : int
        All-reduces performed since construction or :meth:`reset`.
    sendrecv_words : list of int
        Per rank ``r``, the FP32 words its ``SENDRECV`` s sent to rank ``r + 1`` (``sdir =
        0``: what forward link ``r`` carried) since construction or :meth:`reset`.
    sendrecv_words_rev : list of int
        Per rank ``r``, the FP32 words its ``SENDRECV`` s sent to rank ``r - 1`` (``sdir =
        1``: what reverse link ``r`` carried) since construction or :meth:`reset`; all 0
        without reverse links. A link of ``link_width``-bit flits carries ``32 /
        link_width`` flits per word, in either direction.
    history : list of dict
        One entry per all-reduce: ``fields`` (per rank, the ``ALLREDUCE``'s fields),
        ``poisoned`` and ``flags`` (as above).
    lfsr : list of sim.model.bfp.LFSR
        Per rank, the LFSR of its transmit codec's converter: it steps for every BFP group
        the rank sends (or loops back), in every rounding mode, and gives a stochastically
        rounded group its noise; reset state at construction and :meth:`reset`.
    """

    def __init__(self, config: CoreConfig, **core_kwargs):
        if not isinstance(config, CoreConfig):
            raise TypeError(f"config must be a CoreConfig, not {type(config).__name__}")
        if config.ranks < 2:
            raise ValueError(f"MultiCoreModel needs config.ranks >= 2 (a ring), not "
                             f"{config.ranks}")
        self.config = config
        self.ranks = config.ranks
        self.collective = config.collective
        self.cores = [CoreModel(config, **core_kwargs) for _ in range(self.ranks)]
        self._clear()

    def _clear(self) -> None:
        self.flags = [0] * self.ranks
        self.poisoned = [False] * self.ranks
        self.allreduces = 0
        self.sendrecv_words = [0] * self.ranks
        self.sendrecv_words_rev = [0] * self.ranks
        self.history = []
        self.lfsr = [LFSR(self.collective.bfp) for _ in range(self.ranks)]

    def reset(self) -> None:
        """Hardware reset of every core (:meth:`CoreModel.reset`) and of the all-reduce
        bookkeeping (memories and programs keep their contents)."""
        for core in self.cores:
            core.reset()
        self._clear()

    # -- running -------------------------------------------------------------------------------
    def run(self, ranks=None) -> list:
        """Run the loaded programs of the cores ``ranks`` (default: all) together: each is
        checked (a rejected program executes nothing), then every core executes until its next
        ``ALLREDUCE``, ``SENDRECV`` or ``HALT``, all-reducing when the whole ring is at an
        ``ALLREDUCE`` and moving words between neighbours at ``SENDRECV`` s. Returns, per
        core of ``ranks`` in that order, ``(Status, err_pc)`` as :meth:`CoreModel.run`."""
        ranks = list(range(self.ranks)) if ranks is None else list(ranks)
        if len(set(ranks)) != len(ranks) or any(not 0 <= r < self.ranks for r in ranks):
            raise ValueError(f"ranks must be distinct ranks in 0..{self.ranks - 1}, "
                             f"not {ranks!r}")
        results, gens = {}, {}
        for r in ranks:
            status, err_pc = self.cores[r].check()
            if status != Status.OK:
                results[r] = (status, err_pc)
            else:
                gens[r] = self.cores[r]._execute()
        # rank -> [kind, fields, send part pending, receive part pending]
        waiting = {}

        def advance(r):
            try:
                kind, fields = next(gens[r])
            except StopIteration as stop:
                results[r] = stop.value
                return
            assert kind in ("allreduce", "sendrecv"), kind
            waiting[r] = [kind, fields, kind == "sendrecv" and fields["lines"] > 0,
                          kind == "sendrecv" and fields["rlines"] > 0]

        for r in gens:
            advance(r)
        while waiting:
            moved = False
            # point to point: rank r's send part meets the receive part in the same direction
            # of rank r + 1 (sdir = rdir = 0) or r - 1 (sdir = rdir = 1)
            for r in sorted(waiting):
                w = waiting[r]
                if w[0] != "sendrecv" or not w[2]:
                    continue
                d = w[1].get("sdir", 0)
                dst = waiting.get(self._partner(r, d))
                if dst is not None and dst[0] == "sendrecv" and dst[3] \
                        and dst[1].get("rdir", 0) == d:
                    self._transfer(r, w[1], dst[1])
                    w[2] = dst[3] = False
                    moved = True
            for r in sorted(waiting):
                w = waiting[r]
                if w[0] == "sendrecv" and not (w[2] or w[3]):
                    del waiting[r]
                    advance(r)
                    moved = True
            if len(waiting) == self.ranks and all(w[0] == "allreduce"
                                                  for w in waiting.values()):
                self._allreduce({r: w[1] for r, w in waiting.items()})
                at = sorted(waiting)
                waiting.clear()
                for r in at:
                    advance(r)
                moved = True
            if waiting and not moved:
                raise ValueError(self._stuck(waiting, results))
        return [results[r] for r in ranks]

    def _stuck(self, waiting: dict, results: dict) -> str:
        """Why no core of the ring can go on (the error of :meth:`run`)."""
        parts = []
        for r in range(self.ranks):
            if r in waiting:
                kind, f, send, recv = waiting[r]
                if kind == "allreduce":
                    parts.append(f"rank {r} waits at an ALLREDUCE")
                else:
                    left = " and ".join(p for p, on in (("send", send), ("receive", recv)) if on)
                    how = []
                    if send:
                        d = f.get("sdir", 0)
                        how.append(f"sending to rank {self._partner(r, d)} (sdir = {d})")
                    if recv:
                        d = f.get("rdir", 0)
                        how.append(f"receiving from rank {self._partner(r, 1 - d)} "
                                   f"(rdir = {d})")
                    parts.append(f"rank {r} waits at a SENDRECV (its {left} part), "
                                 + " and ".join(how))
            else:
                parts.append(f"rank {r} " + ("halted" if r in results and results[r][0] == Status.OK
                                             else "rejected its program" if r in results
                                             else "not running"))
        return ("no core of the ring can go on: " + ", ".join(parts)
                + ": the hardware's waiting cores would time out (ERR_LINK)")

    def _partner(self, r: int, d: int) -> int:
        """The rank that rank ``r`` sends to with ``sdir = d`` (and receives from with
        ``rdir = 1 - d``): ``r + 1`` for 0, ``r - 1`` for 1, mod ``N``."""
        return (r + (1 if d == 0 else -1)) % self.ranks

    def _transfer(self, r: int, f: dict, g: dict) -> None:
        """Rank ``r``'s ``SENDRECV`` (fields ``f``) sends to the receive part, in the same
        direction, of its partner's (fields ``g``): rank ``r + 1`` (``sdir = 0``) or
        ``r - 1`` (``sdir = 1``)."""
        d = f.get("sdir", 0)
        n = self._partner(r, d)
        if f["lines"] != g["rlines"]:
            link = "reverse link" if d else "forward link"
            raise ValueError(
                f"SENDRECV: rank {r} sends {f['lines']} lines but rank {n} receives "
                f"{g['rlines']} ({link} {r}: sdir = {d}, rdir = {d}): the engines would time "
                f"out or mis-frame")
        self.cores[n].write_lines(g["b"], self.cores[r].read_lines(f["a"], f["lines"]))
        words = self.sendrecv_words_rev if d else self.sendrecv_words
        words[r] += f["lines"] * self.config.size

    def _allreduce(self, fields: dict) -> None:
        """The all-reduce of every core's ``ALLREDUCE`` (``fields``: rank -> fields)."""
        f0 = fields[0]
        for r in range(1, self.ranks):
            f = fields[r]
            for name in RING_FIELDS:
                if name in ("width", "rounding") and f0["comp"] != CollComp.BFP:
                    continue
                if name == "seg" and f0["comp"] == CollComp.TOPK:
                    continue
                if f[name] != f0[name]:
                    raise ValueError(
                        f"ALLREDUCE field {name!r} differs between rank 0 ({f0[name]}) and "
                        f"rank {r} ({f[name]}): every core of the ring must agree on "
                        f"{', '.join(RING_FIELDS)}; the hardware would hang or time out")
        S = self.config.size
        lines, seg, comp, width = f0["lines"], f0["seg"], f0["comp"], f0["width"]
        if comp == CollComp.TOPK:
            self._topk_allreduce(fields)
            return
        vectors, poisoned = [], []
        for r, core in enumerate(self.cores):
            v = core.read_lines(fields[r]["a"], lines).reshape(-1)
            p = bool(fields[r]["poison"]) and bool(core.run_flags)
            if p:
                v[0] = POISON_BITS
            vectors.append(v)
            poisoned.append(p)
        flags = [0] * self.ranks
        out = ring_allreduce(vectors, seg * S, comp=comp, bfp=(self.collective.bfp, width),
                             flags=flags, rounding=f0["rounding"], lfsrs=self.lfsr)
        for r, core in enumerate(self.cores):
            core.write_lines(fields[r]["a"], out[r].reshape(lines, S))
            core.coll_flags = flags[r]
        self.flags, self.poisoned = flags, poisoned
        self.allreduces += 1
        self.history.append({"fields": [dict(fields[r]) for r in range(self.ranks)],
                             "poisoned": list(poisoned), "flags": list(flags)})

    def _topk_allreduce(self, fields: dict) -> None:
        """A top-k ``ALLREDUCE`` (``comp = 2``): each core's gradient (lines ``a``), residual
        (lines ``b``) and gather buffer (lines ``g``) as the engine sees them, through
        :func:`sim.model.compress.topk_ring`; a poisoned core's gradient word 0 reads as the
        canonical NaN (it has the largest magnitude, so it is sent and every sum's word 0 is
        NaN)."""
        S, lines = self.config.size, fields[0]["lines"]
        n = lines * S
        mems, poisoned = [], []
        for r, core in enumerate(self.cores):
            f = fields[r]
            grad = core.read_lines(f["a"], lines).reshape(-1)
            p = bool(f["poison"]) and bool(core.run_flags)
            if p:
                grad[0] = POISON_BITS
            poisoned.append(p)
            mems.append(np.concatenate([grad, core.read_lines(f["b"], lines).reshape(-1),
                                        core.read_lines(f["g"], f["glines"]).reshape(-1)]))
        out = topk_ring(mems, base=0, length=n, rbase=n, gbase=2 * n, topk=self.collective.topk)
        for r, core in enumerate(self.cores):
            f = fields[r]
            core.write_lines(f["a"], out[r][:n].reshape(lines, S))
            core.write_lines(f["b"], out[r][n:2 * n].reshape(lines, S))
            core.write_lines(f["g"], out[r][2 * n:].reshape(f["glines"], S))
            core.coll_flags = 0
        self.flags, self.poisoned = [0] * self.ranks, poisoned
        self.allreduces += 1
        self.history.append({"fields": [dict(fields[r]) for r in range(self.ranks)],
                             "poisoned": list(poisoned), "flags": [0] * self.ranks})

    # -- host actions ---------------------------------------------------------------------------
    def apply(self, actions) -> list[dict]:
        """Execute host actions on every core: ``actions[r]`` is core ``r``'s list, in the
        format of :meth:`CoreModel.apply`. Each core's actions run in order; its ``k``-th
        ``("run",)`` runs together with the ``k``-th ``("run",)`` of every other core that
        has one (:meth:`run`); the actions before it run first on every core. Returns one
        result dict per core, as :meth:`CoreModel.apply` (``"run"``: the list of that core's
        ``(status, err_pc)``)."""
        actions = list(actions)
        if len(actions) != self.ranks:
            raise ValueError(f"actions must hold one list per rank ({self.ranks}), not "
                             f"{len(actions)}")
        parts = []                      # per rank: the action lists between its runs
        for r, acts in enumerate(actions):
            cur, segs = [], []
            for act in acts:
                kind, *args = act
                if kind == "run":
                    if args:
                        raise ValueError(f"('run',) takes no arguments, not {act!r}")
                    segs.append(cur)
                    cur = []
                else:
                    cur.append(act)
            segs.append(cur)
            parts.append(segs)
        out = [{} for _ in range(self.ranks)]
        rounds = max(len(p) for p in parts)
        for k in range(rounds):
            for r, core in enumerate(self.cores):
                if k < len(parts[r]):
                    out[r].update(core.apply(parts[r][k]))
            running = [r for r in range(self.ranks) if k < len(parts[r]) - 1]
            if running:
                for r, res in zip(running, self.run(running)):
                    out[r].setdefault("run", []).append(res)
        return out

    # -- state ----------------------------------------------------------------------------------
    def coll_state(self, rank: int) -> dict:
        """The hardware ``state`` register's all-reduce fields of core ``rank`` after the last
        ``ALLREDUCE``: ``coll_status`` (always ``CollStatus.OK`` here: the model has no
        timeouts) and ``coll_flags``."""
        return {"coll_status": CollStatus.OK, "coll_flags": self.cores[rank].coll_flags}
