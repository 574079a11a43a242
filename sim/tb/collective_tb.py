"""Fast-tier driver of :class:`hdl.multi.ring.CollectiveRing` in Amaranth's simulator.

:func:`run_ring` loads every rank's memory through its host port, sends each command to every
rank in the same cycle (the same command, or one per rank: :func:`command` with per-rank
lists), waits for all responses (a cycle deadline per command), reads the memories back and
returns what happened. A background process drives the links' stall gates:
random stalls with probability ``stall_prob`` on every gate, and gates listed in ``stop`` held
stalled for good (a link that stops delivering).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from hdl.multi.collective import cmd_layout, rsp_layout
from hdl.multi.config import CollComp, CollOp, CollStatus
from sim.model.collective import CollectiveModel, link_flits, sendrecv_link_flits

from .amaranth_tb import ReusableSim, run_sim
from .payload import pack, unpack

__all__ = ["RingRun", "run_ring", "command", "check_ring", "disjoint_regions"]


def command(*, base, length, seg=0, timeout, op=CollOp.ALLREDUCE, comp=CollComp.NONE,
            width=0, rbase=0, rlength=0, gbase=0, sdir=0, rdir=0,
            rounding=0) -> dict | list[dict]:
    """One command's fields (:func:`hdl.multi.collective.cmd_layout`): a dict, which
    :func:`run_ring` sends to every rank. Any field given as a list or tuple (one value per
    rank; all such lists equally long) makes it a list of dicts, rank ``r`` getting element
    ``r`` of each list and the other fields as given: e.g. a ``SENDRECV`` where rank 0 sends
    and rank 1 receives, ``command(op=CollOp.SENDRECV, base=0, length=[4, 0], rbase=8,
    rlength=[0, 4], timeout=100)``. ``seg`` is unused by ``SENDRECV``, ``rbase`` /
    ``rlength`` by ``ALLREDUCE``; a top-k ``ALLREDUCE`` (``comp = CollComp.TOPK``) uses
    ``rbase`` (the residual) and ``gbase`` (the gather buffer), not ``seg``. ``sdir`` /
    ``rdir`` = 1: a ``SENDRECV`` sends to rank ``r - 1`` / receives from rank ``r + 1`` over
    the reverse links. ``rounding``: a BFP ``ALLREDUCE``'s converter rounding
    (:class:`hdl.bfp.converter.Rounding`)."""
    fields = {"op": op, "base": base, "length": length, "seg": seg, "timeout": timeout,
              "comp": comp, "width": width, "rbase": rbase, "rlength": rlength,
              "gbase": gbase, "sdir": sdir, "rdir": rdir, "rounding": rounding}
    per_rank = {k: list(v) for k, v in fields.items() if isinstance(v, (list, tuple))}
    if not per_rank:
        return fields
    sizes = {len(v) for v in per_rank.values()}
    if len(sizes) != 1:
        raise ValueError(f"command: per-rank lists of different lengths {per_rank}")
    return [{k: per_rank[k][r] if k in per_rank else v for k, v in fields.items()}
            for r in range(sizes.pop())]


def disjoint_regions(rng, depth: int, send, recv) -> list[tuple[int, int, int, int]]:
    """Per rank ``(base, length, rbase, rlength)`` of a ``SENDRECV``: random send and receive
    regions of ``send[r]`` and ``recv[r]`` words in a memory of ``depth`` words that do not
    overlap (``rng``: a numpy ``Generator``)."""
    out = []
    for n, rn in zip(send, recv):
        while True:
            b, rb = int(rng.integers(0, depth - n + 1)), int(rng.integers(0, depth - rn + 1))
            if not (n and rn and b < rb + rn and rb < b + n):
                break
        out.append((b, n, rb, rn))
    return out


@dataclass
class RingRun:
    """What :func:`run_ring` saw: ``responses[c][r]`` (fields of the response of rank ``r`` to
    command ``c``), the memories afterwards, the flits per link (``flits_rev``: per reverse
    link, empty without reverse links) and the overflow flags (reverse links' ORed in);
    ``latency[c][r]``: cycles from rank ``r`` taking command ``c`` to its response."""
    responses: list = field(default_factory=list)
    latency: list = field(default_factory=list)
    memories: list = field(default_factory=list)
    flits: list = field(default_factory=list)
    flits_rev: list = field(default_factory=list)
    overflow: int = 0
    cycles: int = 0
    stalled_cycles: int = 0


def run_ring(dut, images, commands, *, stall_prob: float = 0.0, seed: int = 0,
             stop=(), deadline: int = 20_000, max_cycles: int = 200_000,
             lockstep: bool = True) -> RingRun:
    """Run ``commands`` (see :func:`command`) on ``dut`` after loading ``images`` (one
    ``uint32`` array of ``depth`` words per rank). Each command is a dict of fields (the same
    command to every rank) or a list of ``N`` dicts (rank ``r`` gets element ``r``).

    ``stop``: names ``("tx", r)`` / ``("rx", r)`` of gates held stalled from the start, or
    ``("tx", r, cycle)`` / ``("rx", r, cycle)`` from that cycle of the simulation on (the
    images load in the first ``depth`` cycles); ``"tx_rev"`` / ``"rx_rev"`` for the gates of
    the reverse links (a ring built with ``CollectiveConfig.reverse``, whose reverse gates
    also stall at random with ``stall_prob``).
    ``deadline``: cycles every command may take before :class:`TimeoutError`.
    ``lockstep``: every command goes to all ranks in the same cycle after all answered the
    previous one; otherwise each rank gets its next command as soon as it answered (ranks
    drift apart, as cores would).

    ``dut``: the ring, or a :class:`~sim.tb.amaranth_tb.ReusableSim` of one: the run then
    shares its elaborated simulation, started from the initial state.
    """
    sim, dut = (dut, dut.dut) if isinstance(dut, ReusableSim) else (None, dut)
    cfg = dut.config.collective
    N = cfg.ranks
    if len(images) != N:
        raise ValueError(f"images: {len(images)} for {N} ranks")
    per_rank = [c if isinstance(c, (list, tuple)) else [c] * N for c in commands]
    for k, c in enumerate(per_rank):
        if len(c) != N:
            raise ValueError(f"command {k}: {len(c)} per-rank commands for {N} ranks")
    rng = random.Random(seed)
    run = RingRun()
    cmd_l, rsp_l = cmd_layout(cfg), rsp_layout(cfg)
    cmd_ports = [getattr(dut, f"cmd_{r}") for r in range(N)]
    rsp_ports = [getattr(dut, f"rsp_{r}") for r in range(N)]
    host = [getattr(dut, f"host_{r}") for r in range(N)]
    stops = [(kind, r, at[0] if at else 0) for kind, r, *at in stop]
    full = (1 << N) - 1

    def stopped(kind, cycle):
        return sum(1 << r for k, r, at in stops if k == kind and cycle >= at)

    async def stalls(ctx):
        cycle = 0
        async for _ in ctx.tick():
            cycle += 1
            tx = sum(1 << r for r in range(N) if rng.random() < stall_prob) | stopped("tx", cycle)
            rx = sum(1 << r for r in range(N) if rng.random() < stall_prob) | stopped("rx", cycle)
            ctx.set(dut.stall_tx, tx & full)
            ctx.set(dut.stall_rx, rx & full)
            run.stalled_cycles += bool(tx or rx)
            if cfg.reverse:
                for kind in ("tx_rev", "rx_rev"):
                    st = (sum(1 << r for r in range(N) if rng.random() < stall_prob)
                          | stopped(kind, cycle))
                    ctx.set(getattr(dut, f"stall_{kind}"), st & full)

    async def bench(ctx):
        # load
        for a in range(cfg.depth):
            for r in range(N):
                ctx.set(host[r].w_en, 1)
                ctx.set(host[r].w_addr, a)
                ctx.set(host[r].w_data, int(images[r][a]))
            await ctx.tick()
        for r in range(N):
            ctx.set(host[r].w_en, 0)
        # commands: rank r works through its own queue; in lockstep a rank waits until every
        # rank has answered before it takes the next command
        words = [[pack(cmd_l, cr) for cr in c] for c in per_rank]
        got = [[None] * N for _ in commands]
        took = [[None] * N for _ in commands]
        lat = [[None] * N for _ in commands]
        nxt = [0] * N                      # the command rank r is on
        sent = [False] * N
        for r in range(N):
            ctx.set(rsp_ports[r].ready, 1)
        waited = 0
        while min(nxt) < len(commands):
            offer = [nxt[r] < len(commands) and not sent[r]
                     and (not lockstep or min(nxt) == nxt[r]) for r in range(N)]
            for r in range(N):
                ctx.set(cmd_ports[r].valid, offer[r])
                if offer[r]:
                    ctx.set(cmd_ports[r].payload.as_value(), words[nxt[r]][r])
            _, _, *vals = await ctx.tick().sample(
                *[p.ready for p in cmd_ports], *[p.valid for p in rsp_ports],
                *[p.payload.as_value() for p in rsp_ports])
            run.cycles += 1
            waited += 1
            for r in range(N):
                k = nxt[r]
                if offer[r] and vals[r]:
                    sent[r] = True
                    took[k][r] = run.cycles
                if vals[N + r] and k < len(commands):
                    got[k][r] = unpack(rsp_l, vals[2 * N + r])
                    lat[k][r] = run.cycles - took[k][r]
                    nxt[r], sent[r], waited = k + 1, False, 0
            if waited > deadline:
                raise TimeoutError(f"no response for {deadline} cycles: ranks at commands "
                                   f"{nxt}, responses {got}")
        for r in range(N):
            ctx.set(cmd_ports[r].valid, 0)
        run.responses, run.latency = got, lat
        # read back
        mems = [np.zeros(cfg.depth, dtype=np.uint32) for _ in range(N)]
        for a in range(cfg.depth):
            for r in range(N):
                ctx.set(host[r].r_en, 1)
                ctx.set(host[r].r_addr, a)
            await ctx.tick()
            for r in range(N):
                mems[r][a] = ctx.get(host[r].r_data)
        run.memories = mems
        run.flits = [ctx.get(getattr(dut, f"flits_{r}")) for r in range(N)]
        run.overflow = ctx.get(dut.overflow)
        if cfg.reverse:
            run.flits_rev = [ctx.get(getattr(dut, f"flits_rev_{r}")) for r in range(N)]
            run.overflow |= ctx.get(dut.overflow_rev)

    if sim is None:
        run_sim(dut, bench, processes=[stalls], max_cycles=max_cycles)
    else:
        sim.run(bench, processes=[stalls], max_cycles=max_cycles)
    return run


def check_ring(dut, images, cmds, **kw) -> RingRun:
    """Run ``cmds`` (each the same on every rank, or a per-rank list; see :func:`command`) on
    the RTL (:func:`run_ring`) and on :class:`~sim.model.collective.CollectiveModel`: the
    statuses, flags, memories and flits per link must agree bit for bit, and no link FIFO
    may overflow. ``dut``: the ring or a :class:`~sim.tb.amaranth_tb.ReusableSim` of one (see
    :func:`run_ring`). Returns the run."""
    ring = dut.dut if isinstance(dut, ReusableSim) else dut
    N = ring.config.collective.ranks
    model = CollectiveModel(ring.config.collective)
    for r in range(N):
        model.mem[r][:] = images[r]
    run = run_ring(dut, images, cmds, **kw)
    flits = [0] * N
    flits_rev = [0] * N
    for c, got in zip(cmds, run.responses):
        cs = c if isinstance(c, list) else [c] * N
        statuses = model.execute(cs)
        assert [g["status"] for g in got] == statuses, (c, got)
        assert [g["flags"] for g in got] == model.flags, (c, got)
        ok = [st == CollStatus.OK for st in statuses]
        if all(ok) and cs[0]["op"] == CollOp.ALLREDUCE:
            c0 = cs[0]
            sent = link_flits(ring.config.collective, ring.config.link.width, length=c0["length"],
                              seg=c0["seg"], comp=c0["comp"], width=c0["width"])
            flits = [a + b for a, b in zip(flits, sent)]
        elif any(ok):                                   # SENDRECV: one step, step 0
            fwd, rev = sendrecv_link_flits(ring.config.link.width,
                                           [cr if o else None for cr, o in zip(cs, ok)])
            flits = [a + b for a, b in zip(flits, fwd)]
            flits_rev = [a + b for a, b in zip(flits_rev, rev)]
            assert all(g["step"] == 0 and g["flags"] == 0 and g["cycles"] > 0
                       for g, o in zip(got, ok) if o), got
    for r in range(N):
        bad = np.flatnonzero(run.memories[r] != model.mem[r])
        assert bad.size == 0, (f"rank {r} words {bad.tolist()}: got "
                               f"{[hex(v) for v in run.memories[r][bad]]}, expected "
                               f"{[hex(v) for v in model.mem[r][bad]]}")
    assert run.flits == flits
    assert run.flits_rev == (flits_rev if ring.config.collective.reverse else [])
    assert run.overflow == 0
    return run
