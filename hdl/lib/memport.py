"""Memory-port interfaces: how engines reach the shared FP32 scratchpads (docs/core.md).

Two port shapes, both seen from the **client** (the engine): ``Out`` members are driven by the
client, ``In`` members by the memory.

* :class:`LinePort` - a line of ``words`` FP32 words per access. This is what a scratchpad
  bank offers and what the bank crossbar (:class:`hdl.core.scratchpad.Scratchpad`) connects.
* :class:`WordPort` - one 32-bit word per access, for engines that stream one element per
  cycle (optimizer); :class:`WordToLine` adapts it to a :class:`LinePort` at a run-time base
  line.

Timing of both (the contract every client may rely on):

* read: ``r_data`` holds the word/line addressed by ``r_addr`` in the cycle **after** a cycle
  with ``r_en = 1`` (one cycle latency, not transparent: a write to the same address in the
  same cycle is not seen). While ``r_en = 0`` ``r_data`` keeps its value, as long as no other
  client reads the same bank (the sequencer's bank scoreboard guarantees exclusive use of a
  bank while an instruction runs).
* write: ``w_en`` (one bit per word of a line; one bit for a word port) writes ``w_data`` to
  ``w_addr`` at the clock edge.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["BLOCK_RAM", "LinePort", "WordPort", "WordToLine"]

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
    registered with the read (latency 1, like the line port); writes enable one lane.

    Parameters
    ----------
    word_bits : int
        Word address width of the client's port.
    line_bits : int
        Line address width of the memory side.
    words : int
        Words per line, a power of two.

    Members
    -------
    word : In(WordPort(addr_bits=word_bits))
        The client's port (flipped: this block answers it).
    line : Out(LinePort(addr_bits=line_bits, words=words))
    base : In(line_bits)
        Line of word 0; hold it while the client runs.
    """

    def __init__(self, *, word_bits: int, line_bits: int, words: int):
        _check("WordToLine", "words", words, 1)
        if words & (words - 1):
            raise ValueError(f"WordToLine.words must be a power of two, not {words!r}")
        self.words = words
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
            m.d.sync += lane.eq(w.r_addr[:lg] if lg else 0)
        m.d.comb += [
            ln.r_addr.eq(self.base + (w.r_addr >> lg)),
            ln.r_en.eq(w.r_en),
            w.r_data.eq(ln.r_data.word_select(lane, 32) if lg else ln.r_data),
            ln.w_addr.eq(self.base + (w.w_addr >> lg)),
            ln.w_data.eq(w.w_data.replicate(S)),
            ln.w_en.eq(w.w_en << (w.w_addr[:lg] if lg else 0)),
        ]
        return m
