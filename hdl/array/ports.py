"""Scratchpad port multiplexer of the matmul engine: which client drives each of the three
line ports (host when idle; the pass's two operand reads and its accumulator otherwise)."""
from __future__ import annotations

from amaranth.hdl import Module, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..lib.memport import LinePort
from .config import BWD_DATA, BWD_WEIGHT, FWD, ArrayConfig
from .control import line_bits

__all__ = ["read_port_signature", "PortMux"]


def read_port_signature(config: ArrayConfig) -> wiring.Signature:
    """A line read port (client view): ``r_addr`` Out, ``r_en`` Out, ``r_data`` In, with the
    timing of :class:`~hdl.lib.memport.LinePort`."""
    return wiring.Signature({"r_addr": Out(line_bits(config)), "r_en": Out(1),
                             "r_data": In(32 * config.size)})


class PortMux(wiring.Component):
    """Routes the engine's clients onto scratchpad ports A, B, C.

    While no pass runs, the host (``READ``/``WRITE``) owns all three. While a pass runs,
    ``mode`` decides: quantizer 0 reads A (FWD, BWD_WEIGHT) or C (BWD_DATA); quantizer 1 reads
    B (FWD, BWD_DATA) or C (BWD_WEIGHT); the accumulator reads and writes the output
    scratchpad C (FWD), A (BWD_DATA) or B (BWD_WEIGHT). Purely combinational.

    Parameters
    ----------
    config : ArrayConfig

    Members
    -------
    a, b, c : Out(LinePort(addr_bits=line_bits(config), words=S))
        The scratchpad ports.
    q0, q1 : In(read_port_signature(config))
        The quantizers' reads.
    acc : In(LinePort(addr_bits=line_bits(config), words=S))
        The accumulator's read-modify-write.
    mode : In(2), running : In(1)
    host_addr : In(line_bits(config)), host_data : In(32 * S)
    host_rd, host_wr : In(3)
        Host read / whole-line write of A, B, C (used while not ``running``).
    host_rsel : In(2)
        ``host_rdata`` shows the read data of scratchpad A, B or C.
    host_rdata : Out(32 * S)
    """

    def __init__(self, *, config: ArrayConfig):
        self.config = config
        lp = LinePort(addr_bits=line_bits(config), words=config.size)
        super().__init__({
            "a": Out(lp), "b": Out(lp), "c": Out(lp),
            "q0": In(read_port_signature(config)), "q1": In(read_port_signature(config)),
            "acc": In(lp),
            "mode": In(2), "running": In(1),
            "host_addr": In(line_bits(config)), "host_data": In(32 * config.size),
            "host_rd": In(3), "host_wr": In(3), "host_rsel": In(2),
            "host_rdata": Out(32 * config.size),
        })

    def elaborate(self, platform):
        m = Module()
        S = self.config.size
        mode, running = self.mode, self.running
        ports = [self.a, self.b, self.c]
        q0, q1, acc = self.q0, self.q1, self.acc
        is_fwd, is_bwd, is_bww = mode == FWD, mode == BWD_DATA, mode == BWD_WEIGHT
        # read ports: A: q0 (FWD, BWD_WEIGHT) / accum (BWD_DATA); B: q1 (FWD, BWD_DATA) / accum
        # (BWD_WEIGHT); C: accum (FWD) / q0 (BWD_DATA) / q1 (BWD_WEIGHT). Host when idle.
        users = {0: {FWD: q0, BWD_DATA: acc, BWD_WEIGHT: q0},
                 1: {FWD: q1, BWD_DATA: q1, BWD_WEIGHT: acc},
                 2: {FWD: acc, BWD_DATA: q0, BWD_WEIGHT: q1}}
        for j in range(3):
            rp = ports[j]
            with m.If(~running):
                m.d.comb += [rp.r_addr.eq(self.host_addr), rp.r_en.eq(self.host_rd[j])]
            with m.Else():
                with m.Switch(mode):
                    for md, user in users[j].items():
                        with m.Case(md):
                            m.d.comb += [rp.r_addr.eq(user.r_addr), rp.r_en.eq(user.r_en)]
        m.d.comb += [
            q0.r_data.eq(Mux(is_bwd, ports[2].r_data, ports[0].r_data)),
            q1.r_data.eq(Mux(is_bww, ports[2].r_data, ports[1].r_data)),
            acc.r_data.eq(Mux(is_fwd, ports[2].r_data,
                              Mux(is_bwd, ports[0].r_data, ports[1].r_data))),
        ]
        with m.Switch(self.host_rsel):
            for j in range(3):
                with m.Case(j):
                    m.d.comb += self.host_rdata.eq(ports[j].r_data)
        # write ports: the pass's output scratchpad takes the accumulator's writes
        out_mem = {FWD: 2, BWD_DATA: 0, BWD_WEIGHT: 1}
        for j in range(3):
            wp = ports[j]
            with m.If(~running):
                m.d.comb += [wp.w_addr.eq(self.host_addr), wp.w_data.eq(self.host_data),
                             wp.w_en.eq(Mux(self.host_wr[j], (1 << S) - 1, 0))]
            with m.Else():
                md = [k for k, v in out_mem.items() if v == j][0]
                m.d.comb += [wp.w_addr.eq(acc.w_addr), wp.w_data.eq(acc.w_data),
                             wp.w_en.eq(Mux(mode == md, acc.w_en, 0))]
        return m
