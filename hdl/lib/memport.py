"""Memory-port interfaces: how engines reach the shared FP32 scratchpads (docs/core.md).

Two port shapes, both seen from the **client** (the engine): ``Out`` members are driven by the
client, ``In`` members by the memory.

* :class:`LinePort` - a line of ``words`` FP32 words per access. This is what a scratchpad
  bank offers and what the bank crossbar (:class:`hdl.core.scratchpad.Scratchpad`) connects.
* :class:`WordPort` - one 32-bit word per access, for engines that stream one element per
  cycle (optimizer); :class:`WordToLine` adapts it to a :class:`LinePort` at a run-time base
  line, :class:`WordPortsToLine` several that take turns onto one.
* :class:`SharedLinePort` - two line clients that are never active in the same cycle (the host
  and an engine) on one crossbar client.

Timing of both (the contract every client may rely on):

* read: ``r_data`` holds the word/line addressed by ``r_addr`` in the cycle **after** a cycle
  with ``r_en = 1`` (one cycle latency, not transparent: a write to the same address in the
  same cycle is not seen). While ``r_en = 0`` ``r_data`` keeps its value, as long as no other
  client reads the same bank (the sequencer's bank scoreboard guarantees exclusive use of a
  bank while an instruction runs).
* write: ``w_en`` (one bit per word of a line; one bit for a word port) writes ``w_data`` to
  ``w_addr`` at the clock edge.

A *registered* client of the scratchpad (:class:`hdl.core.scratchpad.Scratchpad`
``registered``, the FPGA build's ``CoreConfig.spad_reg``) sees everything one cycle later:
read data two cycles after ``r_en``, a write landing at the following edge. An
*out_registered* one (``CoreConfig.spad_out_reg``) gets its read data one cycle later again
(three cycles after ``r_en`` in the FPGA build). Its engine is built for that latency
(``ArrayConfig.mem_latency``, the vector readers' ``latency``, :class:`WordPortsToLine`
``latency``; ``CoreConfig.spad_latency``).
"""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .delay import delay
from .mustuse import mark_used, used_if_rejected

__all__ = ["BLOCK_RAM", "LinePort", "WordPort", "WordToLine", "WordPortsToLine",
           "serve_read", "serve_write",
           "SharedLinePort"]

#: ``attrs=`` for a :class:`amaranth.lib.memory.Memory` that should become block RAM.
#: yosys's ``memory_libmap`` honours ``ram_style``; without it, it maps a small memory
#: (e.g. 32 x 76 bits with two read ports) to LUT RAM, which on the ECP5 costs six logic
#: cells per 16 x 4 bits. Only a synthesis hint: simulation and the generated Verilog's
#: behaviour are unchanged. Use it on memories with synchronous read ports only.
BLOCK_RAM = {"ram_style": "block"}


def _check(owner, name, value, lo):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}.{name} must be an int, not {type(value).__name__} {value!r}")
    if value < lo:
        raise ValueError(f"{owner}.{name} must be >= {lo}, not {value!r}")


def _line_of(base, addr, lg):
    """The line of word ``addr`` of a region at line ``base`` (``2**lg`` words a line)."""
    return base + (addr >> lg)


def _lane_of(addr, lg):
    """The word of its line that word ``addr`` is (0 with one word a line)."""
    return addr[:lg] if lg else 0


def serve_read(m, port, rp, latency: int, name: str):
    """Connect a client's read members (``port.r_en``, ``r_addr``, ``r_data``) to the read
    port ``rp`` of a :class:`~amaranth.lib.memory.Memory` with the scratchpad's timing at
    ``latency`` (for standalone tops and test harnesses without the crossbar): 1, the
    memory itself; 2, the request registered first (a ``registered`` client); 3, the read
    data registered too (``registered`` and ``out_registered``)."""
    if latency not in (1, 2, 3):
        raise ValueError(f"serve_read: latency must be 1, 2 or 3, not {latency!r}")
    addr = Signal.like(rp.addr, name=f"{name}_raddr")
    en = Signal(name=f"{name}_ren")
    m.d["sync" if latency >= 2 else "comb"] += [addr.eq(port.r_addr), en.eq(port.r_en)]
    m.d.comb += [rp.addr.eq(addr), rp.en.eq(en)]
    if latency == 3:
        q = Signal.like(rp.data, name=f"{name}_rdata_q")
        m.d.sync += q.eq(rp.data)
        m.d.comb += port.r_data.eq(q)
    else:
        m.d.comb += port.r_data.eq(rp.data)


