"""One rank's end of the ring: both link codecs and the local loopback (docs/multicore.md).

A :class:`LinkEndpoint` sits between a :class:`~hdl.multi.collective.CollectiveEngine` and the
flit-level links: the engine's ``tx`` words go through a
:class:`~hdl.multi.codec.LinkTxCodec` to ``link_tx``, and the flits of ``link_rx`` through a
:class:`~hdl.multi.codec.LinkRxCodec` to the engine's ``rx``. While ``loop`` is 1 the transmit
codec's flits go to this rank's own receive codec instead, and the link is left alone
(``link_tx.valid = 0``, ``link_rx.ready = 0``: a neighbour's flits wait on the link). A BFP
all-reduce uses this for its last step: the owner of a segment passes it through its own codecs
and so holds the decoded value its neighbours hold, without sending it around the ring again.
"""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import BFPConfig, check_bool
from ..formats import BFPFlags
from ..lib.mustuse import used_if_rejected
from .codec import LinkRxCodec, LinkTxCodec, check_flit_args, mode_layout

__all__ = ["LinkEndpoint"]


class LinkEndpoint(wiring.Component):
    """The link codecs of one rank, with a loopback from its transmit to its receive codec.

    Parameters
    ----------
    flit_bits : int
        Flit width, a divisor of 32.
    bfp_config : BFPConfig
    conv_skid : bool
        The transmit codec's skid buffer after its converter (:class:`~hdl.multi.codec.
        LinkTxCodec`; the training core's FPGA build).

    Members
    -------
    i : In(stream.Signature(32))
        FP32 words from the engine (its ``tx``).
    o : Out(stream.Signature(32))
        FP32 words to the engine (its ``rx``).
    link_tx : Out(stream.Signature(flit_bits))
        Flits to rank ``r + 1``.
    link_rx : In(stream.Signature(flit_bits))
        Flits from rank ``r - 1``.
    mode : In(mode_layout(bfp_config))
        Both codecs' mode; hold it while words are in flight, and set it a cycle before the
        receive codec takes the first flit in it (see
        :class:`~hdl.multi.codec.LinkRxCodec`).
    enable : In(1)
        The receive codec takes flits only while 1 (see :class:`~hdl.multi.codec.LinkRxCodec`).
    loop : In(1)
        Flits from the transmit codec to the receive codec, not to the link. Change it only
        while ``idle`` and no received flit is waiting to complete a word or group.
    flags : Out(BFPFlags)
        The transmit codec's sticky flags.
    clear_flags : In(1)
    idle : Out(1)
        The transmit codec holds no word (``mode`` and ``loop`` may change).
    """

    def __init__(self, *, flit_bits: int, bfp_config: BFPConfig, conv_skid: bool = False):
        check_flit_args(self, flit_bits, bfp_config)
        with used_if_rejected(self):
            check_bool("LinkEndpoint", "conv_skid", conv_skid)
        self.flit_bits, self.bfp_config, self.conv_skid = flit_bits, bfp_config, conv_skid
        super().__init__({
            "i": In(stream.Signature(32)), "o": Out(stream.Signature(32)),
            "link_tx": Out(stream.Signature(flit_bits)),
            "link_rx": In(stream.Signature(flit_bits)),
            "mode": In(mode_layout(bfp_config)), "enable": In(1), "loop": In(1),
            "flags": Out(BFPFlags), "clear_flags": In(1), "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        txc = m.submodules.tx_codec = LinkTxCodec(flit_bits=self.flit_bits,
                                                  bfp_config=self.bfp_config,
                                                  conv_skid=self.conv_skid)
        rxc = m.submodules.rx_codec = LinkRxCodec(flit_bits=self.flit_bits,
                                                  bfp_config=self.bfp_config)
        m.d.comb += [txc.mode.eq(self.mode), rxc.mode.eq(self.mode), rxc.enable.eq(self.enable),
                     self.flags.eq(txc.flags), txc.clear_flags.eq(self.clear_flags),
                     self.idle.eq(txc.idle)]
        wiring.connect(m, wiring.flipped(self.i), txc.i)
        wiring.connect(m, rxc.o, wiring.flipped(self.o))
        # the loopback: a payload mux and valid/ready gated by ``loop``
        m.d.comb += self.link_tx.payload.eq(txc.o.payload)
        with m.If(self.loop):
            m.d.comb += [rxc.i.valid.eq(txc.o.valid), rxc.i.payload.eq(txc.o.payload),
                         txc.o.ready.eq(rxc.i.ready)]
        with m.Else():
            m.d.comb += [self.link_tx.valid.eq(txc.o.valid), txc.o.ready.eq(self.link_tx.ready),
                         rxc.i.valid.eq(self.link_rx.valid),
                         rxc.i.payload.eq(self.link_rx.payload),
                         self.link_rx.ready.eq(rxc.i.ready)]
        return m
