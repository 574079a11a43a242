"""Point-to-point links between cores, and the ring that joins them (docs/multicore.md).

A :class:`Link` stands in for a chip-to-chip interconnect: words enter on a stream, cross the
wire as flits of ``width`` bits after ``latency`` cycles, wait in a receive FIFO and leave on a
stream. Flow control is by credits, as on a real serial link: the sender holds one credit per
free FIFO entry, spends one per flit, and gets it back ``latency`` cycles after the receiver
pops the flit. So the FIFO can never overflow and no flit is lost or duplicated, whatever the
backpressure at either end (the ``overflow`` flag exists to prove it in tests).
"""
from __future__ import annotations

import dataclasses

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..config import check_int
from ..lib.delay import delay
from ..lib.mustuse import mark_used, used_if_rejected
from .config import LinkConfig

__all__ = ["Link", "LinkGate", "add_reverse_links", "connect_ring"]


class Link(wiring.Component):
    """A credit-flow-controlled link of configurable flit width and latency.

    Parameters
    ----------
    config : LinkConfig

    Members
    -------
    i : In(stream.Signature(config.word_bits))
        Words from the sending endpoint.
    o : Out(stream.Signature(config.word_bits))
        The same words, in order, at the receiving endpoint.
    flits : Out(32)
        Flits sent since reset (wraps); bytes on the wire are ``flits * width / 8``.
    overflow : Out(1)
        Sticky: a flit arrived at a full receive FIFO. The credits make this impossible; tests
        check that it stays 0.
    """

    def __init__(self, *, config: LinkConfig | None = None):
        self.config = config or LinkConfig()
        if not isinstance(self.config, LinkConfig):
            mark_used(self)
            raise TypeError(f"config must be a LinkConfig, not {type(self.config).__name__}")
        wb = self.config.word_bits
        super().__init__({
            "i": In(stream.Signature(wb)),
            "o": Out(stream.Signature(wb)),
            "flits": Out(32),
            "overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        W, k, depth = cfg.width, cfg.flits_per_word, cfg.fifo_depth

        # ---- sender: serializer (LSB flit first) and credits --------------------------------
        flit = Signal(W, name="tx_flit")
        flit_valid = Signal(name="tx_flit_valid")
        credits = Signal(range(depth + 1), init=depth, name="credits")
        send = Signal(name="send")
        m.d.comb += send.eq(flit_valid & (credits != 0))
        if k == 1:
            m.d.comb += [flit.eq(self.i.payload), flit_valid.eq(self.i.valid),
                         self.i.ready.eq(send)]
        else:
            shreg = Signal(cfg.word_bits, name="tx_shift")
            left = Signal(range(k + 1), name="tx_left")        # flits of shreg still to send
            m.d.comb += [flit.eq(shreg[:W]), flit_valid.eq(left != 0),
                         self.i.ready.eq((left == 0) | ((left == 1) & send))]
            with m.If(self.i.valid & self.i.ready):
                m.d.sync += [shreg.eq(self.i.payload), left.eq(k)]
            with m.Elif(send):
                m.d.sync += [shreg.eq(shreg >> W), left.eq(left - 1)]
        with m.If(send):
            m.d.sync += self.flits.eq(self.flits + 1)

        # ---- the wire: flits one way, credits back, ``latency`` registers each -------------
        arrive_valid = delay(m, send, cfg.latency, "wire_valid")
        arrive_flit = delay(m, flit, cfg.latency, "wire_flit")
        pop = Signal(name="rx_pop")
        credit_back = delay(m, pop, cfg.latency, "credit")
        m.d.sync += credits.eq(credits - send + credit_back)

        # ---- receiver: FIFO and deserializer ------------------------------------------------
        m.submodules.fifo = fifo = SyncFIFO(width=W, depth=depth)
        m.d.comb += [fifo.w_en.eq(arrive_valid), fifo.w_data.eq(arrive_flit)]
        with m.If(arrive_valid & ~fifo.w_rdy):
            m.d.sync += self.overflow.eq(1)
        if k == 1:
            m.d.comb += [self.o.payload.eq(fifo.r_data), self.o.valid.eq(fifo.r_rdy),
                         pop.eq(fifo.r_rdy & self.o.ready)]
        else:
            acc = Signal(cfg.word_bits, name="rx_word")
            got = Signal(range(k), name="rx_got")              # flits of the next word so far
            full = Signal(name="rx_full")                      # acc holds a whole word
            m.d.comb += [self.o.payload.eq(acc), self.o.valid.eq(full),
                         pop.eq(fifo.r_rdy & (~full | self.o.ready))]
            with m.If(pop):
                m.d.sync += [acc.eq(Cat(acc[W:], fifo.r_data)), got.eq(got + 1)]
                with m.If(got == k - 1):
                    m.d.sync += [full.eq(1), got.eq(0)]
                with m.Elif(self.o.valid & self.o.ready):
                    m.d.sync += full.eq(0)
            with m.Elif(self.o.valid & self.o.ready):
                m.d.sync += full.eq(0)
        m.d.comb += fifo.r_en.eq(pop)
        return m


class LinkGate(wiring.Component):
    """A stall injector on a stream: while ``stall`` is 1 no beat passes (``o.valid`` and
    ``i.ready`` are held low). Tests drive ``stall`` at random to put backpressure on every
    link, or hold it to make a link stop delivering.

    Parameters
    ----------
    width : int
        Payload width.

    Members
    -------
    i : In(stream.Signature(width))
    o : Out(stream.Signature(width))
    stall : In(1)
    """

    def __init__(self, *, width: int = 32):
        with used_if_rejected(self):
            check_int("LinkGate", "width", width, lo=1)
        super().__init__({"i": In(stream.Signature(width)), "o": Out(stream.Signature(width)),
                          "stall": In(1)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.o.payload.eq(self.i.payload),
                     self.o.valid.eq(self.i.valid & ~self.stall),
                     self.i.ready.eq(self.o.ready & ~self.stall)]
        return m


def connect_ring(m: Module, txs, rxs, config: LinkConfig, *, name: str = "link",
                 reverse: bool = False) -> list[Link]:
    """Join ``N`` endpoints in a ring: ``txs[r]`` (a stream a sender drives) reaches
    ``rxs[(r + 1) % N]`` (a stream a receiver accepts; with ``reverse``, ``rxs[(r - 1) % N]``)
    through a new :class:`Link`, added to ``m`` as submodule ``f"{name}{r}"``. Returns the
    links, link ``r`` leaving rank ``r``.

    Parameters
    ----------
    m : Module
    txs, rxs : sequence of stream interfaces
        ``Out(stream.Signature(config.word_bits))`` (tx) and the ``In`` flip (rx), as seen
        from ``m``'s submodules, e.g. ``engine.tx`` / ``engine.rx``.
    config : LinkConfig
    """
    if len(txs) != len(rxs):
        raise ValueError(f"txs ({len(txs)}) and rxs ({len(rxs)}) must have the same length")
    if len(txs) < 2:
        raise ValueError(f"a ring needs at least 2 endpoints, not {len(txs)}")
    links = []
    for r in range(len(txs)):
        link = Link(config=config)
        m.submodules[f"{name}{r}"] = link
        wiring.connect(m, txs[r], link.i)
        wiring.connect(m, link.o, rxs[(r + (-1 if reverse else 1)) % len(txs)])
        links.append(link)
    return links


def add_reverse_links(m: Module, top, txs, rxs, link: LinkConfig) -> list:
    """The reverse ring of a multi-core top: ``txs[r]`` (rank ``r``'s 32-bit ``tx_rev``)
    reaches ``rxs[r - 1]`` through a :class:`LinkGate` on each end (driven by
    bit ``r`` of ``top.stall_tx_rev`` and ``top.stall_rx_rev``) and reverse link ``r``
    (``link``'s width, latency and credits; the link cuts each word into flits), submodules
    ``gate_tx_rev<r>``, ``gate_rx_rev<r>``, ``link_rev<r>``. Drives ``top.flits_rev_<r>`` and
    ``top.overflow_rev``; returns the links."""
    gtx, grx = [], []
    for r, (tx, rx) in enumerate(zip(txs, rxs)):
        m.submodules[f"gate_tx_rev{r}"] = gt = LinkGate(width=32)
        m.submodules[f"gate_rx_rev{r}"] = gr = LinkGate(width=32)
        m.d.comb += [gt.stall.eq(top.stall_tx_rev[r]), gr.stall.eq(top.stall_rx_rev[r])]
        wiring.connect(m, tx, gt.i)
        wiring.connect(m, gr.o, rx)
        gtx.append(gt)
        grx.append(gr)
    links = connect_ring(m, [g.o for g in gtx], [g.i for g in grx],
                         dataclasses.replace(link, word_bits=32), name="link_rev", reverse=True)
    for r, lk in enumerate(links):
        m.d.comb += [getattr(top, f"flits_rev_{r}").eq(lk.flits),
                     top.overflow_rev[r].eq(lk.overflow)]
    return links