def serve_write(m, port, wp, latency: int, name: str):
    """Connect a client's write members to the write port ``wp``: registered first with
    ``latency >= 2`` (as :func:`serve_read`)."""
    if latency not in (1, 2, 3):
        raise ValueError(f"serve_write: latency must be 1, 2 or 3, not {latency!r}")
    addr = Signal.like(wp.addr, name=f"{name}_waddr")
    en = Signal.like(wp.en, name=f"{name}_wen")
    data = Signal.like(wp.data, name=f"{name}_wdata")
    m.d["sync" if latency >= 2 else "comb"] += [addr.eq(port.w_addr), en.eq(port.w_en),
                                                data.eq(port.w_data)]
    m.d.comb += [wp.addr.eq(addr), wp.en.eq(en), wp.data.eq(data)]


class LinePort(wiring.Signature):
    """A line-wide read + write port (client view).

    Parameters
    ----------
    addr_bits : int
        Width of a line address.
    words : int
        FP32 words per line (``S``).

    Members
    -------
    r_addr : Out(addr_bits)
    r_en : Out(1)
    r_data : In(32 * words)
        Word ``j`` in bits ``32j .. 32j+31``.
    w_addr : Out(addr_bits)
    w_en : Out(words)
        Write enable per word (bit ``j`` writes word ``j``).
    w_data : Out(32 * words)
    """

    def __init__(self, *, addr_bits: int, words: int):
        _check("LinePort", "addr_bits", addr_bits, 1)
        _check("LinePort", "words", words, 1)
        self.addr_bits, self.words = addr_bits, words
        super().__init__({
            "r_addr": Out(addr_bits), "r_en": Out(1), "r_data": In(32 * words),
            "w_addr": Out(addr_bits), "w_en": Out(words), "w_data": Out(32 * words),
        })

    def __eq__(self, other):
        return (isinstance(other, LinePort) and self.addr_bits == other.addr_bits
                and self.words == other.words)

    def __repr__(self):
        return f"LinePort(addr_bits={self.addr_bits}, words={self.words})"


class WordPort(wiring.Signature):
    """A one-word read + write port (client view); same timing as :class:`LinePort`.

    Members
    -------
    r_addr, r_en, r_data (In(32)), w_addr, w_en (Out(1)), w_data (Out(32))
    """

    def __init__(self, *, addr_bits: int):
        _check("WordPort", "addr_bits", addr_bits, 1)
        self.addr_bits = addr_bits
        super().__init__({
            "r_addr": Out(addr_bits), "r_en": Out(1), "r_data": In(32),
            "w_addr": Out(addr_bits), "w_en": Out(1), "w_data": Out(32),
        })

    def __eq__(self, other):
        return isinstance(other, WordPort) and self.addr_bits == other.addr_bits

    def __repr__(self):
        return f"WordPort(addr_bits={self.addr_bits})"


