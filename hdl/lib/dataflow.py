"""Fixed-latency composition of pipelined FP32 units with automatic delay balancing.

Not a component: a helper used inside ``elaborate`` of the datapath components -- the optimizer
(:mod:`hdl.optim`) and the gradient datapaths (:mod:`hdl.grad`) -- and, with ``m=None``, at
construction time to compute their ``latency`` from the units' latencies. :func:`credit_fifo`
puts a stream with backpressure behind such a pipeline.

Every FP32 unit (:mod:`hdl.fp32`) is a stall pipeline with ``i.ready = ~o.valid | o.ready``.
A datapath built here holds every unit's ``o.ready`` at 1, so each unit accepts one operation
per cycle and returns it exactly ``unit.latency`` cycles later. A :class:`Node` is a value with
the cycle (relative to the datapath's input) at which it is valid; an operation delays its
operands with shift registers to the latest operand's time (as soon as possible scheduling).
Time-invariant operands (registers held constant during a pass) have time ``None`` and are never
delayed. The resulting datapath accepts one element per cycle and never stalls; whoever feeds
it must accept its output ``latency`` cycles later (the optimizer writes it to memory).

**Shared units** (``ii > 1``, the initiation interval): the datapath accepts at most one
element every ``ii`` cycles, and every element must enter in a cycle congruent to the first
one's modulo ``ii`` (the caller's contract: e.g. the optimizer engine issues its reads only
when its slot counter is 0). Operations of one kind (multiply, add, ...) then share units:
each unit has ``ii`` slots, an operation scheduled at time ``t`` takes slot ``t mod ii`` of a
unit, and two operations of one unit never share a slot. So two elements, whose entry cycles
differ by a multiple of ``ii``, never reach a unit in the same cycle: a kind with ``n``
operations needs ``ceil(n / ii)`` units instead of ``n``. An operation whose earliest time
finds no free slot waits up to ``ii - 1`` cycles for one (its operands are delayed to it);
only when every slot of every unit of its kind is taken does it get a unit of its own. A
unit's operands are selected by the delayed valid bit of the operation in that slot and
registered in front of the unit (a shared operation takes the unit's latency + 1); results
are the same words as with ``ii = 1`` (the same operations, in the same order), only later.
With ``ii = 1`` every operation has a unit of its own, as before. With ``ii > 1`` each
operation adds an ``m.If`` on its valid bit: build the graph at the top level of
``elaborate`` (not inside another ``m.If`` or an FSM state).

**Units outside** (``external``): an operation may go to a unit that is not the
datapath's own but reached through a :class:`UnitPort` (with ``ii = 1`` its first operations
of each kind, in the order they are built; with ``ii > 1`` its first shared units of each kind,
each port then carrying the operations of that unit's slots). The port carries the
operation's valid bit and operands in the cycle it enters; :func:`pool_unit` puts one unit
behind several such ports of datapaths that never run at the same time (e.g. the vector
unit's elementwise lane and its softmax, which take one instruction at a time): their valid
bits select the operands (AND-OR) into a register in front of the unit, and every port sees
the unit's result. Such an operation takes
the unit's latency + 1 (as a shared operation does) and gives the same words. A shared unit
(``ii > 1``) that is external keeps its timing: the pool's register takes the place of its own.
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import check_int
from ..fp32.config import FP32Config
from ..fp32.divsqrt_config import FP32DivSqrtConfig

__all__ = ["Node", "Dataflow", "operands", "result", "credit_fifo", "UNIT_OPERAND_BITS",
           "UnitPort", "check_units", "unit_members", "unit_ports", "pool_unit"]

#: Operand bits of each kind of FP32 unit (:func:`operands` order: ``a``, ``b``, ``sub``).
UNIT_OPERAND_BITS = {"add": 65, "mul": 64, "div": 64, "sqrt": 32, "exp": 32}


class UnitPort(wiring.Signature):
    """A datapath's port to an FP32 unit of ``kind`` outside it (datapath view).

    Members
    -------
    valid : Out(1)
        An operation enters the unit this cycle.
    ops : Out(UNIT_OPERAND_BITS[kind])
        Its operands (:func:`operands` order).
    result : In(32)
        The unit's result: the operation's, ``latency`` cycles after it entered.
    """

    def __init__(self, kind: str):
        if kind not in UNIT_OPERAND_BITS:
            raise ValueError(f"UnitPort.kind must be one of {sorted(UNIT_OPERAND_BITS)}, not "
                             f"{kind!r}")
        self.kind = kind
        super().__init__({"valid": Out(1), "ops": Out(UNIT_OPERAND_BITS[kind]),
                          "result": In(32)})

    def __eq__(self, other):
        return isinstance(other, UnitPort) and self.kind == other.kind

    def __repr__(self):
        return f"UnitPort({self.kind!r})"


def check_units(owner: str, units, available: dict) -> tuple:
    """``units`` as a tuple of unit kinds (a component's ``units=`` parameter), at most
    ``available[kind]`` of each (the datapath's operations of that kind); ``TypeError`` /
    ``ValueError`` naming ``owner.units`` otherwise."""
    if not isinstance(units, (tuple, list)):
        raise TypeError(f"{owner}.units must be a tuple of unit kinds, not {units!r}")
    for k in units:
        if k not in UNIT_OPERAND_BITS:
            raise ValueError(f"{owner}.units: {k!r} is not one of {sorted(UNIT_OPERAND_BITS)}")
        n, have = list(units).count(k), available.get(k, 0)
        if n > have:
            raise ValueError(f"{owner}.units: {n} {k!r} units, but the datapath has {have} "
                             f"such operations")
    return tuple(units)


def unit_members(kinds) -> dict:
    """Signature members of a datapath component whose operations of ``kinds`` (in order; a
    kind may repeat) use units outside it: ``unit_<kind><n>``, ``Out(UnitPort(kind))``."""
    members, count = {}, {}
    for kind in kinds:
        n = count.get(kind, 0)
        count[kind] = n + 1
        members[f"unit_{kind}{n}"] = Out(UnitPort(kind))
    return members


def unit_ports(component, kinds) -> dict:
    """``{kind: [ports]}`` of ``component``'s :func:`unit_members` (the ``external`` of a
    :class:`Dataflow`); with ``component = None`` placeholders for a timing-only one."""
    ports, count = {}, {}
    for kind in kinds:
        n = count.get(kind, 0)
        count[kind] = n + 1
        ports.setdefault(kind, []).append(
            None if component is None else getattr(component, f"unit_{kind}{n}"))
    return ports


def pool_unit(m, name: str, unit, ports) -> None:
    """Put ``unit`` (an FP32 unit: ``i``, ``o``, fixed ``latency``) behind ``ports``
    (:class:`UnitPort` interfaces of datapaths that never issue in the same cycle): the
    operands of the port whose ``valid`` is set (AND-OR) are registered in front of the
    unit, every port gets the result (``latency + 1`` cycles after its operation)."""
    m.submodules[name] = unit
    width = len(operands(unit.i.payload))
    ops = Const(0, width)
    valid = Const(0, 1)
    for p in ports:
        ops = ops | Mux(p.valid, p.ops, 0)
        valid = valid | p.valid
    sel = Signal(width, name=f"{name}_ops", reset_less=True)
    sel_valid = Signal(name=f"{name}_valid")
    m.d.sync += [sel_valid.eq(valid), sel.eq(ops)]
    m.d.comb += [unit.i.valid.eq(sel_valid), operands(unit.i.payload).eq(sel),
                 unit.o.ready.eq(1)]
    m.d.comb += [p.result.eq(result(unit.o.payload)) for p in ports]


def operands(payload):
    """The unit input payload as a plain Value. Every FP32 unit's input is bit-positional:
    ``a`` in bits 0..31, ``b`` in 32..63, then ``sub`` (add) -- whether the payload is declared
    as a struct or as plain bits."""
    return Value.cast(payload)


def result(payload):
    """The FP32 result (bits 0..31) of a unit's output payload."""
    return Value.cast(payload)[0:32]


@dataclass
class Node:
    value: object        # Amaranth Value (None in timing-only mode)
    t: int | None        # cycle at which ``value`` is valid; None = time-invariant
    name: str = ""


class Dataflow:
    """Builder of a fixed-latency FP32 pipeline.

    Parameters
    ----------
    m : Module or None
        Module to add hardware to; ``None`` computes timing only.
    valid : Value or None
        Valid bit of the datapath input (time 0).
    fp32_config, divsqrt_config : unit configurations (their latencies set the schedule).
    prefix : str
        Prefix of generated signal and submodule names.
    ii : int
        Initiation interval: cycles between two elements at the least (module docstring,
        *Shared units*); 1 (one element per cycle, a unit per operation) unless given.
    """

    def __init__(self, m, valid, *, fp32_config: FP32Config, divsqrt_config: FP32DivSqrtConfig,
                 prefix: str = "df", ii: int = 1, external: dict | None = None):
        check_int("Dataflow", "ii", ii, lo=1)
        self.ii = ii
        self._external = {k: list(v) for k, v in (external or {}).items()}
        self._pools: dict[str, list[_Shared]] = {}
        self.m = m
        self.fp32_config = fp32_config
        self.divsqrt_config = divsqrt_config
        self.prefix = prefix
        self._valid = [valid]
        self._delays: dict[int, list] = {}
        self._count = 0

    # -- basics ---------------------------------------------------------------------------------
    @property
    def hw(self) -> bool:
        return self.m is not None

    def _uname(self, name: str) -> str:
        self._count += 1
        return f"{self.prefix}_{name}_{self._count}"

    def input(self, value, name: str, t: int = 0) -> Node:
        return Node(value, t, name)

    def const(self, value, name: str) -> Node:
        return Node(value, None, name)

    def valid_at(self, t: int):
        """The input valid bit delayed by ``t`` cycles (reset to 0)."""
        while len(self._valid) <= t:
            prev = self._valid[-1]
            if self.hw:
                sig = Signal(name=f"{self.prefix}_valid_{len(self._valid)}")
                self.m.d.sync += sig.eq(prev)
            else:
                sig = None
            self._valid.append(sig)
        return self._valid[t]

    def at(self, node: Node, t: int):
        """``node``'s value delayed to time ``t`` (``t >= node.t``)."""
        if node.t is None:
            return node.value
        if t < node.t:
            raise ValueError(f"{node.name} is valid at {node.t}, needed at {t}")
        if not self.hw:
            return None
        # With ii > 1 an element is valid one cycle in ii, so a delay of d cycles is
        # ceil(d / ii) registers instead of d: stage k takes stage k - 1 when the element that
        # stage 1 took at node.t is at node.t + (k - 1) * ii (its delayed valid bit) and holds
        # it until the next element gets there, at least ii cycles later. It holds the value
        # through node.t + (k - 1) * ii + 1 .. node.t + k * ii, every delay in that window is
        # a tap on it, and the words are those of a plain shift register. With shared units
        # the nodes of one unit's operations hold the same signal in different slots
        # (different node.t): one chain per signal and time.
        if self.ii == 1:
            key, stage, tag = id(node), t - node.t, "d"
        else:
            key, stage, tag = (id(node.value), node.t), -(-(t - node.t) // self.ii), "s"
        chain = self._delays.setdefault(key, [node.value])
        # keep the node (and so its value) alive so that id() stays unique
        self._delays.setdefault(("keep", key), node)
        while len(chain) <= stage:
            k, prev = len(chain), chain[-1]
            sig = Signal(len(Value.cast(prev)), name=f"{self.prefix}_{node.name}_{tag}{k}",
                         reset_less=True)
            if self.ii > 1:
                prev = Mux(self.valid_at(node.t + (k - 1) * self.ii), prev, sig)
            self.m.d.sync += sig.eq(prev)
            chain.append(sig)
        return chain[stage]

    @staticmethod
    def time(*nodes) -> int:
        ts = [n.t for n in nodes if n.t is not None]
        return max(ts) if ts else 0

    def comb(self, fn, *nodes, name: str) -> Node:
        """A combinational function of ``nodes`` (no latency); ``fn`` gets aligned values."""
        t = self.time(*nodes)
        if not self.hw:
            return Node(None, t, name)
        sig = Signal(32, name=self._uname(name))
        self.m.d.comb += sig.eq(fn(*[self.at(n, t) for n in nodes]))
        return Node(sig, t, name)

    def select(self, sel, cases: dict, default: Node, *, name: str) -> Node:
        """``cases[k]`` when the (time-invariant) ``sel == k``, else ``default``."""
        nodes = list(cases.values()) + [default]
        t = self.time(*nodes)
        if not self.hw:
            return Node(None, t, name)
        sig = Signal(32, name=self._uname(name))
        expr = self.at(default, t)
        for k, n in cases.items():
            expr = Mux(sel == k, self.at(n, t), expr)
        self.m.d.comb += sig.eq(expr)
        return Node(sig, t, name)

    # -- units ----------------------------------------------------------------------------------
    def units(self, kind: str | None = None) -> int:
        """FP32 units instantiated so far (of one ``kind`` when given: ``"mul"``, ``"add"``,
        ``"div"``, ``"sqrt"``, ``"exp"``); with ``ii = 1`` one per operation."""
        return sum(len(p) for k, p in self._pools.items() if kind in (None, k))

    def _shared_unit(self, kind: str, factory, latency: int, name: str, ops: dict) -> Node:
        """An operation on a shared unit of ``kind`` (``ii > 1``): the earliest time ``t >=``
        its operands' with a free slot ``t mod ii`` on a unit of that kind, else a new unit."""
        t0 = self.time(*ops.values())
        pool = self._pools.setdefault(kind, [])
        choice = next(((u, t0 + d) for d in range(self.ii) for u in pool
                       if (t0 + d) % self.ii not in u.slots), None)
        if choice is None:
            # a new unit: the next external port of this kind if there is one (the pool's
            # operand register stands for this one: the same timing), else one of its own
            port = self._external[kind].pop(0) if self._external.get(kind) else None
            unit = factory() if self.hw and port is None else None
            if unit is not None:
                assert unit.latency == latency, (name, unit.latency, latency)
            choice = (_Shared(unit, self._uname(kind) if self.hw else kind), t0)
            pool.append(choice[0])
            if self.hw:
                sh = choice[0]
                width = UNIT_OPERAND_BITS[kind]
                sh.sel_valid = Signal(name=f"{sh.name}_sel_valid")
                sh.sel = Signal(width, name=f"{sh.name}_sel")
                res = Signal(32, name=f"{sh.name}_r")
                if port is None:
                    self.m.submodules[sh.name] = unit
                    assert len(operands(unit.i.payload)) == width
                    self.m.d.sync += [unit.i.valid.eq(sh.sel_valid),
                                      operands(unit.i.payload).eq(sh.sel)]
                    self.m.d.comb += [unit.o.ready.eq(1), res.eq(result(unit.o.payload))]
                else:
                    self.m.d.comb += [port.valid.eq(sh.sel_valid), port.ops.eq(sh.sel),
                                      res.eq(port.result)]
                sh.result = res
        shared, t = choice
        shared.slots[t % self.ii] = name
        if not self.hw:
            return Node(None, t + 1 + latency, name)
        parts = []
        for field, n in ops.items():
            width = 1 if field == "sub" else 32
            parts.append(Const(n.value, width) if isinstance(n.value, int) else self.at(n, t))
        # the operation in this slot: its element's delayed valid bit selects its operands
        # (registered in front of the unit, so the select adds no logic to the unit's first step)
        with self.m.If(self.valid_at(t)):
            self.m.d.comb += [shared.sel_valid.eq(1), shared.sel.eq(Cat(*parts))]
        return Node(shared.result, t + 1 + latency, name)

    def _unit(self, factory, latency: int, name: str, ops: dict, kind: str = "") -> Node:
        if self.ii > 1:
            return self._shared_unit(kind, factory, latency, name, ops)
        t = self.time(*ops.values())
        ext = bool(self._external.get(kind))
        port = self._external[kind].pop(0) if ext else None
        out_t = t + latency + (1 if ext else 0)    # an external unit's operand register
        self._pools.setdefault(kind, []).append(_Shared(None, name))    # counted by units()
        if not self.hw:
            return Node(None, out_t, name)
        uname = self._uname(name)
        if port is None:
            unit = factory()
            assert unit.latency == latency, (name, unit.latency, latency)
            self.m.submodules[uname] = unit
            self.m.d.comb += [unit.i.valid.eq(self.valid_at(t)), unit.o.ready.eq(1)]
        # operands in bit order a, b, sub (see :func:`operands`)
        parts = []
        for field, n in ops.items():
            width = 1 if field == "sub" else 32       # every FP operand is exactly 32 bits
            if isinstance(n.value, int):
                parts.append(Const(n.value, width))
            else:
                sig = Signal(width, name=f"{uname}_{field}")
                self.m.d.comb += sig.eq(self.at(n, t))
                parts.append(sig)
        res = Signal(32, name=f"{uname}_r")
        if port is None:
            self.m.d.comb += [operands(unit.i.payload).eq(Cat(*parts)),
                              res.eq(result(unit.o.payload))]
        else:
            self.m.d.comb += [port.valid.eq(self.valid_at(t)), port.ops.eq(Cat(*parts)),
                              res.eq(port.result)]
        return Node(res, out_t, name)

    def check_external_used(self) -> None:
        """Raise ``ValueError`` if an external port was given that no operation took."""
        left = {k: len(v) for k, v in self._external.items() if v}
        if left:
            raise ValueError(f"{self.prefix}: external units not used by any operation: {left}")

    def add(self, a: Node, b: Node, *, name: str, sub: bool = False) -> Node:
        def make():
            from ..fp32.add import FP32Add
            return FP32Add(config=self.fp32_config)
        return self._unit(make, self.fp32_config.latency("fp32_add"), name,
                          {"a": a, "b": b, "sub": Node(int(sub), None, "sub")}, kind="add")

    def sub(self, a: Node, b: Node, *, name: str) -> Node:
        return self.add(a, b, name=name, sub=True)

    def mul(self, a: Node, b: Node, *, name: str) -> Node:
        def make():
            from ..fp32.mul import FP32Mul
            return FP32Mul(config=self.fp32_config)
        return self._unit(make, self.fp32_config.latency("fp32_mul"), name, {"a": a, "b": b},
                          kind="mul")

    def div(self, a: Node, b: Node, *, name: str) -> Node:
        def make():
            from ..fp32.div import FP32Div
            return FP32Div(config=self.divsqrt_config)
        return self._unit(make, self.divsqrt_config.div_latency, name, {"a": a, "b": b},
                          kind="div")

    def sqrt(self, a: Node, *, name: str) -> Node:
        def make():
            from ..fp32.sqrt import FP32Sqrt
            return FP32Sqrt(config=self.divsqrt_config)
        return self._unit(make, self.divsqrt_config.sqrt_latency, name, {"a": a}, kind="sqrt")

    def exp(self, a: Node, *, name: str) -> Node:
        def make():
            from ..fp32.exp import FP32Exp
            return FP32Exp(config=self.divsqrt_config)
        return self._unit(make, self.divsqrt_config.exp_latency, name, {"a": a}, kind="exp")


class _Shared:
    """A unit shared by operations (``Dataflow`` with ``ii > 1``): ``slots`` maps a slot
    ``t mod ii`` to the name of the operation that has it."""

    def __init__(self, unit, name: str):
        self.unit = unit
        self.name = name
        self.slots: dict[int, str] = {}
        self.result = None
        self.sel = self.sel_valid = None     # the selected operands and their valid bit


def credit_fifo(m, name: str, *, latency: int, accept, done_valid, done_data, o,
                reg_head: bool = False):
    """Output FIFO for a never-stalling fixed-latency pipeline feeding a stream ``o``.

    The pipeline may accept an element only while ``FIFO level + elements in flight <
    depth`` (the returned ``can_accept``), ``depth = latency + 4``, so every result has a slot
    when it leaves the pipeline and backpressure on ``o`` never drops data. The margin of 4
    over the latency covers the FIFO's own write-to-read delay (``SyncFIFOBuffered``'s 2
    cycles, 3 with ``reg_head``), so an unstalled stream runs at one element per cycle. With
    ``reg_head`` the FIFO is a :class:`~hdl.lib.blockfifo.RegBlockFIFO` of ``depth + 2``
    entries (so it always takes what the credit lets in): ``o``'s payload leaves from a
    fabric register instead of the FIFO memory's read data (a block RAM's, about 4.3 ns after
    the clock on the ECP5), one cycle later.
    ``accept``: an element enters the pipeline this cycle; ``done_valid``/``done_data``: the
    pipeline output. Returns ``can_accept``.
    """
    from .blockfifo import BufferedFIFO, RegBlockFIFO
    width = len(Value.cast(done_data))
    depth = latency + 4
    if reg_head:
        fifo = RegBlockFIFO(width=width, depth=depth + 2)
    else:
        fifo = BufferedFIFO(width=width, depth=depth)
    m.submodules[name] = fifo
    # FIFO level + elements in flight, counted in one register: +1 as an element is accepted,
    # -1 as one leaves the FIFO on ``o`` (a result moving from the pipeline into the FIFO
    # leaves the sum as it is); ``can_accept`` is a register too, the next count's compare
    # with the constant, so the pipeline's accept starts at flip-flops
    occupancy = Signal(range(depth + 1), name=f"{name}_occupancy")
    occupancy_next = Signal.like(occupancy, name=f"{name}_occupancy_next")
    can = Signal(name=f"{name}_can_accept", init=1)
    m.d.comb += occupancy_next.eq(occupancy + accept - (fifo.r_rdy & o.ready))
    m.d.sync += [occupancy.eq(occupancy_next), can.eq(occupancy_next < depth)]
    m.d.comb += [
        fifo.w_en.eq(done_valid), fifo.w_data.eq(done_data),
        o.valid.eq(fifo.r_rdy), Value.cast(o.payload).eq(fifo.r_data), fifo.r_en.eq(o.ready),
    ]
    return can
