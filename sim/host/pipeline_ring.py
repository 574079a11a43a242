"""Pipeline-parallel steps run by the cores themselves: one program per stage whose
``SENDRECV`` instructions move activations and gradients over the ring's links
(docs/multicore.md, "Pipeline parallelism on the ring").

:class:`sim.host.pipeline.Pipeline` runs a step as separate programs per pass and copies the
activations, gradients and stashes through the host. :class:`RingPipeline` compiles the same
passes (the same stage programs, :meth:`sim.host.compiler.Compiled.stage_programs`) into one
program per stage that runs a whole step, so the host acts only at step boundaries (load the
micro-batches, start, wait, read the losses):

* **Inbox.** The host writes every micro-batch's input images (what
  :meth:`~sim.host.compiler.Compiled.data_writes` writes for it: ``x`` and the labels) into
  per-micro-batch *inbox* lines before the run; ``F(s, j)`` starts by copying inbox ``j`` into
  the stage's data buffers (``VEC COPY``).
* **Forward transfer.** Stage ``s < p - 1`` ends ``F(s, j)`` with a ``SENDRECV`` sending its
  output activation (``stage_io()["output"]``, whole lines) to rank ``s + 1`` (``sdir = 0``);
  stage ``s > 0`` starts ``F(s, j)`` with a ``SENDRECV`` receiving them from rank ``s - 1``
  (``rdir = 0``) into its input (``stage_io()["input"]``), after the inbox copy (which wrote
  zeros there). The last stage sends nothing forward and stage 0 receives nothing forward
  (the ring's link from rank ``p - 1`` to rank 0 stays idle).
* **Stash.** After ``F(s, j)`` the stage copies its stash (``stage_io()["stash"]``: every
  buffer the backward pass reads that the forward pass wrote) into stash slot ``j``;
  ``B(s, j)`` copies it back first. The head stage also copies the micro-batch's per-row
  losses into loss slot ``j`` (the host reads them after the run).
* **Backward transfer.** Stage ``s > 0`` ends ``B(s, j)`` with a ``SENDRECV`` sending the
  input's gradient (``stage_io()["dx"]``) to rank ``s - 1``, and stage ``s < p - 1`` starts
  ``B(s, j)``, after restoring its stash, with a ``SENDRECV`` receiving it from rank ``s + 1``
  into its output buffer. With reverse links (``CoreConfig.reverse_links``) these go over
  the reverse links (``sdir = 1`` / ``rdir = 1``); without them only ``p = 2`` works, and
  the gradient goes over the forward link from rank 1 to rank 0 (on a ring of two cores
  "the next core" of rank 1 is rank 0; ``sdir = rdir = 0``).
* **Optimizer.** Every stage ends with its ``OPT`` (two-pass) and ``HALT``.

Schedules (:func:`sim.host.pipeline.stage_order`, the passes in the same order as the
host-mediated pipeline):

* **GPipe**: every ``F``, then every ``B``. Every stage issues its ``SENDRECV`` s in the
  order of its passes (a middle stage: receive ``a_0``, send ``a_0``, .. , then receive
  ``g_0``, send ``g_0``, ..), so each meets its partner: the transfers form a chain from
  stage 0 to stage ``p - 1`` and back, with no cycle. ``m`` stash slots per stage.
* **1F1B**: stage ``s`` runs ``w = min(p - 1 - s, m)`` warm-up forwards, then ``F w+i, B i``,
  then the remaining backwards. Sent one after the other, stage ``s``'s ``a_{w+i}`` (to
  ``s + 1``) and stage ``s + 1``'s ``g_i`` (to ``s``) would each wait for the other core's
  receive (a deadlock the model reports), so wherever a stage's ``F`` is followed by a ``B``
  the two transfers with the next stage are **fused** into one ``SENDRECV`` (send
  ``a_{w+i}`` forward and receive ``g_i`` back, into the stage's *gradient inbox*, copied
  into the output buffer after ``B i`` restores the stash: the output buffer is being sent),
  and wherever a stage's ``B`` is followed by an ``F`` the two transfers with the previous
  stage are (after the inbox copy of the next forward: send ``g_i`` back and receive the
  next activation into the input). The fused pairs of two neighbours meet each other (the
  pattern of Megatron-LM's ``send_forward_recv_backward`` / ``send_backward_recv_forward``);
  a fused command whose partner sends or receives its two parts in separate commands (a
  clipped warm-up, ``m < p - 1 - s``) meets them one after the other.
  At most ``min(p - s, m)`` micro-batches are in flight on stage ``s``, so it keeps that
  many stash slots (GPipe: ``m``).

**Equal to the host-mediated pipeline and to one core.** The cores execute the same passes on
the same words in the same order as :class:`~sim.host.pipeline.Pipeline` (whose step equals
one core running the same micro-batches bit for bit), so parameters, gradients, optimizer
state and losses are equal bit for bit when the transferred matrices' padding lanes agree
(the links copy whole lines; the host-mediated model copies the ``rows x cols`` elements):
every layer width a multiple of ``S``, or padding lanes that stay zero.
"""
from __future__ import annotations

