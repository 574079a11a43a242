"""``OutRegRAM``: a simple dual-port RAM whose read data passes an output register, the block
RAM's own on an ECP5 (``DP16KD`` with ``REGMODE_B = "OUTREG"``).

yosys's ECP5 flow maps memories to ``DP16KD`` blocks with their output registers off
(``brams_map_16kd.v``: ``REGMODE "NOREG"``), and it does not absorb a fabric register that
follows the read data. Such a read is then a path from the block RAM's clock (5.83 ns clock
to out in nextpnr-ecp5's model) across the fabric into that register: the S = 4 FPGA core's
scratchpad banks' read registers were 79 routed end points at up to 11.96 ns at b575d48.
Built for an ECP5 (``platform.family == "ecp5"``, :func:`hdl.lib.dspmul.targets_ecp5`) this
block instantiates the block RAMs with the output register on, which nextpnr times from the
block's own register; elsewhere (the Amaranth simulator, Verilator, other FPGAs) it is an
``amaranth.lib.memory.Memory`` and a register in Amaranth, with the same cycles.
"""
from __future__ import annotations

from amaranth.hdl import ClockSignal, Const, Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config import check_int
from .dspmul import targets_ecp5
from .mustuse import mark_used, used_if_rejected

__all__ = ["OutRegRAM", "DP16KD_SHAPES", "dp16kd_shape"]

#: ``(data bits, words)`` of the ``DP16KD`` port modes this block instantiates, widest first
#: (the 4-, 2- and 1-bit modes are not used: a deeper memory is left to yosys's mapping).
DP16KD_SHAPES = ((18, 1024), (9, 2048))

#: Address pins of a ``DP16KD`` port (``ADA0 .. ADA13``).
DP16KD_ADDR_PINS = 14


def dp16kd_shape(depth: int) -> tuple[int, int]:
    """``(data bits, lowest address pin)`` of the widest ``DP16KD`` mode holding ``depth``
    words: the word address goes on pins ``lo .. lo + log2(words) - 1`` (as yosys's
    ``brams_map_16kd.v`` places it; at 18 bits pins 0 and 1 are the write port's byte
    enables)."""
    check_int("dp16kd_shape", "depth", depth, lo=1, hi=DP16KD_SHAPES[-1][1])
    bits, words = next((b, w) for b, w in DP16KD_SHAPES if depth <= w)
    return bits, DP16KD_ADDR_PINS - (words.bit_length() - 1)


