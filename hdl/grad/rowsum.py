"""Per-row FP32 sum for back-to-back rows: interleaved lanes, then a pipelined pairwise tree.

Used by :class:`~hdl.grad.softmax.SoftmaxXent` for the softmax denominator. Unlike
:class:`~hdl.lib.lanesum.LaneSum` (one reduction at a time, a sequential combine that stalls
the input), this sums a *stream of rows* with no pause between rows, so every row costs only
its own element cycles.

Order (golden model :func:`sim.model.grad.row_sum`, bit-exact). A row of ``C`` values is fed as
``M = max(C, lanes)`` slots; slots ``C..M-1`` carry ``+0`` (rows shorter than ``lanes``).
Slot ``i`` goes to lane ``i mod lanes``: the lane's first slot (``i < lanes``) computes
``+0 + x``, later slots ``part + x``. The *final* value of each lane (its last slot,
``i >= M - lanes``) leaves the adder in slot order, so the finals arrive as
``f_k = part[(M + k) mod lanes]`` for ``k = 0..lanes-1``. A tree of ``log2(lanes)`` adders
combines consecutive pairs: ``((f0 + f1) + (f2 + f3)) + ((f4 + f5) + (f6 + f7))`` for 8 lanes.

Every value is non-negative (``e = exp(z - mx) >= +0``, padding ``+0``) or NaN, so the adders
are :class:`~hdl.fp32.add.FP32Add` with ``same_sign`` (no leading-zero count or normalising
shift; the same words).

Hardware: one accumulation adder (``lanes > La``: a lane's next add is issued after its
previous result is back), one adder per tree level below the last two, and one adder for the
last two levels together (``lanes >= 8``; with fewer lanes one adder per level). Nothing
stalls: a row's sum appears a fixed :func:`row_sum_latency` cycles after its last slot, and
rows may follow each other without a gap. Not a component: :func:`row_sum` adds the logic to
the caller's module.

The shared adder of the last two levels takes, per row, ``A`` (the first half's pair), ``B``
(the second half's) and ``C = A + B``. ``B`` and ``C`` are issued the cycle their operands
are ready, as on adders of their own, so the sum keeps its cycle: with ``t_B`` the cycle
``B``'s pair is complete, ``C`` issues at ``t_B + La``; rows' ``t_B`` are at least ``lanes``
cycles apart (a row's finals come after the row before's), more than ``La``, so no ``B`` or
``C`` meets another. ``A`` (complete at ``t_A <= t_B - lanes / 2``) waits in a register and
is issued in the first cycle after that no ``B`` or ``C`` takes: the ``B``/``C`` cycles come
in runs of at most two (``t_B + La + 1`` can be the next row's ``t_B`` when ``La = lanes -
1``; ``t_B + 1`` is ``t_B + La`` only when ``La = 1``; both cannot hold), so ``A`` is issued
by ``t_A + 3 < t_B`` and its result is back before ``B``'s.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Mux, Signal

from ..fp32.config import FP32Config
from ..lib.dataflow import operands, result

__all__ = ["row_sum", "row_sum_latency"]


def row_sum_latency(lanes: int, fp32_config: FP32Config) -> int:
    """Cycles from the last slot of a row entering :func:`row_sum` to its sum's ``valid``:
    the accumulation add, then one add per tree level (each issued the cycle its second
    operand arrives)."""
    la = fp32_config.latency("fp32_add")
    return la * (1 + (lanes.bit_length() - 1))


def row_sum(m, *, valid, x, first, final, lane, lanes: int, fp32_config: FP32Config,
            prefix: str = "rowsum"):
    """Add the row-sum pipeline to ``m``.

    Parameters
    ----------
    valid : Value
        A slot enters this cycle (any number of idle cycles between slots is allowed).
    x : Value, 32 bits
        The slot's FP32 value (``+0`` for padding slots): non-negative or NaN (the adders
        assume effective additions, ``same_sign``).
    first, final : Value, 1 bit
        The slot is its lane's first (``i < lanes``) / last (``i >= M - lanes``) in the row.
    lane : Value
        ``i mod lanes``.
    lanes : int
        Power of two, greater than the adder latency.

    Returns
    -------
    (Signal, Signal)
        ``(sum_valid, sum)``: one pulse per row, ``row_sum_latency`` cycles after the row's
        last slot, in row order.
    """
    from ..fp32.add import FP32Add

    la = fp32_config.latency("fp32_add")
    if lanes & (lanes - 1) or lanes <= la:
        raise ValueError(f"row_sum: lanes ({lanes}) must be a power of two above the adder "
                         f"latency ({la})")
    levels = lanes.bit_length() - 1

    # --- accumulation: interleaved lanes ---------------------------------------------------
    # A slot's lane part is selected a cycle ahead into ``{prefix}_next_part``, so the adder's
    # input is a register (or +0), not an 8-way select: within a row the next slot's lane is
    # the lane after the last slot's (i mod lanes), and a row's first slots take +0 whatever
    # the register holds. The register follows every cycle, idle ones included, and takes the
    # adder's result for that lane when it is written in the same cycle.
    m.submodules[f"{prefix}_acc_add"] = acc = FP32Add(config=fp32_config, same_sign=True)
    part = Array(Signal(32, name=f"{prefix}_lane_{j}") for j in range(lanes))
    lb = (lanes - 1).bit_length()
    last_lane = Signal(lb, name=f"{prefix}_last_lane")
    next_lane = Signal(lb, name=f"{prefix}_next_lane")    # the lane after this cycle's slot
    next_part = Signal(32, name=f"{prefix}_next_part")
    m.d.comb += [
        next_lane.eq(Mux(valid, lane, last_lane) + 1),
        acc.o.ready.eq(1),
        acc.i.valid.eq(valid),
        operands(acc.i.payload).eq(Cat(Mux(first, Const(0, 32), next_part), x, Const(0, 1))),
    ]
    with m.If(valid):
        m.d.sync += last_lane.eq(lane)
    lane_tag, final_tag = lane, final
    for d in range(la):
        t = Signal(len(lane), name=f"{prefix}_lane_tag_{d + 1}", reset_less=True)
        f = Signal(name=f"{prefix}_final_tag_{d + 1}", reset_less=True)
        m.d.sync += [t.eq(lane_tag), f.eq(final_tag)]
        lane_tag, final_tag = t, f
    acc_r = Signal(32, name=f"{prefix}_acc_r")
    m.d.comb += acc_r.eq(result(acc.o.payload))
    with m.If(acc.o.valid):
        m.d.sync += part[lane_tag].eq(acc_r)
    m.d.sync += next_part.eq(Mux(acc.o.valid & (lane_tag == next_lane), acc_r,
                                 part[next_lane]))

    # --- pipelined pairwise tree over the lanes' finals, in arrival order ---------------------
    v, val = Signal(name=f"{prefix}_final_valid"), Signal(32, name=f"{prefix}_final")
    m.d.comb += [v.eq(acc.o.valid & final_tag), val.eq(acc_r)]
    shared = levels >= 3                # the last two levels on one adder (module docstring)
    for lvl in range(levels - 2 if shared else levels):
        m.submodules[f"{prefix}_tree_add_{lvl}"] = add = FP32Add(config=fp32_config, same_sign=True)
        hold = Signal(32, name=f"{prefix}_tree_{lvl}_hold", reset_less=True)
        half = Signal(name=f"{prefix}_tree_{lvl}_half")
        m.d.comb += [
            add.o.ready.eq(1),
            add.i.valid.eq(v & half),
            operands(add.i.payload).eq(Cat(hold, val, Const(0, 1))),
        ]
        with m.If(v):
            m.d.sync += half.eq(~half)
            with m.If(~half):
                m.d.sync += hold.eq(val)
        nv, nval = Signal(name=f"{prefix}_tree_{lvl}_valid"), Signal(32, name=f"{prefix}_tree_{lvl}_r")
        m.d.comb += [nv.eq(add.o.valid), nval.eq(result(add.o.payload))]
        v, val = nv, nval
    if shared:
        v, val = _last_two_levels(m, v, val, la=la, fp32_config=fp32_config,
                                  prefix=f"{prefix}_tree_{levels - 2}")
    return v, val


def _last_two_levels(m, v, val, *, la: int, fp32_config: FP32Config, prefix: str):
    """The tree's last two levels on one adder: the stream ``(v, val)`` of a row's four
    values ``q0 .. q3`` in, ``(q0 + q1) + (q2 + q3)`` out, at the cycles two adders would give
    (module docstring). Returns ``(sum_valid, sum)``."""
    from ..fp32.add import FP32Add

    m.submodules[f"{prefix}_add"] = add = FP32Add(config=fp32_config, same_sign=True)
    hold = Signal(32, name=f"{prefix}_hold", reset_less=True)
    half = Signal(name=f"{prefix}_half")            # q1 or q3 arrives: a pair is complete
    second = Signal(name=f"{prefix}_second")        # the next pair is the row's second (B)
    a_pend = Signal(name=f"{prefix}_a_pending")     # A waits for a free cycle
    a_ops = Signal(64, name=f"{prefix}_a_operands", reset_less=True)
    a_sum = Signal(32, name=f"{prefix}_a_sum", reset_less=True)     # A's result, for C
    r = Signal(32, name=f"{prefix}_r")
    m.d.comb += r.eq(result(add.o.payload))
    pair = v & half
    # each issue's kind, to its result: 1 A, 2 B, 3 C (0 none)
    kind = Signal(2, name=f"{prefix}_issue")
    tags = [kind]
    for d in range(la):
        t = Signal(2, name=f"{prefix}_tag_{d + 1}")
        m.d.sync += t.eq(tags[-1])
        tags.append(t)
    done = tags[la]
    issue_c = add.o.valid & (done == 2)             # B's result back: C = A + B now
    issue_b = pair & second
    m.d.comb += [add.o.ready.eq(1), add.i.valid.eq(kind != 0)]
    with m.If(issue_c):
        m.d.comb += [kind.eq(3), operands(add.i.payload).eq(Cat(a_sum, r, Const(0, 1)))]
    with m.Elif(issue_b):
        m.d.comb += [kind.eq(2), operands(add.i.payload).eq(Cat(hold, val, Const(0, 1)))]
    with m.Elif(a_pend):
        m.d.comb += [kind.eq(1), operands(add.i.payload).eq(Cat(a_ops, Const(0, 1)))]
    with m.If(v):
        m.d.sync += half.eq(~half)
        with m.If(~half):
            m.d.sync += hold.eq(val)
    with m.If(pair):
        m.d.sync += second.eq(~second)
    with m.If(pair & ~second):
        m.d.sync += [a_pend.eq(1), a_ops.eq(Cat(hold, val))]
    with m.Elif(kind == 1):
        m.d.sync += a_pend.eq(0)
    with m.If(add.o.valid & (done == 1)):
        m.d.sync += a_sum.eq(r)
    sv, s = Signal(name=f"{prefix}_valid"), Signal(32, name=f"{prefix}_sum")
    m.d.comb += [sv.eq(add.o.valid & (done == 3)), s.eq(r)]
    return sv, s
