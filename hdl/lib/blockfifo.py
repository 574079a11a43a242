"""FIFOs without yosys's collision logic: :class:`BufferedFIFO`, in block RAM (the matmul
engine's) :class:`BlockFIFO`, and :class:`RegBlockFIFO` whose head leaves from a fabric
register."""
from __future__ import annotations

from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib.fifo import FIFOInterface, SyncFIFOBuffered

from .memport import BLOCK_RAM

#: yosys's memory attribute: the memory's read ports never read a word its write port writes
#: in the same cycle (no collision logic is added for them).
NO_RW_CHECK = {"no_rw_check": 1}

__all__ = ["BufferedFIFO", "BlockFIFO", "RegBlockFIFO", "NO_RW_CHECK"]


class BufferedFIFO(SyncFIFOBuffered):
    """``amaranth.lib.fifo.SyncFIFOBuffered`` whose memory is marked ``no_rw_check`` (a
    synthesis hint only; the behaviour and timing are ``SyncFIFOBuffered``'s).

    ``SyncFIFOBuffered`` reads its memory only while it holds an entry (``inner_level != 0``)
    and writes it only while it has room (``inner_level != depth``), so its read and write
    never address one entry in one cycle (equal pointers mean empty or full), and yosys's
    collision logic for such a read (a registered copy of every write and a bypass mux on the
    read data, docs/toolchain.md) is not needed."""

    #: Cycles from an entry's write to the first cycle it can be read.
    VISIBLE = 2

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.submodules.storage.attrs.update(NO_RW_CHECK)
        return m