class WordToLine(wiring.Component):
    """Word port onto a line port at a run-time base line.

    Word ``i`` lives in line ``base + i // words``, lane ``i % words``. Reads select the lane
    registered with the read and held ``latency`` cycles (the line port's read latency);
    writes enable one lane.

    Parameters
    ----------
    word_bits : int
        Word address width of the client's port.
    line_bits : int
        Line address width of the memory side.
    words : int
        Words per line, a power of two.
    latency : int
        Read latency of the line port, 1..3 (a registered scratchpad client: 2 or 3); the word
        port's is the same.

    Members
    -------
    word : In(WordPort(addr_bits=word_bits))
        The client's port (flipped: this block answers it).
    line : Out(LinePort(addr_bits=line_bits, words=words))
    base : In(line_bits)
        Line of word 0; hold it while the client runs.
    """

    def __init__(self, *, word_bits: int, line_bits: int, words: int, latency: int = 1):
        with used_if_rejected(self):
            _check("WordToLine", "words", words, 1)
            if words & (words - 1):
                raise ValueError(f"WordToLine.words must be a power of two, not {words!r}")
            _check("WordToLine", "latency", latency, 1)
            if latency > 3:
                raise ValueError(f"WordToLine.latency must be 1, 2 or 3, not {latency!r}")
        self.words, self.latency = words, latency
        super().__init__({
            "word": In(WordPort(addr_bits=word_bits)),
            "line": Out(LinePort(addr_bits=line_bits, words=words)),
            "base": In(line_bits),
        })

    def elaborate(self, platform):
        m = Module()
        S = self.words
        lg = (S - 1).bit_length()
        w, ln = self.word, self.line
        lane = Signal(range(S), name="rd_lane")
        with m.If(w.r_en):
            m.d.sync += lane.eq(_lane_of(w.r_addr, lg))
        lane = delay(m, lane, self.latency - 1, "rd_lane")
        m.d.comb += [
            ln.r_addr.eq(_line_of(self.base, w.r_addr, lg)),
            ln.r_en.eq(w.r_en),
            w.r_data.eq(ln.r_data.word_select(lane, 32) if lg else ln.r_data),
            ln.w_addr.eq(_line_of(self.base, w.w_addr, lg)),
            ln.w_data.eq(w.w_data.replicate(S)),
            ln.w_en.eq(w.w_en << _lane_of(w.w_addr, lg)),
        ]
        return m


