"""Out-of-context synthesis harness: a block with every port reachable, on two board pins.

A block's ports are far more than a board's pins (a 16-wide FP32 group is 512 bits), so the
harness feeds every input bit from one scan chain shifted in from a single pin, and folds every
output bit into one pin through a *pipelined* XOR tree (one register per 4:1 level). Every bit of
logic therefore stays observable and controllable (nothing is optimised away, no input is
constant), and every path the harness adds is a one-LUT register-to-register hop, so the
critical path reported by nextpnr is the block's own.
"""
from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib import data
from amaranth.lib.wiring import Flow

__all__ = ["SynthHarness"]


class SynthHarness(Elaboratable):
    """Wrap ``block`` (a ``wiring.Component`` in the ``sync`` domain) for place and route.

    Members
    -------
    scan_in : board input pin; shifted into the input scan chain every cycle.
    fold_out : board output pin; XOR of every output bit, registered per tree level.
    """

    def __init__(self, block):
        self.block = block
        self.inputs, self.outputs = [], []
        for _path, member, value in block.signature.flatten(block):
            if isinstance(value, data.View):   # layout-typed members (struct payloads)
                value = value.as_value()
            if not isinstance(value, Signal):
                continue                       # constant members (e.g. always_ready)
            (self.inputs if member.flow == Flow.In else self.outputs).append(value)
        self.in_bits = sum(len(s) for s in self.inputs)
        self.out_bits = sum(len(s) for s in self.outputs)

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = self.block
        scan_in = platform.request("button_fire", 0).i
        fold_out = platform.request("led", 0).o

        chain = Signal(max(self.in_bits, 1), name="scan_chain")
        m.d.sync += chain.eq((chain << 1) | scan_in)
        offset = 0
        for port in self.inputs:
            m.d.comb += port.eq(chain[offset:offset + len(port)])
            offset += len(port)

        level = [bit for port in self.outputs for bit in port]
        depth = 0
        while len(level) > 1:
            folded = []
            for i in range(0, len(level), 4):
                r = Signal(name=f"fold_{depth}_{i // 4}")
                acc = level[i]
                for bit in level[i + 1:i + 4]:
                    acc = acc ^ bit
                m.d.sync += r.eq(acc)
                folded.append(r)
            level, depth = folded, depth + 1
        m.d.comb += fold_out.eq(level[0] if level else 0)
        self.harness_ffs = self.in_bits + sum(
            -(-self.out_bits // 4 ** (d + 1)) for d in range(depth))
        return m
