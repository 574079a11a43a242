"""The multi-core top: ``N`` training cores joined in a ring by links (docs/multicore.md).

:class:`TrainingRing` is what data-parallel training runs on: core ``r`` (rank ``r``) is a
:class:`~hdl.core.core.TrainingCore` built with ``ranks = N``, so it carries a collective engine
and its link codecs; its ``link_tx`` reaches core ``r + 1``'s ``link_rx`` through link ``r``
(:func:`~hdl.multi.link.connect_ring`, a flit-level link of the config's width, latency and
credits). A :class:`~hdl.multi.link.LinkGate` on each end of every link lets a testbench put
random backpressure on it or stop it. Each core keeps its own host port (``cmd_<r>`` /
``rsp_<r>``), so a host loads every core, starts them, and the cores' ``ALLREDUCE``
instructions meet over the ring without the host.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import PresetMixin
from ..core.config import CoreConfig, fpga_core_kwargs
from ..core.core import TrainingCore
from ..core.host import host_cmd_layout, host_rsp_layout
from ..gen import port_members
from ..lib.mustuse import mark_used
from ..registry import Block
from .config import LinkConfig, split_ranks_suffix
from .link import LinkGate, add_reverse_links, connect_ring

__all__ = ["TrainingRingConfig", "TrainingRing"]


@dataclass(frozen=True)
class TrainingRingConfig(PresetMixin):
    """``core.ranks`` training cores in a ring.

    Parameters
    ----------
    core : CoreConfig
        Every core's config; ``ranks`` (2..16) is the number of cores, ``link_width`` the flit
        width.
    link : LinkConfig
        Latency and credits of every link; ``width`` must equal ``core.link_width`` (the top
        builds flit-level links: ``word_bits = width``).
    """

    core: CoreConfig = CoreConfig(ranks=4)
    link: LinkConfig = LinkConfig()

    PRESETS: ClassVar[dict[str, dict]] = {}

    @classmethod
    def preset(cls, name: str, ranks: int | None = None):
        """``tiny``: two S = 4 cores, 16-bit links; ``default``: four S = 8 cores, 32-bit
        links; a suffix ``-n<N>`` (``tiny-n4``) or ``ranks`` sets the number of cores, a
        suffix ``-rev`` (``tiny-n3-rev``) adds the reverse links (``CoreConfig.reverse_links``:
        pipelines of more than two stages), and a last suffix ``-fpga`` (``tiny-fpga``) makes
        every core the FPGA build (:meth:`CoreConfig.fpga`; ``make synth``'s
        ``training_ring_fpga``)."""
        fpga = isinstance(name, str) and name.endswith("-fpga")
        if fpga:
            name = name[:-5]
        reverse = isinstance(name, str) and name.endswith("-rev")
        name, suffix_ranks = split_ranks_suffix(cls, name[:-4] if reverse else name)
        if ranks is None:
            ranks = suffix_ranks
        link = LinkConfig.preset(name)
        n = ranks if ranks is not None else (2 if name == "tiny" else 4)
        core = dataclasses.replace(CoreConfig.preset(name), ranks=n, link_width=link.width,
                                   reverse_links=reverse)
        return cls(core=core.fpga() if fpga else core, link=link)

    def __post_init__(self):
        if not isinstance(self.core, CoreConfig):
            raise TypeError(f"TrainingRingConfig.core must be a CoreConfig, not "
                            f"{type(self.core).__name__}")
        if not isinstance(self.link, LinkConfig):
            raise TypeError(f"TrainingRingConfig.link must be a LinkConfig, not "
                            f"{type(self.link).__name__}")
        if self.core.ranks < 2:
            raise ValueError(f"TrainingRingConfig.core.ranks must be 2..16, not "
                             f"{self.core.ranks!r}")
        if self.link.width != self.core.link_width:
            raise ValueError(f"TrainingRingConfig.link.width ({self.link.width}) must equal "
                             f"core.link_width ({self.core.link_width})")

    @property
    def ranks(self) -> int:
        return self.core.ranks

    @property
    def flit_link(self) -> LinkConfig:
        """The links as built: flits of ``width`` bits are the link's words."""
        return dataclasses.replace(self.link, word_bits=self.link.width)


