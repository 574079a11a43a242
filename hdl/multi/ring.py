"""The ring test top: ``N`` collective engines, each with its own memory, joined by links.

:class:`CollectiveRing` is what the tests (both tiers) and ``tessera generate --block
collective_ring`` build: engine ``r`` (rank ``r``) sends to engine ``r + 1`` through the
transmit codec of its :class:`~hdl.multi.endpoint.LinkEndpoint`, link ``r``
(:func:`~hdl.multi.link.connect_ring`, a flit-level link) and the receive codec of engine
``r + 1``'s endpoint (:mod:`hdl.multi.codec`: FP32 words or BFP groups as flits, chosen per
command); a :class:`~hdl.multi.link.LinkGate` on each end of
every link lets a testbench put random backpressure on it or make it stop delivering. Each
engine's memory (:class:`WordMemory`) also has a host port, which owns the memory while the
engine is idle, so a testbench loads the vectors and reads the results through ports only.
It tests the engines, codecs and links without training cores (those join in
:mod:`hdl.multi.cores`).
"""
from __future__ import annotations

import dataclasses

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..fp32.config import FP32Config
from ..lib.delay import delay
from ..lib.memport import WordPort
from ..registry import Block
from .endpoint import LinkEndpoint
from .collective import CollectiveEngine, cmd_layout, rsp_layout
from ..config import check_int
from ..lib.mustuse import mark_used, used_if_rejected
from .config import RingConfig, split_ranks_suffix
from .link import LinkGate, add_reverse_links, connect_ring

__all__ = ["WordMemory", "CollectiveRing"]