class OutRegRAM(wiring.Component):
    """``depth`` lines of ``words`` words of ``word_bits`` bits: one write port with an enable
    per word, one read port with read latency 2 (the memory's read register, then an output
    register).

    Cycle ``t`` with ``w_en`` bit ``k`` set writes word ``k`` of ``w_data`` to line ``w_addr``.
    Cycle ``t`` with ``r_en`` reads line ``r_addr``: its words are on ``r_data`` in cycle
    ``t + 2``; ``r_data`` in cycle ``t + 1`` is the read register of cycle ``t`` (which a cycle
    without ``r_en`` holds), so it shows the last read's line from two cycles after it until
    the cycle after the next read's. A read and a write of one line in the same cycle read the
    line as it was (not transparent; on an ECP5 this is the block RAM's two-port collision,
    as in yosys's own mapping). Neither register is reset (data; the contents start at zero).

    Parameters
    ----------
    words : int
        Words per line (write enables), 1 or more.
    depth : int
        Lines, 1 or more. On an ECP5 up to 2,048 lines are ``DP16KD`` blocks with their
        output registers (18 bits of a word per block up to 1,024 lines, 9 up to 2,048);
        a deeper memory is built as elsewhere and mapped by yosys (its register in the
        fabric).
    word_bits : int
        Bits per word (default 32).

    Attributes
    ----------
    latency : int
        2.
    memory : Memory
        The memory of the build without block RAM instances (the simulators' tests read and
        load it; on an ECP5 used only beyond 2,048 lines).

    Members
    -------
    w_addr : In(range(depth)), w_en : In(words), w_data : In(words * word_bits)
    r_addr : In(range(depth)), r_en : In(1), r_data : Out(words * word_bits)
    """

    latency = 2

    def __init__(self, *, words: int, depth: int, word_bits: int = 32):
        with used_if_rejected(self):
            check_int("OutRegRAM", "words", words, lo=1)
            check_int("OutRegRAM", "depth", depth, lo=1)
            check_int("OutRegRAM", "word_bits", word_bits, lo=1)
        self.words, self.depth, self.word_bits = words, depth, word_bits
        self.memory = mark_used(Memory(shape=words * word_bits, depth=depth, init=[]))
        super().__init__({
            "w_addr": In(range(depth)), "w_en": In(words), "w_data": In(words * word_bits),
            "r_addr": In(range(depth)), "r_en": In(1), "r_data": Out(words * word_bits),
        })

    def elaborate(self, platform):
        m = Module()
        if targets_ecp5(platform) and self.depth <= DP16KD_SHAPES[-1][1]:
            self._ecp5(m)
            return m
        wb = self.word_bits
        m.submodules.mem = mem = self.memory
        wp = mem.write_port(granularity=wb)
        rp = mem.read_port()
        m.d.comb += [wp.addr.eq(self.w_addr), wp.data.eq(self.w_data), wp.en.eq(self.w_en),
                     rp.addr.eq(self.r_addr), rp.en.eq(self.r_en)]
        r_q = Signal(self.words * wb, name="r_data_q", reset_less=True)
        m.d.sync += r_q.eq(rp.data)
        m.d.comb += self.r_data.eq(r_q)
        return m

    def _ecp5(self, m):
        bits, lo = dp16kd_shape(self.depth)
        abits = len(self.w_addr)
        wb = self.word_bits

        def addr_pins(port, addr, byte_enables):
            pins = {}
            for pin in range(DP16KD_ADDR_PINS):
                k = pin - lo
                if 0 <= k < abits:
                    pins[f"i_AD{port}{pin}"] = addr[k]
                elif pin < 2 and bits == 18:
                    pins[f"i_AD{port}{pin}"] = byte_enables
                else:
                    pins[f"i_AD{port}{pin}"] = Const(0, 1)
            return pins

        zero, one = Const(0, 1), Const(1, 1)
        for w in range(self.words):
            for s, first in enumerate(range(0, wb, bits)):
                width = min(bits, wb - first)
                lsb = w * wb + first
                w_bits = self.w_data[lsb:lsb + width]
                r_bits = self.r_data[lsb:lsb + width]
                pins = {}
                for k in range(18):
                    pins[f"i_DIA{k}"] = w_bits[k] if k < width else zero
                    pins[f"i_DIB{k}"] = zero
                    if k < width:
                        pins[f"o_DOB{k}"] = r_bits[k]
                for port in "AB":
                    for k in range(3):
                        pins[f"i_CS{port}{k}"] = zero
                m.submodules[f"bram_w{w}_s{s}"] = Instance(
                    "DP16KD",
                    p_DATA_WIDTH_A=bits, p_DATA_WIDTH_B=bits,
                    p_REGMODE_A="NOREG", p_REGMODE_B="OUTREG",
                    p_RESETMODE="SYNC", p_ASYNC_RESET_RELEASE="SYNC",
                    p_CSDECODE_A="0b000", p_CSDECODE_B="0b000",
                    p_WRITEMODE_A="NORMAL", p_WRITEMODE_B="NORMAL", p_GSR="DISABLED",
                    # port A writes only
                    i_CLKA=ClockSignal("sync"), i_WEA=self.w_en[w], i_CEA=one, i_OCEA=one,
                    i_RSTA=zero,
                    # port B reads only, its data through the output register
                    i_CLKB=ClockSignal("sync"), i_WEB=zero, i_CEB=self.r_en, i_OCEB=one,
                    i_RSTB=zero,
                    **addr_pins("A", self.w_addr, one), **addr_pins("B", self.r_addr, zero),
                    **pins)