class TrainingRing(wiring.Component):
    """``N`` training cores, links and stall gates.

    Parameters
    ----------
    config : TrainingRingConfig
    core_module : str or None
        ``None`` (the default): the cores are :class:`~hdl.core.core.TrainingCore` submodules,
        as the Amaranth simulator needs. A Verilog module name: the cores are ``N`` instances
        of that one module (:class:`~amaranth.hdl.Instance`, ports named as the core's
        generated Verilog names them), and :attr:`verilog_modules` lists the core to convert
        beside the top (:func:`hdl.gen.to_verilog` does). The generated Verilog then holds the
        core once instead of ``N`` times: the cores are identical (the rank is a port), so
        this is the same design, converted, Verilated and compiled once (``tessera generate
        --block training_ring``). Not for the Amaranth simulator, which cannot run instances.
    **core_kwargs
        Passed to every :class:`~hdl.core.core.TrainingCore` (datapath configs).

    Members
    -------
    cmd_<r>, rsp_<r> : core ``r``'s host command and response streams
        (:func:`hdl.core.host.host_cmd_layout`, :func:`~hdl.core.host.host_rsp_layout`).
    done : Out(N)
        Bit ``r``: core ``r``'s one-cycle pulse when its program stops.
    running : Out(N)
    stall_tx : In(N)
        Bit ``r`` stalls the entry of link ``r`` (core ``r``'s ``link_tx``).
    stall_rx : In(N)
        Bit ``r`` stalls core ``r``'s ``link_rx`` (the exit of link ``r - 1``).
    flits_<r> : Out(32)
        Flits sent on link ``r`` since reset.
    overflow : Out(N)
        Link ``r``'s receive FIFO overflowed (never, by the credits).
    stall_tx_rev, stall_rx_rev, flits_rev_<r>, overflow_rev : only with ``core.reverse_links``
        The same for the reverse links: reverse link ``r`` carries core ``r``'s
        ``link_tx_rev`` (FP32 words, cut into flits of ``link.width`` bits by the link) to
        core ``r - 1``'s ``link_rx_rev`` (:func:`hdl.multi.link.add_reverse_links`).
    """

    def __init__(self, *, config: TrainingRingConfig | None = None,
                 core_module: str | None = None, **core_kwargs):
        self.config = config or TrainingRingConfig()
        if not isinstance(self.config, TrainingRingConfig):
            mark_used(self)
            raise TypeError(f"TrainingRing.config must be a TrainingRingConfig, not "
                            f"{type(self.config).__name__}")
        if core_module is not None and not (isinstance(core_module, str)
                                            and core_module.isidentifier()):
            mark_used(self)
            raise ValueError(f"TrainingRing.core_module must be None or a Verilog identifier, "
                             f"not {core_module!r}")
        self.core_module = core_module
        self.core_kwargs = core_kwargs
        c = self.config.core
        N = c.ranks
        members = {}
        for r in range(N):
            members[f"cmd_{r}"] = In(stream.Signature(host_cmd_layout(c)))
            members[f"rsp_{r}"] = Out(stream.Signature(host_rsp_layout(c)))
            members[f"flits_{r}"] = Out(32)
        members.update(done=Out(N), running=Out(N), stall_tx=In(N), stall_rx=In(N),
                       overflow=Out(N))
        if c.reverse_links:
            for r in range(N):
                members[f"flits_rev_{r}"] = Out(32)
            members.update(stall_tx_rev=In(N), stall_rx_rev=In(N), overflow_rev=Out(N))
        super().__init__(members)
        #: the cores of the last elaboration (tests reach their memories through them);
        #: their port interfaces only, with ``core_module``
        self.cores = []

    @property
    def verilog_modules(self) -> list[tuple[str, wiring.Component]]:
        """``(name, component)`` of each module the top instantiates by name: the core, with
        ``core_module``; none otherwise."""
        if self.core_module is None:
            return []
        # marked used: a caller may read only the names (hdl.cli writes them beside the Verilog)
        return [(self.core_module,
                 mark_used(TrainingCore(config=self.config.core, **self.core_kwargs)))]

    def _core_instance(self, m, r: int):
        """Core ``r`` as an instance of ``core_module``: its port interface (a signature
        created under ``core<r>``), each port wired to the instance by the name
        :func:`hdl.gen.port_signals` gives it in the core's own Verilog."""
        signature = mark_used(TrainingCore(config=self.config.core, **self.core_kwargs)).signature
        core = signature.create(path=(f"core{r}",))
        ports = {"i_clk": ClockSignal(), "i_rst": ResetSignal()}
        for path, member, value in port_members(signature, core):
            prefix = "i_" if member.flow == wiring.In else "o_"
            ports[prefix + "__".join(map(str, path))] = value
        m.submodules[f"core{r}"] = Instance(self.core_module, **ports)
        return core

    def elaborate(self, platform):
        m = Module()
        c = self.config.core
        N, W = c.ranks, c.link_width
        gtx, grx = [], []
        self.cores = []
        for r in range(N):
            if self.core_module is None:
                core = TrainingCore(config=c, **self.core_kwargs)
                m.submodules[f"core{r}"] = core
            else:
                core = self._core_instance(m, r)
            m.submodules[f"gate_tx{r}"] = gt = LinkGate(width=W)
            m.submodules[f"gate_rx{r}"] = gr = LinkGate(width=W)
            m.d.comb += [core.rank.eq(r), self.done[r].eq(core.done),
                         self.running[r].eq(core.running),
                         gt.stall.eq(self.stall_tx[r]), gr.stall.eq(self.stall_rx[r])]
            wiring.connect(m, wiring.flipped(getattr(self, f"cmd_{r}")), core.cmd)
            wiring.connect(m, core.rsp, wiring.flipped(getattr(self, f"rsp_{r}")))
            wiring.connect(m, core.link_tx, gt.i)
            wiring.connect(m, gr.o, core.link_rx)
            gtx.append(gt)
            grx.append(gr)
            self.cores.append(core)
        links = connect_ring(m, [g.o for g in gtx], [g.i for g in grx], self.config.flit_link)
        for r in range(N):
            m.d.comb += [getattr(self, f"flits_{r}").eq(links[r].flits),
                         self.overflow[r].eq(links[r].overflow)]
        if c.reverse_links:
            add_reverse_links(m, self, [k.link_tx_rev for k in self.cores],
                              [k.link_rx_rev for k in self.cores], self.config.link)
        return m


def _params(preset: str) -> dict:
    cfg = TrainingRingConfig.preset(preset)
    return {"core": cfg.core.to_dict(), "link": cfg.link.to_dict(), "ranks": cfg.ranks,
            "latency": 1,
            "latency_note": "every core's host port as training_core's (its latency_note)"}


def _build(preset: str) -> TrainingRing:
    # the cores as one module instantiated N times (converted and compiled once); FPGA-build
    # cores (``-fpga``) with the FPGA build's optimizer, whose units are shared, and FP32 units
    cfg = TrainingRingConfig.preset(preset)
    kwargs = fpga_core_kwargs() if cfg.core.optim_shared_units else {}
    return TrainingRing(config=cfg, core_module="tessera_training_ring_core", **kwargs)


TESSERA_BLOCKS = [
    Block(name="training_ring", build=_build, params=_params),
]