class BlockFIFO(BufferedFIFO):
    """:class:`BufferedFIFO` whose memory is marked for block RAM
    (:data:`~hdl.lib.memport.BLOCK_RAM`; its read port is synchronous, so the ECP5 maps it to
    ``DP16KD``s instead of LUT RAM, which costs about six logic-cell sites per 16 x 4 bits).
    A synthesis hint only: the behaviour and timing are ``SyncFIFOBuffered``'s (the head entry
    from a register; an entry written in cycle ``t`` can be read from cycle ``t + 2``, one
    later than ``SyncFIFO``'s)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.submodules.storage.attrs.update(BLOCK_RAM)
        return m


class RegBlockFIFO(Elaboratable, FIFOInterface):
    """A :class:`BlockFIFO` followed by a one-entry stage in flip-flops, the head: ``r_data``
    is a fabric register, not the block RAM's read data (an ECP5 ``DP16KD`` without its output
    register answers about 5.8 ns after the clock, which the logic reading the head then adds
    to). With ``ahead``, a second stage in flip-flops holds the entry after the head,
    ``n_data`` (valid with ``n_rdy``), so a reader can work on the next entry a cycle before
    it reaches the head.

    Same ports and rules as ``amaranth.lib.fifo.SyncFIFO`` (``fwft``), ``depth >= 3``
    (``>= 4`` with ``ahead``); full throughput (the stages refill in the cycle an entry is
    read). An entry written in cycle ``t`` can be read from cycle ``t + 3`` (:attr:`VISIBLE`),
    one later than :class:`BlockFIFO`'s (with ``ahead`` too: an entry enters the empty head
    straight from the block RAM part). It holds up to ``depth`` entries and always takes one
    while it holds fewer than ``depth - 2`` (``depth - 3`` with ``ahead``; ``w_rdy`` is the
    block RAM part's: while the stages and the ``BlockFIFO``'s own head register are empty,
    entries on their way there fill its memory). Size it with that slack.

    With ``decouple``, the second stage is there too (not as a port) but the block RAM part
    is read only while that stage is empty (its head goes into the head register if that is
    free, else into the second stage): the reader's ``r_en`` then reaches only the two
    stages' loads, not the block RAM part's read enable, pointers and level (with ``ahead``
    the stage refills in the cycle it moves to the head, so ``r_en`` reaches them). The head
    holds and changes exactly as without ``decouple``; ``depth >= 4``, the room as with
    ``ahead``.

    Parameters
    ----------
    width, depth : int
    ahead : bool
        Add the second stage and ``n_data``/``n_rdy``.
    decouple : bool
        Add the second stage, read the block RAM part only into an empty one (not with
        ``ahead``).

    Members
    -------
    n_data : Signal(width), n_rdy : Signal(1)
        With ``ahead``: the entry after the head, from a register (``n_rdy`` implies
        ``r_rdy``).
    """

    VISIBLE = BlockFIFO.VISIBLE + 1

    def __init__(self, *, width: int, depth: int, ahead: bool = False,
                 decouple: bool = False):
        for name, value in (("ahead", ahead), ("decouple", decouple)):
            if not isinstance(value, bool):
                self._MustUse__silence = True
                raise TypeError(f"RegBlockFIFO {name} must be a bool, not {value!r}")
        if ahead and decouple:
            self._MustUse__silence = True
            raise ValueError("RegBlockFIFO ahead and decouple are exclusive, not both True")
        staged = ahead or decouple
        low = 4 if staged else 3
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < low:
            self._MustUse__silence = True        # no "never used" warning when rejected
            mode = " with ahead" if ahead else " with decouple" if decouple else ""
            raise ValueError(f"RegBlockFIFO depth must be an integer >= {low}{mode}, "
                             f"not {depth!r}")
        super().__init__(width=width, depth=depth)
        self.ahead = ahead
        self.decouple = decouple
        self.level = Signal(range(depth + 1))
        if ahead:
            self.n_data = Signal(width)
            self.n_rdy = Signal()

    def elaborate(self, platform):
        m = Module()
        staged = self.ahead or self.decouple
        inner = m.submodules.inner = BlockFIFO(width=self.width, depth=self.depth - 1 - staged)
        full = Signal(name="head_valid")
        free = Signal(name="head_free")               # the head is empty or read now
        m.d.comb += [
            free.eq(~full | self.r_en),
            inner.w_data.eq(self.w_data), inner.w_en.eq(self.w_en),
            self.w_rdy.eq(inner.w_rdy),
            self.r_rdy.eq(full),
        ]
        if self.decouple:
            # the block RAM part's head moves out only into an empty second stage (``fill``,
            # from registers): into the head if that is free now, else into the stage (whose
            # data loads on every fill; its valid only when the head did not take it)
            nfull = Signal(name="next_valid")
            n_data = Signal(self.width, name="next_data")
            fill = Signal(name="next_fill")
            m.d.comb += [fill.eq(inner.r_rdy & ~nfull), inner.r_en.eq(fill),
                         self.level.eq(inner.level + full + nfull)]
            with m.If(free & nfull):
                m.d.sync += [self.r_data.eq(n_data), full.eq(1)]
            with m.Elif(free & fill):
                m.d.sync += [self.r_data.eq(inner.r_data), full.eq(1)]
            with m.Elif(self.r_en):
                m.d.sync += full.eq(0)
            with m.If(fill):
                m.d.sync += n_data.eq(inner.r_data)
            m.d.sync += nfull.eq(~free & (nfull | fill))
            # (for tests/test_blockfifo.py: the block RAM part's read enable follows state only)
            self._inner_for_test, self._next_valid_for_test = inner, nfull
        elif not self.ahead:
            take = Signal(name="head_load")           # the head takes the inner head
            m.d.comb += [take.eq(inner.r_rdy & free), inner.r_en.eq(take),
                         self.level.eq(inner.level + full)]
            with m.If(take):
                m.d.sync += [self.r_data.eq(inner.r_data), full.eq(1)]
            with m.Elif(self.r_en):
                m.d.sync += full.eq(0)
        else:
            # the head refills from the second stage when that holds an entry, else straight
            # from the block RAM part; the second stage refills from the block RAM part
            # (the second stage is full only while the head is: n_rdy implies r_rdy)
            nfull = self.n_rdy
            take_n = Signal(name="head_load_next")
            take_i = Signal(name="head_load_inner")
            next_i = Signal(name="next_load_inner")
            m.d.comb += [
                take_n.eq(nfull & free),
                take_i.eq(~nfull & inner.r_rdy & free),
                next_i.eq(inner.r_rdy & ~take_i & (~nfull | take_n)),
                inner.r_en.eq(take_i | next_i),
                self.level.eq(inner.level + full + nfull),
            ]
            with m.If(take_n):
                m.d.sync += [self.r_data.eq(self.n_data), full.eq(1)]
            with m.Elif(take_i):
                m.d.sync += [self.r_data.eq(inner.r_data), full.eq(1)]
            with m.Elif(self.r_en):
                m.d.sync += full.eq(0)
            with m.If(next_i):
                m.d.sync += [self.n_data.eq(inner.r_data), nfull.eq(1)]
            with m.Elif(take_n):
                m.d.sync += nfull.eq(0)
        return m