class WordMemory(wiring.Component):
    """A memory of ``depth`` FP32 words with two client ports: ``a`` (an engine) while ``sel``
    is 1, else ``b`` (the host). The port not selected reads nothing and writes nothing.

    Parameters
    ----------
    depth : int
        Words, >= 2.
    latency : int
        Read latency of port ``a``, 1..4: 1, the memory's; 2..4, as a registered client of
        the training core's scratchpad (:func:`hdl.lib.memport.serve_read`): ``a``'s requests
        pass a register (its writes land a cycle later too), and with 3 its read data too,
        with 4 twice (the FPGA build's collective engine, ``CoreConfig.coll_regs``).

    Members
    -------
    a, b : In(WordPort(addr_bits=(depth - 1).bit_length()))
        ``b`` has a one-cycle read latency (:mod:`hdl.lib.memport`), ``a`` ``latency``.
    sel : In(1)
        ``a`` is served while 1. With ``latency >= 2`` a request of ``a`` made while ``sel`` is
        1 is served one cycle later whatever ``sel`` is then, and ``b``'s requests wait for
        that cycle to pass (``b`` must not access the memory in the cycle after ``sel`` falls).
    """

    def __init__(self, *, depth: int, latency: int = 1):
        with used_if_rejected(self):
            check_int("WordMemory", "depth", depth, lo=2)
            check_int("WordMemory", "latency", latency, lo=1, hi=4)
        self.depth, self.latency = depth, latency
        port = WordPort(addr_bits=(depth - 1).bit_length())
        super().__init__({"a": In(port), "b": In(port), "sel": In(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=32, depth=self.depth, init=[])
        rp = mem.read_port()
        wp = mem.write_port()
        a, b, sel = self.a, self.b, self.sel
        if self.latency == 1:
            m.d.comb += [
                rp.en.eq(Mux(sel, a.r_en, b.r_en)), rp.addr.eq(Mux(sel, a.r_addr, b.r_addr)),
                a.r_data.eq(rp.data), b.r_data.eq(rp.data),
                wp.en.eq(Mux(sel, a.w_en, b.w_en)), wp.addr.eq(Mux(sel, a.w_addr, b.w_addr)),
                wp.data.eq(Mux(sel, a.w_data, b.w_data)),
            ]
            return m
        # a's requests registered (taken while sel is 1): they own the memory in the next
        # cycle; b's reach it when sel was 0 in the last cycle too
        q = a.signature.create(path=("a_req",))
        sel_q = Signal(name="sel_q")
        m.d.sync += [q.r_en.eq(a.r_en & sel), q.r_addr.eq(a.r_addr), q.w_en.eq(a.w_en & sel),
                     q.w_addr.eq(a.w_addr), q.w_data.eq(a.w_data), sel_q.eq(sel)]
        a_owns = sel | sel_q
        m.d.comb += [
            rp.en.eq(Mux(a_owns, q.r_en, b.r_en)), rp.addr.eq(Mux(a_owns, q.r_addr, b.r_addr)),
            b.r_data.eq(rp.data),
            wp.en.eq(Mux(a_owns, q.w_en, b.w_en)), wp.addr.eq(Mux(a_owns, q.w_addr, b.w_addr)),
            wp.data.eq(Mux(a_owns, q.w_data, b.w_data)),
        ]
        m.d.comb += a.r_data.eq(delay(m, rp.data, self.latency - 2, "a_rdata"))
        return m


class CollectiveRing(wiring.Component):
    """``N`` collective engines in a ring with memories, links and stall gates.

    Parameters
    ----------
    config : RingConfig
    fp32_config : FP32Config

    Members
    -------
    cmd_<r>, rsp_<r> : the command and response streams of engine ``r``
    host_<r> : In(WordPort)
        Host port of engine ``r``'s memory (used only while ``busy_<r>`` is 0).
    busy_<r> : Out(1)
    stall_tx : In(N)
        Bit ``r`` stalls the entry of link ``r`` (engine ``r``'s ``tx``).
    stall_rx : In(N)
        Bit ``r`` stalls engine ``r``'s ``rx`` (the exit of link ``r - 1``).
    flits_<r> : Out(32)
        Flits of ``link.width`` bits sent on link ``r``.
    overflow : Out(N)
        Link ``r``'s receive FIFO overflowed (never, by the credits).
    stall_tx_rev, stall_rx_rev, flits_rev_<r>, overflow_rev : only with ``collective.reverse``
        The same for the reverse links: reverse link ``r`` carries engine ``r``'s ``tx_rev``
        (FP32 words, cut into flits of ``link.width`` bits by the link) to engine ``r - 1``'s
        ``rx_rev``; bit ``r`` of ``stall_rx_rev`` stalls engine ``r``'s ``rx_rev``.
    """

    def __init__(self, *, config: RingConfig | None = None,
                 fp32_config: FP32Config | None = None):
        self.config = config or RingConfig()
        if not isinstance(self.config, RingConfig):
            mark_used(self)
            raise TypeError(f"config must be a RingConfig, not {type(self.config).__name__}")
        self.fp32_config = fp32_config or FP32Config()
        c = self.config.collective
        N = c.ranks
        members = {}
        for r in range(N):
            members[f"cmd_{r}"] = In(stream.Signature(cmd_layout(c)))
            members[f"rsp_{r}"] = Out(stream.Signature(rsp_layout(c)))
            members[f"host_{r}"] = In(WordPort(addr_bits=c.addr_bits))
            members[f"busy_{r}"] = Out(1)
            members[f"flits_{r}"] = Out(32)
        members["stall_tx"] = In(N)
        members["stall_rx"] = In(N)
        members["overflow"] = Out(N)
        if c.reverse:
            for r in range(N):
                members[f"flits_rev_{r}"] = Out(32)
            members.update(stall_tx_rev=In(N), stall_rx_rev=In(N), overflow_rev=Out(N))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        c = self.config.collective
        N = c.ranks
        W = self.config.link.width
        engines, gtx, grx = [], [], []
        for r in range(N):
            eng = CollectiveEngine(config=c, fp32_config=self.fp32_config)
            mem = WordMemory(depth=c.depth, latency=c.mem_latency)
            m.submodules[f"engine{r}"] = eng
            m.submodules[f"mem{r}"] = mem
            m.submodules[f"ends{r}"] = ends = LinkEndpoint(flit_bits=W, bfp_config=c.bfp)
            m.submodules[f"gate_tx{r}"] = gt = LinkGate(width=W)
            m.submodules[f"gate_rx{r}"] = gr = LinkGate(width=W)
            m.d.comb += [eng.rank.eq(r), mem.sel.eq(eng.busy),
                         getattr(self, f"busy_{r}").eq(eng.busy),
                         ends.mode.eq(eng.mode), ends.loop.eq(eng.loop),
                         eng.codec_flags.eq(ends.flags), ends.clear_flags.eq(eng.codec_clear),
                         eng.codec_idle.eq(ends.idle), ends.enable.eq(eng.busy),
                         gt.stall.eq(self.stall_tx[r]), gr.stall.eq(self.stall_rx[r])]
            wiring.connect(m, eng.mem, mem.a)
            wiring.connect(m, wiring.flipped(getattr(self, f"host_{r}")), mem.b)
            wiring.connect(m, wiring.flipped(getattr(self, f"cmd_{r}")), eng.cmd)
            wiring.connect(m, eng.rsp, wiring.flipped(getattr(self, f"rsp_{r}")))
            # engine r -> its tx codec -> gate -> link r ... gate -> rx codec -> engine r + 1
            wiring.connect(m, eng.tx, ends.i)
            wiring.connect(m, ends.o, eng.rx)
            wiring.connect(m, ends.link_tx, gt.i)
            wiring.connect(m, gr.o, ends.link_rx)
            engines.append(eng)
            gtx.append(gt)
            grx.append(gr)
        flit_link = dataclasses.replace(self.config.link, word_bits=W)
        links = connect_ring(m, [g.o for g in gtx], [g.i for g in grx], flit_link)
        for r in range(N):
            m.d.comb += [getattr(self, f"flits_{r}").eq(links[r].flits),
                         self.overflow[r].eq(links[r].overflow)]
        if c.reverse:
            add_reverse_links(m, self, [e.tx_rev for e in engines],
                              [e.rx_rev for e in engines], self.config.link)
        return m



def _fp32(preset: str) -> FP32Config:
    """The FP32 units of a preset (``tiny-n4``: those of ``tiny``)."""
    return FP32Config.preset(split_ranks_suffix(RingConfig, preset)[0])


def _build(preset: str) -> CollectiveRing:
    return CollectiveRing(config=RingConfig.preset(preset), fp32_config=_fp32(preset))


def _params(preset: str) -> dict:
    cfg = RingConfig.preset(preset)
    return {"collective": cfg.collective.to_dict(), "link": cfg.link.to_dict(),
            "fp32": _fp32(preset).to_dict(), "latency": _fp32(preset).latency("fp32_add")}


TESSERA_BLOCKS = [Block("collective_ring", build=_build, params=_params)]
