"""Golden model of the collective engine's ring all-reduce and point-to-point ``SENDRECV``
(pure numpy, bit-exact).

Mirrors :mod:`hdl.multi.collective`: the same :class:`~hdl.multi.config.CollectiveConfig`,
the same segments (:func:`segments`), the same schedule (step ``t`` sends segment
``(r - t) mod N`` and receives ``(r - t - 1) mod N``) and the same FP32 additions
(``received + local``, numpy ``float32``, NaN canonicalised to ``0x7FC00000`` as
:class:`hdl.fp32.add.FP32Add` produces), so every rank's result is predicted bit for bit,
and :func:`validate` gives the status the engine answers to a command. With BFP link
compression every sent segment is what the link codecs (:mod:`hdl.multi.codec`) deliver:
:func:`sim.model.bfp.quantize` (in the command's ``rounding``) then
:func:`sim.model.bfp.dequantize`, in groups from the segment's start (a group holding a NaN or
an infinity arrives as canonical NaNs), and one local step comes between the reduce-scatter
and the all-gather: each rank passes its reduced segment through its own codecs (no link
carries it), and the all-gather relays that quantized segment. Each rank's transmit
converter has its LFSR (:class:`sim.model.bfp.LFSR`), which steps ``noise_bits`` times for
every group it converts, in every rounding mode; stochastic rounding takes a group's noise from
it, so :class:`CollectiveModel` keeps each rank's LFSR from one command to the next, as the
hardware does until reset.

Summation order: segment ``k`` is reduced as ``((x_k + x_{k+1}) + x_{k+2}) + ... + x_{k-1}``
(ranks mod ``N``); :func:`sum_order` lists it.

``SENDRECV`` (:func:`ring_sendrecv`): one command per rank; rank ``r``'s words
``mem[base : base + length]`` land, bit for bit, in rank ``r + 1``'s
``mem[rbase : rbase + rlength]``; every rank's ``length`` must equal the next rank's
``rlength``. With reverse links (``CollectiveConfig.reverse``) a command chooses its
directions: ``sdir = 1`` sends to rank ``r - 1`` (on reverse link ``r``), ``rdir = 1``
receives from rank ``r + 1``; the pairing holds per direction (rank ``r``'s ``sdir = 1``
send meets rank ``r - 1``'s ``rdir = 1`` receive). :meth:`CollectiveModel.execute` runs one
command per rank of either opcode; :func:`sendrecv_flits` gives the flits a ``SENDRECV`` puts
on each link, :func:`sendrecv_link_flits` on each forward and each reverse link.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hdl.config import BFPConfig
from hdl.multi.config import CollComp, CollectiveConfig, CollOp, CollStatus, flits_per_group

from .bfp import LFSR, ROUND_NEAREST, ROUNDING_MODES, dequantize, quantize
from .fp32 import QNAN, bits_to_f32, canon

__all__ = ["segments", "schedule", "sum_order", "validate", "bfp_link", "ring_allreduce",
           "link_flits", "add_f32", "bfp_allreduce_bound", "ring_sendrecv", "sendrecv_flits", "sendrecv_link_flits",
           "CollectiveModel"]


def _check_config(config) -> CollectiveConfig:
    if not isinstance(config, CollectiveConfig):
        raise TypeError(f"config must be a CollectiveConfig, not {type(config).__name__}")
    return config


def segments(length: int, seg: int, ranks: int) -> list[tuple[int, int]]:
    """``(start, count)`` of segment ``k = 0 .. ranks - 1``: ``[k*seg, min((k+1)*seg,
    length))``, empty past the end."""
    out = []
    for k in range(ranks):
        start = k * seg
        out.append((start, max(0, min(seg, length - start))))
    return out


def schedule(rank: int, ranks: int, comp: int = CollComp.NONE) -> list[tuple[int, int, bool]]:
    """``(send segment, receive segment, reduce)`` of every step of rank ``rank``: ``2N - 2``
    steps, the first ``N - 1`` reduce-scatter (``reduce``), then all-gather; with BFP
    compression a local step comes between them (step ``N - 1``), ``(own, own, False)`` with
    ``own = (rank + 1) mod N``: the rank sends its reduced segment to itself through its codecs
    (send equals receive marks a local step; no ring step has it), and the all-gather then
    sends the quantized segment on."""
    plan = [((rank - t) % ranks, (rank - t - 1) % ranks, t < ranks - 1)
            for t in range(2 * (ranks - 1))]
    if comp == CollComp.BFP:
        own = (rank + 1) % ranks
        plan.insert(ranks - 1, (own, own, False))
    return plan


def sum_order(segment: int, ranks: int) -> list[int]:
    """The ranks whose contributions segment ``segment`` sums, left to right."""
    return [(segment + j) % ranks for j in range(ranks)]


def _overlap(base: int, length: int, rbase: int, rlength: int) -> bool:
    """Both regions non-empty and sharing a word (regions that only touch do not)."""
    return bool(length and rlength and base < rbase + rlength and rbase < base + length)


def validate(config: CollectiveConfig, *, op: int, base: int, length: int, seg: int = 0,
             timeout: int, comp: int = CollComp.NONE, width: int = 0, rbase: int = 0,
             rlength: int = 0, gbase: int = 0, sdir: int = 0, rdir: int = 0,
             rounding: int = ROUND_NEAREST) -> int:
    """The status the engine answers before running (``OK`` when it runs). ``rbase``,
    ``rlength``, ``sdir`` and ``rdir`` only count for ``SENDRECV`` (a direction bit on an
    engine without reverse links is ``BAD_DIR``, after ``BAD_COMP`` and before ``BAD_LEN``),
    ``seg`` only for a plain or BFP ``ALLREDUCE``, ``rounding`` only for a BFP one (code 3,
    no rounding mode, is ``BAD_COMP``);
    a top-k ``ALLREDUCE`` (``comp = CollComp.TOPK``) checks its three regions: the vector
    ``[base, +length)``, the residual ``[rbase, +length)`` and the gather buffer
    ``[gbase, +N * TopK.message_words(length))``."""
    cfg = _check_config(config)
    bfp = comp == CollComp.BFP
    if comp not in CollComp.ALL:
        return CollStatus.BAD_COMP if op in CollOp.ALL else CollStatus.BAD_OP
    if op == CollOp.SENDRECV:
        if comp != CollComp.NONE:
            return CollStatus.BAD_COMP
        if (sdir or rdir) and not cfg.reverse:
            return CollStatus.BAD_DIR
        if ((length == 0 and rlength == 0) or base + length > cfg.depth
                or rbase + rlength > cfg.depth or _overlap(base, length, rbase, rlength)):
            return CollStatus.BAD_LEN
        if timeout == 0:
            return CollStatus.BAD_TIMEOUT
        return CollStatus.OK
    if op != CollOp.ALLREDUCE:
        return CollStatus.BAD_OP
    if bfp and (width not in cfg.bfp.widths or rounding not in ROUNDING_MODES):
        return CollStatus.BAD_COMP
    if comp == CollComp.TOPK:
        if cfg.topk is None:
            return CollStatus.BAD_COMP
        glen = cfg.ranks * cfg.topk.message_words(length)
        if (length == 0 or base + length > cfg.depth or rbase + length > cfg.depth
                or gbase + glen > cfg.depth or _overlap(base, length, rbase, length)
                or _overlap(base, length, gbase, glen) or _overlap(rbase, length, gbase, glen)):
            return CollStatus.BAD_LEN
        return CollStatus.BAD_TIMEOUT if timeout == 0 else CollStatus.OK
    if length == 0 or base + length > cfg.depth:
        return CollStatus.BAD_LEN
    if seg == 0 or seg * cfg.ranks < length:
        return CollStatus.BAD_SEG
    if timeout == 0:
        return CollStatus.BAD_TIMEOUT
    return CollStatus.OK


def add_f32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """FP32 ``a + b`` on bit patterns, as the hardware adder (NaN -> the canonical NaN)."""
    with np.errstate(all="ignore"):
        r = (bits_to_f32(a) + bits_to_f32(b)).astype(np.float32)
    return canon(r.view(np.uint32))


def bfp_link(words: np.ndarray, config: BFPConfig, width: int, *,
             rounding: int = ROUND_NEAREST, lfsr: LFSR | None = None) -> tuple[np.ndarray, int]:
    """What a BFP-compressed link delivers for ``words`` (uint32, one segment), and the flags
    of the sent groups (bit 0 a NaN, bit 1 an infinity). The segment is sent padded with
    ``+0`` words to whole groups of ``group_size`` and the receiver keeps its first
    ``len(words)`` words. A group holding a NaN or an infinity crosses as a NaN group: it
    arrives as ``group_size`` canonical NaNs (:func:`hdl.multi.config.nan_group_exp`).
    ``lfsr``: the sending rank's converter LFSR, stepped once per group (padding groups
    included) in every ``rounding``; required for stochastic rounding."""
    words = np.asarray(words, np.uint32)
    n, G = len(words), config.group_size
    if rounding not in ROUNDING_MODES:
        raise ValueError(f"rounding must be one of {ROUNDING_MODES}, not {rounding!r}")
    if lfsr is None and rounding != ROUND_NEAREST:
        raise ValueError("a link that does not round to nearest needs the sender's lfsr")
    padded = np.concatenate([words, np.zeros(-n % G, np.uint32)])
    g = quantize(bits_to_f32(padded), config, width=width, rounding=rounding, lfsr=lfsr)
    flags = int(np.any(g.invalid)) | (int(np.any(g.overflow)) << 1)
    out = dequantize(g, config, width=width).view(np.uint32).copy()
    bad = np.repeat(np.asarray(g.invalid | g.overflow, bool).reshape(-1), G)
    out[bad] = QNAN
    return out[:n], flags


def ring_allreduce(vectors, seg: int, *, comp: int = CollComp.NONE,
                   bfp: tuple[BFPConfig, int] | None = None, flags: list | None = None,
                   rounding: int = ROUND_NEAREST, lfsrs: list | None = None
                   ) -> list[np.ndarray]:
    """Run the ring all-reduce on ``vectors`` (one ``uint32`` array of bit patterns per rank,
    all the same length) exactly as the engines do, step by step; return every rank's vector
    afterwards (all equal). With ``comp = CollComp.BFP``, ``bfp = (config, width)`` and every
    sent segment crosses :func:`bfp_link` in ``rounding``; ``flags`` (a list, one int per
    rank) collects each rank's sent-group flags; ``lfsrs`` (one :class:`~sim.model.bfp.LFSR`
    per rank, advanced in place) are the ranks' transmit converters' LFSRs, fresh ones (the
    state after reset) when omitted."""
    ranks = len(vectors)
    if ranks < 2:
        raise ValueError(f"ring_allreduce needs at least 2 ranks, not {ranks}")
    mem = [np.asarray(v, dtype=np.uint32).copy() for v in vectors]
    length = len(mem[0])
    if any(len(v) != length for v in mem):
        raise ValueError("every rank's vector must have the same length")
    if seg < 1 or seg * ranks < length:
        raise ValueError(f"seg must be >= 1 and seg * ranks >= length, not {seg!r}")
    if comp == CollComp.BFP and bfp is None:
        raise ValueError("BFP compression needs bfp=(BFPConfig, width)")
    if comp == CollComp.BFP:
        if lfsrs is None:
            lfsrs = [LFSR(bfp[0]) for _ in range(ranks)]
        if len(lfsrs) != ranks:
            raise ValueError(f"lfsrs: {len(lfsrs)} for {ranks} ranks")
    segs = segments(length, seg, ranks)
    plans = [schedule(r, ranks, comp) for r in range(ranks)]
    for t in range(len(plans[0])):
        # every rank sends before anyone writes: a step's sends read the previous step's state
        sent = []
        for r in range(ranks):
            s0, n = segs[plans[r][t][0]]
            words = mem[r][s0:s0 + n].copy()
            if comp == CollComp.BFP and n:
                words, f = bfp_link(words, *bfp, rounding=rounding, lfsr=lfsrs[r])
                if flags is not None:
                    flags[r] |= f
            sent.append(words)
        for r in range(ranks):
            send, recv, reduce = plans[r][t]
            s0, n = segs[recv]
            incoming = sent[r if send == recv else (r - 1) % ranks]
            assert len(incoming) == n
            mem[r][s0:s0 + n] = add_f32(incoming, mem[r][s0:s0 + n]) if reduce else incoming
    return mem


def bfp_allreduce_bound(vectors, seg: int, bfp: tuple[BFPConfig, int]) -> np.ndarray:
    """A bound on ``|result - exact sum|`` per element of a BFP-compressed ring all-reduce
    (:func:`ring_allreduce` with ``comp = CollComp.BFP``), from the inputs alone.

    Segment ``s`` is summed in :func:`sum_order`, ``x_0, .., x_{N-1}``: ``p_1 = x_0``; hop
    ``k`` (``k = 1 .. N-1``) sends ``q_k = Q(p_k)`` over a link and the receiver adds
    ``p_{k+1} = fl(q_k + x_k)``; the owner's ``p_N`` crosses the codecs once more (the
    all-gather and the local step), ``result = Q(p_N)``. So, exactly,

    ``result - sum(x) = sum_k (q_k - p_k) + sum_k (p_{k+1} - (q_k + x_k)) + (Q(p_N) - p_N)``:

    * **quantization** ``|Q(p)_i - p_i| < ulp_g = 2**(e_g - (w-1))`` (``e_g`` the exponent of
      the group's largest ``|p_i|``, so ``ulp_g <= 2**(1-w) * max_g |p_i|``): half an ulp by
      round-to-nearest, but up to one ulp where the largest element rounds up to ``2**w`` and
      is clamped to ``2**w - 1``, and less than one by stochastic rounding or truncation (the
      bound holds in every ``rounding``); plus ``2**-149`` where the FP32 result of
      dequantizing is subnormal and rounded;
    * **addition** ``|fl(a + b) - (a + b)| <= 2**-24 |fl(a + b)|`` (round to nearest), plus
      ``2**-149`` below the normal range;
    * **forwarding** adds nothing: ``Q(Q(p)) = Q(p)`` (the largest element of ``Q(p)`` keeps
      its exponent, ``2**e_g <= Q(p)_max < 2**(e_g+1)``, so the grid is the same, and ``Q(p)``
      has no bits below it for noise to carry into), except where
      dequantizing rounded below ``2**-149`` (at most ``2**-148`` per hop, added).

    The bound follows ``P_k``, an upper bound on ``|p_k|`` per element
    (``P_{k+1} = (P_k + D_k + |x_k|)(1 + 2**-24) + 2**-149``, ``D_k = 2**(1-w) max_g P_k +
    2**-149``) in float64, rounded up by a relative ``1e-12``. It holds for finite inputs whose
    partial sums stay finite; ``ValueError`` otherwise. The group layout is the engine's:
    groups of ``group_size`` from each segment's start. For large ``N`` or ``w = 2`` it is
    loose: each hop's ulp is bounded by the largest partial sum of the whole group.

    Parameters
    ----------
    vectors : list of ndarray
        One ``uint32`` array of FP32 bit patterns per rank, all the same length.
    seg : int
        Segment length, as for :func:`ring_allreduce`.
    bfp : (BFPConfig, int)
        The link's BFP configuration and mantissa width ``w``.

    Returns
    -------
    ndarray
        float64 bound per element.
    """
    config, width = bfp
    N = len(vectors)
    if N < 2:
        raise ValueError(f"bfp_allreduce_bound needs at least 2 ranks, not {N}")
    x = [bits_to_f32(np.asarray(v, np.uint32)).astype(np.float64) for v in vectors]
    length = len(x[0])
    if any(len(v) != length for v in x):
        raise ValueError("every rank's vector must have the same length")
    if not all(np.isfinite(v).all() for v in x):
        raise ValueError("the bound holds for finite inputs only")
    if seg < 1 or seg * N < length:
        raise ValueError(f"seg must be >= 1 and seg * ranks >= length, not {seg!r}")
    step, u, tiny = 2.0 ** (1 - width), 2.0 ** -24, 2.0 ** -149
    G = config.group_size
    out = np.zeros(length)
    for s, (s0, n) in enumerate(segments(length, seg, N)):
        order = sum_order(s, N)
        for g0 in range(s0, s0 + n, G):
            g = slice(g0, min(g0 + G, s0 + n))
            P = np.abs(x[order[0]][g])
            E = np.zeros_like(P)
            for k in range(1, N):
                D = step * P.max() + tiny
                P = (P + D + np.abs(x[order[k]][g])) * (1 + u) + tiny
                E = E + D + u * P + tiny
            E = E + step * P.max() + tiny + (N - 1) * 2.0 ** -148
            if not np.isfinite(P).all() or P.max() >= float(np.finfo(np.float32).max):
                raise ValueError("the partial sums may overflow FP32: no bound")
            out[g] = E * (1 + 1e-12)
    return out


def link_flits(config: CollectiveConfig, flit_bits: int, *, length: int, seg: int,
               comp: int = CollComp.NONE, width: int = 0) -> list[int]:
    """Flits of ``flit_bits`` that one accepted all-reduce puts on each link (link ``r``
    leaves rank ``r``): ``32 / flit_bits`` per word, or :func:`flits_per_group` per BFP
    group (each segment padded to whole groups); the local step puts none."""
    N = config.ranks
    if comp == CollComp.TOPK:      # every rank's message crosses N - 1 links
        return [(N - 1) * config.topk.message_words(length) * (32 // flit_bits)] * N
    segs = segments(length, seg, N)
    out = []
    for r in range(N):
        sent = [segs[s][1] for s, rcv, _ in schedule(r, N, comp) if s != rcv]
        if comp == CollComp.BFP:      # each segment padded to whole groups
            G = config.bfp.group_size
            out.append(sum(-(-n // G) for n in sent)
                       * flits_per_group(config.bfp, width, flit_bits))
        else:
            out.append(sum(sent) * (32 // flit_bits))
    return out


def _dirs(c) -> tuple[int, int]:
    """``(sdir, rdir)`` of a ``SENDRECV`` command (missing keys: 0); ``ValueError`` unless
    each is 0 or 1 (1-bit fields)."""
    out = []
    for k in ("sdir", "rdir"):
        v = c.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v not in (0, 1):
            raise ValueError(f"{k} must be 0 or 1, not {v!r}")
        out.append(int(v))
    return out[0], out[1]


def ring_sendrecv(memories, commands) -> list[np.ndarray]:
    """Apply one ``SENDRECV`` per rank to ``memories`` (one ``uint32`` array per rank) and
    return the memories afterwards (copies).

    ``commands[r]`` is a mapping with ``base``, ``length``, ``rbase``, ``rlength`` and
    optionally ``sdir``, ``rdir`` (missing: 0; other keys ignored), or ``None`` for a rank
    that neither sends nor receives (it rejected its command). Rank ``r``'s
    ``mem[base : base + length]`` lands, bit for bit, in ``mem[rbase : rbase + rlength]`` of
    rank ``r + 1`` (``sdir = 0``, forward link ``r``), whose command must have ``rdir = 0``,
    or of rank ``r - 1`` (``sdir = 1``, reverse link ``r``), whose command must have
    ``rdir = 1`` (all mod ``N``; on two ranks both are the other rank, over different links);
    nothing else changes. The model does not check that the engines have reverse links
    (:func:`validate` does). ``ValueError``, per direction, when the words rank ``r`` sends
    on a link are not the words the rank at its other end receives from it (the hardware
    would time out, or leave words on the link for the next command), when a region leaves
    its memory, or when a rank's two regions overlap (the engine answers ``BAD_LEN``). A
    rank with ``length == rlength == 0`` does nothing here (the engine answers ``BAD_LEN``:
    :func:`validate`)."""
    ranks = len(memories)
    if ranks < 2:
        raise ValueError(f"ring_sendrecv needs at least 2 ranks, not {ranks}")
    if len(commands) != ranks:
        raise ValueError(f"ring_sendrecv: {len(commands)} commands for {ranks} ranks")
    mem = [np.asarray(m, dtype=np.uint32).copy() for m in memories]
    regions, dirs = [], []
    for r, c in enumerate(commands):
        if c is None:
            regions.append((0, 0, 0, 0))
            dirs.append((0, 0))
            continue
        b, n, rb, rn = (int(c[k]) for k in ("base", "length", "rbase", "rlength"))
        if min(b, n, rb, rn) < 0 or b + n > len(mem[r]) or rb + rn > len(mem[r]):
            raise ValueError(f"rank {r}: region [{b}, {b + n}) or [{rb}, {rb + rn}) outside "
                             f"its {len(mem[r])} words")
        if _overlap(b, n, rb, rn):
            raise ValueError(f"rank {r}: send region [{b}, {b + n}) overlaps receive region "
                             f"[{rb}, {rb + rn})")
        regions.append((b, n, rb, rn))
        dirs.append(_dirs(c))
    # link (d, r) leaves rank r: forward (d = 0) to r + 1, reverse (d = 1) to r - 1
    for d, what in ((0, "forward"), (1, "reverse")):
        for r in range(ranks):
            dst = (r + (1 if d == 0 else -1)) % ranks
            sent = regions[r][1] if dirs[r][0] == d else 0
            got = regions[dst][3] if dirs[dst][1] == d else 0
            if sent != got:
                raise ValueError(f"rank {r} sends {sent} words but rank {dst} receives {got} "
                                 f"({what} link {r}: sdir = {d}, rdir = {d}): the hardware "
                                 f"would time out or mis-frame")
    # a rank's two regions are disjoint, so every send reads the words from before the copy
    sent = [mem[r][b:b + n].copy() for r, (b, n, _, _) in enumerate(regions)]
    for r in range(ranks):
        if regions[r][1]:
            dst = (r + (1 if dirs[r][0] == 0 else -1)) % ranks
            rb, rn = regions[dst][2:]
            mem[dst][rb:rb + rn] = sent[r]
    return mem


def sendrecv_flits(flit_bits: int, lengths) -> list[int]:
    """Flits of ``flit_bits`` that ``SENDRECV`` commands put on each link (link ``r`` leaves
    rank ``r``): ``32 / flit_bits`` per word of rank ``r``'s ``length`` (FP32 words only;
    give 0 for a rank that rejected its command, and for a rank whose command sends on the
    reverse links: :func:`sendrecv_link_flits` separates the directions)."""
    return [int(n) * (32 // flit_bits) for n in lengths]


def sendrecv_link_flits(flit_bits: int, commands) -> tuple[list[int], list[int]]:
    """Flits of ``flit_bits`` that one ``SENDRECV`` per rank puts on each link, per direction.

    Parameters
    ----------
    flit_bits : int
        The links' flit width (divides 32; forward and reverse links alike).
    commands : sequence of mapping or None
        Per rank, the command (``length`` and optionally ``sdir``, missing: 0), or ``None``
        for a rank that rejected its command (it sends nothing).

    Returns
    -------
    forward, reverse : list of int
        Per rank ``r``, the flits on forward link ``r`` (to rank ``r + 1``: the command's
        ``length`` words when ``sdir = 0``) and on reverse link ``r`` (to rank ``r - 1``:
        when ``sdir = 1``), ``32 / flit_bits`` per word.
    """
    fwd, rev = [], []
    for c in commands:
        n = 0 if c is None else int(c["length"])
        sdir = 0 if c is None else _dirs(c)[0]
        fwd.append(0 if sdir else n)
        rev.append(n if sdir else 0)
    return sendrecv_flits(flit_bits, fwd), sendrecv_flits(flit_bits, rev)


#: command fields :meth:`CollectiveModel.execute` fills in when left out
_DEFAULTS = {"op": CollOp.ALLREDUCE, "seg": 0, "timeout": 1000, "comp": CollComp.NONE,
             "width": 0, "rbase": 0, "rlength": 0, "gbase": 0, "sdir": 0, "rdir": 0,
             "rounding": ROUND_NEAREST}


class CollectiveModel:
    """Golden model of ``N`` engines with their memories (:class:`hdl.multi.ring.CollectiveRing`):
    :meth:`execute` (one command per rank) and :meth:`allreduce` (the same command on every
    rank) answer the statuses the engines give and update the memories as they do (a
    ``BAD_*`` command changes nothing).

    Parameters
    ----------
    config : CollectiveConfig

    Attributes
    ----------
    mem : list of numpy.ndarray
        Per rank, the engine's memory (``depth`` ``uint32`` words).
    flags : list of int
        Each rank's ``rsp.flags`` of the last command.
    sendrecv_words : list of int
        Per rank ``r``, the FP32 words its accepted ``SENDRECV`` s sent on forward link ``r``
        (to rank ``r + 1``, ``sdir = 0``) since construction.
    sendrecv_words_rev : list of int
        Likewise on reverse link ``r`` (to rank ``r - 1``, ``sdir = 1``); all 0 without
        reverse links. Flits: ``32 / flit_bits`` per word (:func:`sendrecv_link_flits`).
    lfsr : list of sim.model.bfp.LFSR
        Per rank, its transmit converter's LFSR (stepped by every BFP group the rank sends
        or loops back, in every rounding mode; reset state at construction).
    """

    def __init__(self, config: CollectiveConfig | None = None):
        self.config = _check_config(config or CollectiveConfig())
        self.mem = [np.zeros(self.config.depth, dtype=np.uint32)
                    for _ in range(self.config.ranks)]
        self.flags = [0] * self.config.ranks
        self.sendrecv_words = [0] * self.config.ranks
        self.sendrecv_words_rev = [0] * self.config.ranks
        self.lfsr = [LFSR(self.config.bfp) for _ in range(self.config.ranks)]

    def allreduce(self, *, base: int, length: int, seg: int = 0, timeout: int = 1000,
                  op: int = CollOp.ALLREDUCE, comp: int = CollComp.NONE, width: int = 0,
                  rbase: int = 0, rlength: int = 0, gbase: int = 0, sdir: int = 0,
                  rdir: int = 0, rounding: int = ROUND_NEAREST) -> int:
        """The same command on every rank (any ``op``, despite the name: a ``SENDRECV`` then
        needs ``length == rlength`` and ``sdir == rdir``); its status, the same on every
        rank."""
        return self.execute(dict(op=op, base=base, length=length, seg=seg, timeout=timeout,
                                 comp=comp, width=width, rbase=rbase, rlength=rlength,
                                 gbase=gbase, sdir=sdir, rdir=rdir, rounding=rounding))[0]

    def execute(self, commands) -> list[int]:
        """Run one command on every rank: ``commands`` is a mapping (the same command on
        every rank) or a sequence of ``N`` mappings (rank ``r`` gets ``commands[r]``), with
        the fields of :func:`hdl.multi.collective.cmd_layout` (``base`` and ``length``
        required, the others default to :data:`_DEFAULTS`). Returns every rank's status and
        sets :attr:`flags`.

        The ranks that answer ``OK`` must either all run the same ``ALLREDUCE`` (``base``,
        ``length``, ``seg``, ``comp``, ``width``, and with BFP ``rounding``; then no rank may
        answer ``BAD_*``) or all
        run ``SENDRECV`` (:func:`ring_sendrecv`, with each command's ``sdir`` / ``rdir``; a
        rank answering ``BAD_*`` sends and receives nothing, so the ``rlength`` / ``length``
        of its partners in either direction must be 0; :attr:`sendrecv_words` and
        :attr:`sendrecv_words_rev` count the words sent); ``ValueError`` otherwise: the
        engines would time out, or mix the commands' words."""
        N = self.config.ranks
        if isinstance(commands, Mapping):
            commands = [commands] * N
        cmds = [{**_DEFAULTS, **c} for c in commands]
        if len(cmds) != N:
            raise ValueError(f"execute: {len(cmds)} commands for {N} ranks")
        statuses = [validate(self.config, **c) for c in cmds]
        self.flags = [0] * N
        ok = [r for r in range(N) if statuses[r] == CollStatus.OK]
        ops = {cmds[r]["op"] for r in ok}
        if not ok:
            return statuses

        def agree(keys, what):
            if len(ok) != N or any(tuple(c[k] for k in keys) != tuple(cmds[0][k] for k in keys)
                                   for c in cmds):
                raise ValueError(f"{what} on every rank (and every rank accepting it): "
                                 f"{cmds}, statuses {statuses}")

        if ops == {CollOp.ALLREDUCE} and cmds[ok[0]]["comp"] == CollComp.TOPK:
            agree(("base", "length", "comp", "rbase", "gbase"),
                  "a top-k ALLREDUCE needs the same regions")
            from .compress import topk_ring      # compress imports this module
            c = cmds[0]
            self.mem = topk_ring(self.mem, base=c["base"], length=c["length"], rbase=c["rbase"],
                                 gbase=c["gbase"], topk=self.config.topk)
        elif ops == {CollOp.ALLREDUCE}:
            agree(("base", "length", "seg", "comp", "width")
                  + (("rounding",) if cmds[0]["comp"] == CollComp.BFP else ()),
                  "an ALLREDUCE needs the same command")
            c = cmds[0]
            base, length, width = c["base"], c["length"], c["width"]
            out = ring_allreduce([m[base:base + length] for m in self.mem], c["seg"],
                                 comp=c["comp"], bfp=(self.config.bfp, width),
                                 flags=self.flags, rounding=c["rounding"], lfsrs=self.lfsr)
            for m, v in zip(self.mem, out):
                m[base:base + length] = v
        elif ops == {CollOp.SENDRECV}:
            run = [cmds[r] if r in ok else None for r in range(N)]
            out = ring_sendrecv(self.mem, run)
            for m, v in zip(self.mem, out):
                m[:] = v
            fwd, rev = sendrecv_link_flits(32, run)     # one flit per word: words
            self.sendrecv_words = [a + b for a, b in zip(self.sendrecv_words, fwd)]
            self.sendrecv_words_rev = [a + b for a, b in zip(self.sendrecv_words_rev, rev)]
        else:
            raise ValueError(f"ranks accepting different opcodes in one command: {cmds}")
        return statuses