class WordPortsToLine(wiring.Component):
    """``n`` word ports, each at its own run-time base line, onto **one** line port, one port
    per cycle: for a client whose ports access memory together at most once every ``n``
    cycles (the optimizer with shared FP32 units, ``OptimConfig.ii >= n``: it reads ``W, M,
    V, G`` at one address and writes ``W, M, V`` together), so that it takes one scratchpad
    client instead of ``n``.

    Port ``k``'s accesses go to the line port ``k + 1`` cycles after the client made them
    (registered: no path runs from the client's logic into the crossbar): a read made in cycle
    ``t`` reaches memory in cycle ``t + k + 1`` and its word is on port ``k``'s ``r_data`` in
    cycle ``t + n + 1`` (every port: read latency ``n + 1`` = ``1 + skew`` instead of 1); a
    write made in cycle ``t`` is written at the end of cycle ``t + k + 1``. Word ``i`` of port
    ``k`` is lane ``i % words`` of line ``base[k] + i // words`` (:class:`WordToLine`).

    The client's contract: reads of different ports only in one and the same cycle, and no
    two such cycles fewer than ``n`` apart; the same for writes (reads and writes are
    independent: a bank has a read and a write port). Then the delayed accesses never meet.
    ``r_data`` is meaningful in the cycle ``t + n + 1`` (ports ``k < n - 1`` hold it until
    their next read; port ``n - 1`` shows the line port's word of that cycle).

    With ``latency = 2`` or 3 (a line port whose read data comes that many cycles after its
    ``r_en``: the scratchpad's ``registered`` and ``out_registered`` clients) every read's
    word comes ``latency - 1`` cycles later: read latency ``n + latency``.

    Parameters
    ----------
    ports : int
        ``n`` (>= 1).
    word_bits, line_bits, words : as :class:`WordToLine`.
    latency : int
        The line port's read latency, 1 (default), 2 or 3.

    Attributes
    ----------
    skew : int
        ``n + latency - 1``: the extra read latency (over the contract's one cycle), and at
        least the most cycles a write lands late.

    Members
    -------
    word : In(WordPort(addr_bits=word_bits)).array(ports)
    base : In(line_bits).array(ports)
        Line of each port's word 0; hold them while the client runs.
    line : Out(LinePort(addr_bits=line_bits, words=words))
    """

    def __init__(self, *, ports: int, word_bits: int, line_bits: int, words: int,
                 latency: int = 1):
        with used_if_rejected(self):
            _check("WordPortsToLine", "ports", ports, 1)
            _check("WordPortsToLine", "words", words, 1)
            _check("WordPortsToLine", "latency", latency, 1)
            if words & (words - 1):
                raise ValueError(f"WordPortsToLine.words must be a power of two, not {words!r}")
            if latency > 3:
                raise ValueError(f"WordPortsToLine.latency must be 1, 2 or 3, not {latency!r}")
        self.ports, self.words, self.latency = ports, words, latency
        self.skew = ports + latency - 1
        super().__init__({
            "word": In(WordPort(addr_bits=word_bits)).array(ports),
            "base": In(line_bits).array(ports),
            "line": Out(LinePort(addr_bits=line_bits, words=words)),
        })

    def elaborate(self, platform):
        m = Module()
        n, S = self.ports, self.words
        lg = (S - 1).bit_length()
        ln = self.line
        lb = len(ln.r_addr)

        # the line port's inputs: the OR of every port's delayed access (one at a time)
        r_en, w_en, w_data = Const(0, 1), Const(0, S), Const(0, 32)
        r_addr = w_addr = Const(0, lb)
        hits = []
        for k in range(n):
            w = self.word[k]
            line_r = Signal(lb, name=f"p{k}_rline")
            line_w = Signal(lb, name=f"p{k}_wline")
            lane_r = Signal(max(lg, 1), name=f"p{k}_rlane")
            lane_w = Signal(max(lg, 1), name=f"p{k}_wlane")
            m.d.comb += [line_r.eq(_line_of(self.base[k], w.r_addr, lg)),
                         line_w.eq(_line_of(self.base[k], w.w_addr, lg)),
                         lane_r.eq(_lane_of(w.r_addr, lg)), lane_w.eq(_lane_of(w.w_addr, lg))]
            en_k = delay(m, w.r_en, k + 1, f"p{k}_ren")
            addr_k = delay(m, line_r, k + 1, f"p{k}_raddr", reset_less=True)
            lane_k = delay(m, lane_r, k + 1, f"p{k}_rlane", reset_less=True)
            r_en = r_en | en_k
            r_addr = r_addr | Mux(en_k, addr_k, 0)
            # the read's port and lane, registered with it (``latency`` times): its word is on
            # the line port's r_data then
            hit, lane = en_k, lane_k
            for j in range(self.latency):
                nh = Signal(name=f"p{k}_hit" + (f"{j}" if j else ""))
                nl = Signal(max(lg, 1), name=f"p{k}_lane" + (f"{j}" if j else ""))
                m.d.sync += nh.eq(hit)
                with m.If(hit):
                    m.d.sync += nl.eq(lane)
                hit, lane = nh, nl
            hits.append((hit, lane))
            wen_k = delay(m, w.w_en, k + 1, f"p{k}_wen")
            waddr_k = delay(m, line_w, k + 1, f"p{k}_waddr", reset_less=True)
            wlane_k = delay(m, lane_w, k + 1, f"p{k}_wlane", reset_less=True)
            wdata_k = delay(m, w.w_data, k + 1, f"p{k}_wdata", reset_less=True)
            w_en = w_en | Mux(wen_k, Const(1, S) << wlane_k, 0)
            w_addr = w_addr | Mux(wen_k, waddr_k, 0)
            w_data = w_data | Mux(wen_k, wdata_k, 0)
        m.d.comb += [ln.r_en.eq(r_en), ln.r_addr.eq(r_addr), ln.w_en.eq(w_en),
                     ln.w_addr.eq(w_addr), ln.w_data.eq(w_data.replicate(S))]
        for k, (hit, lane) in enumerate(hits):
            word = ln.r_data.word_select(lane, 32) if lg else ln.r_data
            if k == n - 1:                 # in cycle t + n + latency itself
                m.d.comb += self.word[k].r_data.eq(word)
            else:                          # captured at t + k + 1 + latency, shown after
                held = Signal(32, name=f"p{k}_rdata")
                with m.If(hit):
                    m.d.sync += held.eq(word)
                m.d.comb += self.word[k].r_data.eq(held)
        return m


