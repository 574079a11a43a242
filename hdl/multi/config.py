"""Configuration, opcodes and status codes of the multi-core blocks (pure Python, no Amaranth).

The golden model (:mod:`sim.model.collective`), the testbenches and the hardware
(:mod:`hdl.multi.link`, :mod:`hdl.multi.collective`, :mod:`hdl.multi.ring`) import this module,
so the numbers are defined once (docs/multicore.md).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..config import BFPConfig, PresetMixin, check_bool, check_int

__all__ = ["LinkConfig", "CollectiveConfig", "RingConfig", "CollOp", "CollComp", "CollStatus",
           "TopK", "bfp_packet_bits", "flits_per_group", "nan_group_exp",
           "split_ranks_suffix"]


class CollOp:
    """Collective opcodes (``cmd.payload.op``)."""
    ALLREDUCE = 0   #: ring all-reduce (FP32 sum) of ``mem[base : base + length]``
    #: point-to-point exchange: send ``mem[base : base + length]`` to rank ``r + 1`` (``sdir
    #: = 1``: to rank ``r - 1``, over the reverse links) and receive ``rlength`` words from
    #: rank ``r - 1`` (``rdir = 1``: from rank ``r + 1``) into ``mem[rbase : rbase + rlength]``
    SENDRECV = 1
    ALL = (ALLREDUCE, SENDRECV)


class CollComp:
    """Link compression of a command (``cmd.payload.comp``), chosen at run time."""
    NONE = 0   #: FP32 words on the wire
    BFP = 1    #: BFP groups (``bfp.group_size`` words, shared exponent, ``width``-bit mantissas)
    #: top-k sparsification with error feedback (:class:`TopK`): every rank's ``(index,
    #: value)`` messages gathered around the ring and summed in rank order (``ALLREDUCE`` on
    #: an engine built with ``CollectiveConfig.topk``)
    TOPK = 2
    ALL = (NONE, BFP, TOPK)


def split_ranks_suffix(owner, name: str) -> tuple[str, int | None]:
    """``("tiny", 4)`` for the preset name ``"tiny-n4"``, ``("tiny", None)`` for ``"tiny"``;
    ``ValueError`` naming ``owner`` (a config class) for anything but ``tiny`` / ``default``
    with an optional ``-n<ranks>``."""
    base, sep, suffix = name.partition("-n") if isinstance(name, str) else (None, "", "")
    if base not in ("tiny", "default") or (sep and not suffix.isdigit()):
        raise ValueError(f"{owner.__name__} preset must be 'tiny' or 'default', optionally "
                         f"with '-n<ranks>', not {name!r}")
    return base, int(suffix) if suffix else None


def bfp_packet_bits(config: BFPConfig, width: int) -> int:
    """Bits of one BFP group on the wire at mantissa width ``width``: the shared exponent and
    a sign and ``width`` magnitude bits per element."""
    return config.exp_bits + config.group_size * (width + 1)


def nan_group_exp(config: BFPConfig) -> int:
    """The shared-exponent field (``exp_bits`` bits, as sent) of a *NaN group*: what the
    transmit codec sends for a group holding a NaN or an infinity, and the receiving codec
    turns into ``group_size`` canonical NaNs (``0x7FC00000``). It is the field's most
    negative value, ``-2**(exp_bits - 1)``: every group a converter makes has an exponent of
    at least -150, above it for every allowed ``exp_bits`` (>= 9)."""
    return 1 << (config.exp_bits - 1)


def flits_per_group(config: BFPConfig, width: int, flit_bits: int) -> int:
    """Flits of ``flit_bits`` carrying one BFP group at mantissa width ``width``."""
    return -(-bfp_packet_bits(config, width) // flit_bits)


class CollStatus:
    """Response status codes (``rsp.payload.status``). A ``BAD_*`` command changes nothing."""
    #: finished: after an all-reduce the vector holds the sum on every rank; after a
    #: ``SENDRECV`` every word was sent and every received word written
    OK = 0
    TIMEOUT = 1       #: no link beat and no memory write for ``timeout`` cycles: aborted
    BAD_OP = 2        #: unknown opcode
    #: ``length == 0`` or ``base + length > depth`` (with ``BFP`` any length: a segment
    #: that is not whole groups is padded on the link); ``SENDRECV``: ``length == rlength ==
    #: 0``, a region past ``depth``, or the send and receive regions overlap
    BAD_LEN = 3
    #: ``seg == 0`` or ``seg * ranks < length``; never for ``SENDRECV``
    BAD_SEG = 4
    BAD_TIMEOUT = 5   #: ``timeout == 0``
    #: ``comp`` unknown, or ``BFP`` with a ``width`` the converter does not have
    #: (not in ``bfp.widths``), or ``SENDRECV`` with ``comp`` other than ``NONE``
    BAD_COMP = 6
    #: ``SENDRECV`` with ``sdir`` or ``rdir`` 1 on an engine built without reverse links
    #: (``CollectiveConfig.reverse``)
    BAD_DIR = 7
    NAMES = {OK: "OK", TIMEOUT: "TIMEOUT", BAD_OP: "BAD_OP", BAD_LEN: "BAD_LEN",
             BAD_SEG: "BAD_SEG", BAD_TIMEOUT: "BAD_TIMEOUT", BAD_COMP: "BAD_COMP",
             BAD_DIR: "BAD_DIR"}


@dataclass(frozen=True)
class TopK:
    """Top-k link compression: per segment of ``seg`` words, the ``k`` words of largest
    magnitude are sent as ``(index, value)`` pairs (golden model :mod:`sim.model.compress`,
    hardware :mod:`hdl.multi.topk`).

    The message of a vector (what the hardware stores and sends, in 32-bit words) holds, per
    segment of ``n`` words (the last may be shorter), ``n_sel = min(k, n)`` pairs:
    ``ceil(n_sel / per_word)`` index words (``per_word`` indices of ``index_bits`` bits each,
    the first in the low bits, unused fields 0) followed by the ``n_sel`` values, both in
    selection order (largest magnitude first, equal magnitudes lower index first).

    Parameters
    ----------
    seg : int
        Words per segment (>= 1).
    k : int
        Words sent per segment, 1..``seg``.
    """

    seg: int = 256
    k: int = 16

    def __post_init__(self):
        check_int("TopK", "seg", self.seg, lo=1)
        check_int("TopK", "k", self.k, lo=1, hi=self.seg)

    @property
    def index_bits(self) -> int:
        """Bits of an index inside a segment: ``ceil(log2(seg))`` (0 for ``seg = 1``)."""
        return (self.seg - 1).bit_length()

    @property
    def pair_bits(self) -> int:
        """Bits of one ``(index, value)`` pair."""
        return self.index_bits + 32

    @property
    def per_word(self) -> int:
        """Indices packed in one 32-bit index word of a message."""
        return 32 // max(1, self.index_bits)

    def segment_words(self, n: int) -> int:
        """Message words of a segment of ``n`` words (``0 <= n <= seg``)."""
        sel = min(self.k, n)
        return sel + -(-sel // self.per_word)

    def message_words(self, length: int) -> int:
        """Message words of a vector of ``length`` words."""
        full, last = divmod(length, self.seg)
        return full * self.segment_words(self.seg) + self.segment_words(last)


@dataclass(frozen=True)
class LinkConfig(PresetMixin):
    """A point-to-point link standing in for a chip-to-chip interconnect (docs/multicore.md).

    Parameters
    ----------
    word_bits : int
        Width of the words the endpoints send and receive (32: FP32), 1..256.
    width : int
        Width of one flit on the wire; must divide ``word_bits``. A word crosses as
        ``word_bits // width`` flits, least significant first.
    latency : int
        Cycles a flit and a returning credit each spend on the wire, 0..64.
    fifo_depth : int
        Flits the receive FIFO holds (= credits of the sender), 1..256. The link runs at one
        flit per cycle when ``fifo_depth >= 2 * latency + 2`` (the credit round trip).
    """

    word_bits: int = 32
    width: int = 32
    latency: int = 2
    fifo_depth: int = 8

    PRESETS: ClassVar[dict[str, dict]] = {"tiny": {"width": 16, "latency": 2, "fifo_depth": 4},
                                          "default": {}}

    def __post_init__(self):
        check_int("LinkConfig", "word_bits", self.word_bits, lo=1, hi=256)
        check_int("LinkConfig", "width", self.width, lo=1, hi=self.word_bits)
        if self.word_bits % self.width:
            raise ValueError(f"LinkConfig.width must divide word_bits ({self.word_bits}), "
                             f"not {self.width!r}")
        check_int("LinkConfig", "latency", self.latency, lo=0, hi=64)
        check_int("LinkConfig", "fifo_depth", self.fifo_depth, lo=1, hi=256)

    @property
    def flits_per_word(self) -> int:
        return self.word_bits // self.width

    @property
    def full_rate(self) -> bool:
        """One flit per cycle is sustainable (the credits cover the round trip)."""
        return self.fifo_depth >= 2 * self.latency + 2


@dataclass(frozen=True)
class CollectiveConfig(PresetMixin):
    """The collective engine of one core (:class:`hdl.multi.collective.CollectiveEngine`).

    Parameters
    ----------
    ranks : int
        Cores in the ring (``N``), 2..16.
    depth : int
        FP32 words the engine's memory port reaches, 2..65536.
    timeout_bits : int
        Width of the command's ``timeout`` field (cycles), 4..32.
    tx_fifo_depth : int
        Words read ahead for the transmit stream, 2..64.
    bfp : BFPConfig
        The BFP format of compressed links (``CollComp.BFP``): ``group_size`` (a power of
        two), ``max_mantissa`` (the widths a command may choose), ``exp_bits``.
    topk : TopK or None
        Top-k compression (``CollComp.TOPK``): ``None`` builds the engine without it (the
        command answers ``BAD_COMP``). ``seg`` must be a power of two, 2..``depth``, and
        ``k`` at most 64 (the selection unit keeps ``k`` candidates in registers).
    reverse : bool
        Reverse links: the engine also has ``tx_rev`` (words to rank ``r - 1``) and ``rx_rev``
        (words from rank ``r + 1``), which a ``SENDRECV`` chooses with ``sdir`` / ``rdir``
        (pipeline parallelism with more than two stages: activations go forward, gradients
        back). ``False``: such a ``SENDRECV`` answers ``BAD_DIR``.
    mem_latency : int
        Read latency of the memory port (``mem``), 1..4 cycles: 1, a block RAM's; 2 and 3, a
        registered client of the training core's scratchpad (``CoreConfig.spad_reg``, and
        ``spad_out_reg`` too: :attr:`hdl.core.config.CoreConfig.spad_latency`), whose requests
        pass a register before the bank crossbar; 4, that client with its read data registered
        once more in front of the engine (``CoreConfig.coll_regs``). Each transfer step and
        each top-k segment then takes ``mem_latency - 1`` cycles more; the words are the
        same.
    cmd_reg : bool
        A register stage on ``cmd`` (:class:`hdl.lib.streamreg.StreamRegister`; the training
        core's FPGA build), and the command's checks in two register stages after it (the
        regions' ends, the top-k message length and ``seg * N``; then the verdicts): they
        start from registers instead of the sequencer's decode, and every command is taken
        three cycles later.
    rx_reg : bool
        A received word's use of the memory port (the reduce-scatter's read of the local word,
        the all-gather's write) a cycle after it is received, from registers (the training
        core's FPGA build): the link's handshake no longer reaches the port's address and
        enable in the same cycle. The words are the same; each step ends a cycle or two
        later.
    """

    ranks: int = 4
    depth: int = 1024
    timeout_bits: int = 16
    tx_fifo_depth: int = 4
    bfp: BFPConfig = BFPConfig()
    topk: TopK | None = None
    reverse: bool = False
    mem_latency: int = 1
    cmd_reg: bool = False
    rx_reg: bool = False

    PRESETS: ClassVar[dict[str, dict]] = {
        "tiny": {"ranks": 2, "depth": 64, "bfp": BFPConfig.preset("tiny"),
                 "topk": TopK(seg=8, k=2), "reverse": True},
        "default": {"topk": TopK(seg=64, k=8)}}

    def __post_init__(self):
        check_int("CollectiveConfig", "ranks", self.ranks, lo=2, hi=16)
        check_int("CollectiveConfig", "depth", self.depth, lo=2, hi=65536)
        check_int("CollectiveConfig", "timeout_bits", self.timeout_bits, lo=4, hi=32)
        check_int("CollectiveConfig", "tx_fifo_depth", self.tx_fifo_depth, lo=2, hi=64)
        check_int("CollectiveConfig", "mem_latency", self.mem_latency, lo=1, hi=4)
        if not isinstance(self.reverse, bool):
            raise TypeError(f"CollectiveConfig.reverse must be a bool, not {self.reverse!r}")
        check_bool("CollectiveConfig", "cmd_reg", self.cmd_reg)
        check_bool("CollectiveConfig", "rx_reg", self.rx_reg)
        if not isinstance(self.bfp, BFPConfig):
            raise TypeError(f"CollectiveConfig.bfp must be a BFPConfig, not "
                            f"{type(self.bfp).__name__}")
        g = self.bfp.group_size
        if g & (g - 1):
            raise ValueError(f"CollectiveConfig.bfp.group_size must be a power of two, not {g!r}")
        if self.topk is not None:
            if not isinstance(self.topk, TopK):
                raise TypeError(f"CollectiveConfig.topk must be a TopK or None, not "
                                f"{type(self.topk).__name__}")
            sg = self.topk.seg
            if sg < 2 or sg & (sg - 1) or sg > self.depth:
                raise ValueError(f"CollectiveConfig.topk.seg must be a power of two in "
                                 f"2..depth ({self.depth}), not {sg!r}")
            check_int("CollectiveConfig", "topk.k", self.topk.k, lo=1, hi=64)

    @property
    def addr_bits(self) -> int:
        """Width of a word address (``0 .. depth - 1``)."""
        return (self.depth - 1).bit_length()

    @property
    def len_bits(self) -> int:
        """Width of ``length`` and ``seg`` (``0 .. depth``)."""
        return self.depth.bit_length()

    def steps(self, comp: int = CollComp.NONE) -> int:
        """Steps of one all-reduce: ``N - 1`` reduce-scatter + ``N - 1`` all-gather, and with
        BFP compression one local step between them that passes each rank's reduced segment
        through its own codecs (the all-gather then relays that quantized segment, so every
        rank holds the same value; no link carries the step)."""
        return 2 * (self.ranks - 1) + (comp == CollComp.BFP)


@dataclass(frozen=True)
class RingConfig(PresetMixin):
    """The ring test top :class:`hdl.multi.ring.CollectiveRing`: ``collective.ranks`` engines,
    each with its own memory of ``collective.depth`` words, joined by links.

    Parameters
    ----------
    collective : CollectiveConfig
    link : LinkConfig
        Every link of the ring (``word_bits`` must be 32). The top builds each link as a
        flit-level link (``word_bits = width``) between two codecs
        (:mod:`hdl.multi.codec`), which cut words or BFP groups into flits.
    """

    collective: CollectiveConfig = CollectiveConfig()
    link: LinkConfig = LinkConfig()

    PRESETS: ClassVar[dict[str, dict]] = {}

    @classmethod
    def preset(cls, name: str):
        """``tiny`` (two ranks) or ``default`` (four); a suffix ``-n<N>`` (``tiny-n4``) sets
        the number of ranks."""
        base, ranks = split_ranks_suffix(cls, name)
        coll = CollectiveConfig.preset(base)
        if ranks is not None:
            coll = dataclasses.replace(coll, ranks=ranks)
        return cls(collective=coll, link=LinkConfig.preset(base))

    def __post_init__(self):
        if not isinstance(self.collective, CollectiveConfig):
            raise TypeError(f"RingConfig.collective must be a CollectiveConfig, not "
                            f"{type(self.collective).__name__}")
        if not isinstance(self.link, LinkConfig):
            raise TypeError(f"RingConfig.link must be a LinkConfig, not "
                            f"{type(self.link).__name__}")
        if self.link.word_bits != 32:
            raise ValueError(f"RingConfig.link.word_bits must be 32 (FP32 words), not "
                             f"{self.link.word_bits!r}")