import numpy as np

from hdl.core.config import CoreConfig
from hdl.core.isa import Op, Vop, decode, disassemble, encode
from sim.model.multicore import MultiCoreModel
from sim.model.vector import get_vector

from .pipeline import Pipeline

__all__ = ["RingPipeline"]

#: Largest ``rows`` of one ``VEC COPY`` (its ``rows`` field is 12 bits).
_COPY_ROWS = (1 << 12) - 1


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _body(words) -> list:
    """A stage program without its final ``HALT``."""
    words = list(words)
    if not words or decode(words[-1])[0] != Op.HALT:
        raise AssertionError("a stage program ends in HALT")
    return words[:-1]


class RingPipeline(Pipeline):
    """``p`` pipeline stages on a ring of ``p`` training cores (stage ``s`` on rank ``s``), each
    running one program per step (see the module docstring). Parameters as
    :class:`~sim.host.pipeline.Pipeline` (``schedule``: ``"gpipe"`` or ``"1f1b"``).

    Parameters
    ----------
    stages : int or None
        ``p``: must equal ``config.ranks`` (``None``, the default: ``config.ranks``). More
        than 2 needs ``config.reverse_links`` (the gradients go back to rank ``s - 1``).
    timeout : int
        The ``SENDRECV`` s' ``timeout`` (cycles without a link beat before ``ERR_LINK``,
        1 .. 2**24 - 1; default 2**20): a receive waits for its partners' passes (stage 1's
        first receive for stage 0's whole forward pass), so it must exceed the longest.

    Attributes
    ----------
    ring_programs : list of list of int
        Per stage (= rank), the step program.
    reverse : bool
        Whether the gradients go back over the reverse links (``config.reverse_links``);
        otherwise ``p = 2`` and they use the forward link from rank 1 to rank 0.
    inbox, stash_slots, loss_slots : list
        Per stage: per micro-batch the inbox ``[(data line, inbox line, lines)]``; per slot
        the stash ``[(buffer line, slot line, lines)]``; per micro-batch (head stage) the
        loss slot ``(line, lines)``.
    grad_inbox : list
        Per stage, the first line of the gradient inbox (1F1B, every stage but the last)
        or ``None``.
    link_words : int
        FP32 words the ring's links moved (forward and reverse) since construction, after
        :meth:`ring_step` (as :attr:`Pipeline.link_words` counts the host's copies).
    """

    def __init__(self, desc, config=None, stages: int | None = None, *, bounds=None,
                 schedule: str = "gpipe", timeout: int = 1 << 20):
        if stages is None:
            stages = config.ranks if isinstance(config, CoreConfig) and config.ranks >= 2 else 2
        super().__init__(desc, config, stages, bounds=bounds, schedule=schedule)
        p, ranks = self.p, self.config.ranks
        if p != ranks:
            raise ValueError(f"stages ({p}) must equal config.ranks ({ranks}): one core per "
                             f"stage")
        self.reverse = self.config.reverse_links
        if p > 2 and not self.reverse:
            raise ValueError(f"a pipeline of {p} stages on the ring needs reverse links "
                             f"(config.reverse_links = True: the gradients go back to the "
                             f"previous core); without them stages must be 2 and "
                             f"config.ranks must be 2")
        coll = self.config.collective
        if isinstance(timeout, bool) or not isinstance(timeout, int) \
                or not 1 <= timeout < 1 << coll.timeout_bits:
            raise ValueError(f"timeout must be an int in 1..{(1 << coll.timeout_bits) - 1}, "
                             f"not {timeout!r}")
        self.timeout = timeout
        self.multi = MultiCoreModel(self.config)
        self.cores = self.multi.cores         # the stages' cores are the ring's
        self.inbox, self.stash_slots, self.loss_slots, self.grad_inbox = [], [], [], []
        for s in range(p):
            self._place(s)
        self.ring_programs = [self._program(s) for s in range(p)]

    # -- placement ---------------------------------------------------------------------------
    def _images(self, s: int) -> list:
        """``[(line, lines)]`` of the images :meth:`Compiled.data_writes` writes."""
        c = self.compiled[s]
        rows = c.desc.batch
        acts = c.data_writes(np.zeros((rows, c.desc.layers[0]), np.float32),
                             np.zeros(rows, np.int64))
        return [(line, img.shape[0]) for _, line, img in acts]

    def _place(self, s: int) -> None:
        """First-fit the inbox, stash and loss slots of every micro-batch into the lines no
        buffer of the compiled stage uses."""
        c, S, L = self.compiled[s], self.config.size, self.config.lines
        used = sorted((c.place[n], c.place[n] + buf.lines) for n, buf in c._b.bufs.items())
        free, at = [], 0
        for lo, hi in used:
            if lo > at:
                free.append([at, lo])
            at = max(at, hi)
        if at < L:
            free.append([at, L])

        def take(n):
            for iv in free:
                if iv[1] - iv[0] >= n:
                    iv[0] += n
                    return iv[0] - n
            raise ValueError(f"stage {s}: the inbox, stash and loss slots of {self.m} "
                             f"micro-batches do not fit the scratchpad's free lines "
                             f"({sum(b - a for a, b in free)} left)")

        imgs, stash = self._images(s), self.io[s]["stash"]
        self.inbox.append([[(line, take(n), n) for line, n in imgs] for _ in range(self.m)])
        slots = self.m if self.schedule == "gpipe" else min(self.p - s, self.m)
        self.stash_slots.append([[(line, take(n), n) for line, n in stash]
                                 for _ in range(slots)])
        n = self._loss_lines(s)[1]
        self.loss_slots.append([(take(n), n) for _ in range(self.m)] if s == self.p - 1 else [])
        fused = self.schedule == "1f1b" and s < self.p - 1
        self.grad_inbox.append(take(self._lines(self.io[s]["output"])[1]) if fused else None)

    def _loss_lines(self, s: int) -> tuple[int, int]:
        """``(line, lines)`` of stage ``s``'s per-row losses (written by the head's softmax)."""
        c = self.compiled[s]
        return c.plan["loss"].line, _cdiv(c.desc.batch, self.config.size)

    # -- programs ----------------------------------------------------------------------------
    def _copy(self, src: int, dst: int, lines: int) -> list:
        S, out = self.config.size, []
        while lines:
            n = min(lines, _COPY_ROWS)
            out.append(encode(Op.VEC, vop=Vop.COPY, rows=n, cols=S, a=src, d=dst))
            src, dst, lines = src + n, dst + n, lines - n
        return out

    def _lines(self, where) -> tuple[int, int]:
        line, rows, cols = where
        return line, rows * _cdiv(cols, self.config.size)

    def _program(self, s: int) -> list:
        """Stage ``s``'s step program: its passes in :func:`~sim.host.pipeline.stage_order`,
        with the transfers (module docstring)."""
        progs, io, t = self.programs[s], self.io[s], self.timeout
        first, head = s == 0, s == self.p - 1
        order = self.orders[s]
        fused = self.schedule == "1f1b"
        back = int(self.reverse)              # the gradients' direction: sdir / rdir
        out_a, out_n = self._lines(io["output"])
        pre_a, pre_g = set(), set()           # micro-batches whose a_j / g_j came early

        def sendrecv(**f):
            out.append(encode(Op.SENDRECV, timeout=t, **f))

        out = []
        for k, (kind, j) in enumerate(order):
            nxt = order[k + 1] if k + 1 < len(order) else None
            slot = self.stash_slots[s][self._slot(s, j)]
            if kind == "F":
                if j not in pre_a:                # else B(i) copied the inbox and received
                    for line, inb, n in self.inbox[s][j]:
                        out += self._copy(inb, line, n)
                    if not first:
                        a, n = self._lines(io["input"])
                        sendrecv(b=a, rlines=n)
                out += _body(progs["forward"])
                if head:
                    line, n = self._loss_lines(s)
                    out += self._copy(line, self.loss_slots[s][j][0], n)
                for line, sl, n in slot:
                    out += self._copy(line, sl, n)
                if not head:
                    if fused and nxt is not None and nxt[0] == "B":
                        # 1F1B: send a_j on and receive g_i back (into the gradient inbox)
                        sendrecv(a=out_a, lines=out_n, b=self.grad_inbox[s], rlines=out_n,
                                 rdir=back)
                        pre_g.add(nxt[1])
                    else:
                        sendrecv(a=out_a, lines=out_n)
            else:
                for line, sl, n in slot:
                    out += self._copy(sl, line, n)
                if not head:
                    if j in pre_g:                 # received with the last send
                        out += self._copy(self.grad_inbox[s], out_a, out_n)
                    else:
                        sendrecv(b=out_a, rlines=out_n, rdir=back)
                out += _body(progs["backward" if j == 0 else "backward_acc"])
                if not first:
                    a, n = self._lines(io["dx"])
                    if fused and nxt is not None and nxt[0] == "F":
                        # 1F1B: the next forward's inbox first, then send g_j back and
                        # receive a_{j'} into the input at once
                        for line, inb, n2 in self.inbox[s][nxt[1]]:
                            out += self._copy(inb, line, n2)
                        ia, inn = self._lines(io["input"])
                        sendrecv(a=a, lines=n, b=ia, rlines=inn, sdir=back)
                        pre_a.add(nxt[1])
                    else:
                        sendrecv(a=a, lines=n, sdir=back)
        out += _body(progs["optimizer"]) + [encode(Op.HALT)]
        if len(out) > self.config.prog_depth:
            raise ValueError(f"stage {s}: the step program has {len(out)} instructions, more "
                             f"than prog_depth ({self.config.prog_depth})")
        return out

    def _slot(self, s: int, j: int) -> int:
        """Stash slot of micro-batch ``j`` on stage ``s``: ``j`` (GPipe), ``j mod min(p - s,
        m)`` (1F1B: at most that many micro-batches are in flight on the stage)."""
        return j if self.schedule == "gpipe" else j % len(self.stash_slots[s])

    def asm(self, s: int) -> str:
        """Stage ``s``'s step program, one instruction per line."""
        return "\n".join(disassemble(w) for w in self.ring_programs[s])

    # -- a step ------------------------------------------------------------------------------
    def step_actions(self, x, y, t: int, *, precision=None) -> list:
        """Per stage (= rank), the host actions of one step: the micro-batches' inbox images,
        the precision table and optimizer registers of step ``t``, the program, one run, the
        loss slots (head stage, keys ``loss0`` ..) and the optimizer status. Run them with
        :meth:`MultiCoreModel.apply` or on the hardware ring (one host port per core)."""
        x, y = self._check_batch(x, y, precision)
        rows = self.desc.rows
        out = []
        for s, c in enumerate(self.compiled):
            acts = []
            for j in range(self.m):
                xj = x[j * rows:(j + 1) * rows] if s == 0 else \
                    np.zeros((rows, c.desc.layers[0]), np.float32)
                yj = y[j * rows:(j + 1) * rows] if s == self.p - 1 else np.zeros(rows, np.int64)
                imgs = c.data_writes(xj, yj)
                for (_, line, img), (dline, slot, n) in zip(imgs, self.inbox[s][j]):
                    assert line == dline and img.shape[0] == n
                    acts.append(("write", slot, img))
            acts += c.setup_actions(t, precision=precision)
            acts += [("program", self.ring_programs[s]), ("run",)]
            acts += [("read", f"loss{j}", line, n) for j, (line, n) in
                     enumerate(self.loss_slots[s])]
            acts.append(("status",))
            out.append(acts)
        return out

    def decode_step(self, results) -> dict:
        """``dict(run (per stage), losses (B, row order), loss, status (per stage),
        skipped)`` from the per-stage results of :meth:`step_actions`."""
        S, rows = self.config.size, self.desc.rows
        head = results[self.p - 1]
        losses = np.concatenate([get_vector(np.asarray(head[f"loss{j}"], np.uint32), 0, rows, S)
                                 for j in range(self.m)]).view(np.float32)
        status = [dict(c._last(r["status"])) for c, r in zip(self.compiled, results)]
        return {"run": [tuple(r["run"][-1]) for r in results], "losses": losses,
                "loss": float(np.mean(losses.astype(np.float64))), "status": status,
                "skipped": any(bool(st["last_skipped"]) for st in status)}

    def ring_step(self, x, y, t: int, *, precision=None) -> dict:
        """One step on the golden model's ring (:attr:`multi`): :meth:`step_actions`, run,
        :meth:`decode_step`. Raises ``AssertionError`` if a stage's run did not end ``OK``."""
        res = self.decode_step(self.multi.apply(self.step_actions(x, y, t,
                                                                   precision=precision)))
        for s, run in enumerate(res["run"]):
            if run[0] != 0:
                raise AssertionError(f"stage {s} step program stopped with {run}")
        # every word the ring's links moved, forward and reverse
        self.link_words = sum(self.multi.sendrecv_words) + sum(self.multi.sendrecv_words_rev)
        return res

    def step(self, *args, **kwargs):
        raise TypeError("RingPipeline runs steps with ring_step (the cores' own programs); "
                        "Pipeline.step is the host-mediated model")