class SharedLinePort(wiring.Component):
    """Two :class:`LinePort` clients that never access memory in the same cycle, on one.

    For clients that take turns by construction: the core's host port reads and writes only
    while no program runs, the engines only while one does. ``first``'s request wins a cycle
    in which both make one (their contract says this never happens); such a cycle sets the
    sticky ``clash``, as the crossbar's ``conflict`` does for two clients on one bank port.
    Combinational: the timing of :class:`LinePort` is unchanged, and both clients see the one
    ``r_data``. The requests pass 2:1 multiplexers selected by ``first``'s enables (the read
    enables ORed), or with ``select`` by the ``r_sel`` / ``w_sel`` inputs: then only the
    selected client's requests reach memory.

    Parameters
    ----------
    addr_bits, words : int
        As :class:`LinePort`.
    select : bool
        Add ``r_sel`` and ``w_sel``: the owner supplies which client may read (write), so the
        multiplexers hang on those (registers in the core), not on a client's enable, which
        is off the path from a client's state into a bank's address. A request from the other
        client then sets ``clash`` too.

    Members
    -------
    first, second : In(LinePort(addr_bits=addr_bits, words=words))
        The two clients (the memory side of each).
    line : Out(LinePort(addr_bits=addr_bits, words=words))
        The one client toward the crossbar.
    clash : Out(1)
        Sticky: both made a read, or both a write, in one cycle, or (``select``) the client
        not selected made one (up from the next cycle).
    r_sel, w_sel : In(1), only with ``select``
        1: ``second`` may read (write), 0: ``first`` may.
    """

    def __init__(self, *, addr_bits: int, words: int, select: bool = False):
        if not isinstance(select, bool):
            mark_used(self)                  # rejected: no "never used" warning
            raise TypeError(f"SharedLinePort.select must be a bool, not {select!r}")
        self.select = select
        port = LinePort(addr_bits=addr_bits, words=words)
        super().__init__({"first": In(port), "second": In(port), "line": Out(port),
                          "clash": Out(1),
                          **({"r_sel": In(1), "w_sel": In(1)} if select else {})})

    def elaborate(self, platform):
        m = Module()
        a, b, line = self.first, self.second, self.line
        a_w, b_w = a.w_en.any(), b.w_en.any()
        if self.select:
            # the selected client's requests pass, the other's are dropped (and set clash)
            r_a, w_a = ~self.r_sel, ~self.w_sel
            m.d.comb += line.r_en.eq(Mux(r_a, a.r_en, b.r_en))
        else:
            r_a, w_a = a.r_en, a_w
            m.d.comb += line.r_en.eq(a.r_en | b.r_en)
        m.d.comb += [
            line.r_addr.eq(Mux(r_a, a.r_addr, b.r_addr)),
            line.w_en.eq(Mux(a_w, a.w_en, b.w_en)),
            line.w_addr.eq(Mux(w_a, a.w_addr, b.w_addr)),
            line.w_data.eq(Mux(w_a, a.w_data, b.w_data)),
            a.r_data.eq(line.r_data), b.r_data.eq(line.r_data),
        ]
        clash = (a.r_en & b.r_en) | (a_w & b_w)
        if self.select:
            clash = (clash | (a.r_en & self.r_sel) | (b.r_en & ~self.r_sel)
                     | (a_w & self.w_sel) | (b_w & ~self.w_sel))
        with m.If(clash):
            m.d.sync += self.clash.eq(1)
        return m
