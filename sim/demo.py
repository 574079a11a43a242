"""``make demo``: run Tessera's blocks on real inputs, then train the digits in RTL, checking
everything against the golden models.

Parts 1-3: every number printed as "hardware" comes out of the Amaranth design simulated cycle
by cycle (Amaranth's simulator: they start in seconds). Part 4 is a short ``tessera train``: the
training core's generated Verilog, Verilated (built once, a few minutes, cached in
``build/verilated/``), trains the digits MLP. Every check compares bit for bit with the
pure-numpy golden model in ``sim/``. The demo exits non-zero if
any check fails (``--blocks-only``: parts 1-3 alone).

1. FAST block floating point: a group of 16 FP32 values with an outlier, quantized at 8, 4 and
   2 bits with round-to-nearest-even and stochastic rounding.
2. Chunked fMAC: the same BFP dot product at 8x8, 4x4 and 2x2 bits — cycles scale with chunk
   pairs — then the array-edge converter turns the exact integer into FP32.
3. FP32 units: divide, square root and exp, bit-exact against numpy float32 / the exp model.
4. Training: two epochs of the digits at 4-bit widths in the S = 4 core; test accuracy of the
   RTL's weights beside the float32 reference trained on the same batches (the golden-model
   check runs in ``make train`` and the tests: at S = 4 it is four times slower than the RTL).
"""
from __future__ import annotations

import sys

import numpy as np
from amaranth.lib import data

from hdl.bfp.converter import BFPConverter, fp32_stream_layout
from hdl.config import BFPConfig, FMACConfig
from hdl.edge_converter import EdgeConfig, EdgeConverter, edge_input_layout
from hdl.formats import FP32
from hdl.fmac import FMAC, fmac_operand_layout, fmac_result_layout
from sim.model import bfp, fmac as fmac_model
from sim.model.edge import edge_to_fp32
from sim.tb.amaranth_tb import run_sim, stream_get, stream_put

FAILURES: list[str] = []


def check(what: str, ok: bool) -> str:
    if not ok:
        FAILURES.append(what)
    return "ok" if ok else "MISMATCH"


def f32(bits: int) -> float:
    return float(np.array(bits, np.uint32).view(np.float32))


def run_stream(dut, payloads: list[int], n_out: int):
    """Feed ``payloads`` to ``dut.i``, collect ``n_out`` raw payloads from ``dut.o``; also
    return the cycle count from the first input transfer to the last output transfer."""
    out, marks = [], {}

    async def producer(ctx):
        for k, p in enumerate(payloads):
            await stream_put(ctx, dut.i, p)
            if k == 0:
                marks["first_in"] = marks.get("now", 0)

    async def consumer(ctx):
        for _ in range(n_out):
            out.append(await stream_get(ctx, dut.o, raw=True))
        marks["last_out"] = marks.get("now", 0)

    async def clock_count(ctx):
        async for _ in ctx.tick():
            marks["now"] = marks.get("now", 0) + 1

    run_sim(dut, producer, consumer, processes=[clock_count])
    return out, marks["last_out"] - marks["first_in"]


def demo_bfp(x: np.ndarray, cfg: BFPConfig) -> dict:
    print("== 1. FP32 -> FAST BFP converter (group of 16, shared exponent) ==")
    print("input:", np.array2string(x, precision=3, max_line_width=110))
    layout = fp32_stream_layout(cfg)
    jobs = [(w, r) for w in (8, 4, 2) for r in (bfp.ROUND_NEAREST, bfp.ROUND_STOCHASTIC)]
    fp32 = data.Layout.cast(FP32)
    words = [layout.const({"data": [fp32.from_bits(int(v)) for v in x.view(np.uint32)], "width": w,
                           "rounding": r}).as_value().value for w, r in jobs]
    hw, _ = run_stream(BFPConverter(config=cfg), words, len(words))
    model = bfp.BFPConverterModel(cfg)
    results = {}
    for (w, r), word, got in zip(jobs, words, hw):
        want = model.accept(word)
        g = bfp.unpack_bfp_group(got, cfg)
        values = bfp.dequantize_group_bits(g["exp"], g["sign"], g["mag"], w).view(np.float32)
        err = float(np.max(np.abs(values.astype(np.float64) - x)))
        name = "nearest" if r == bfp.ROUND_NEAREST else "stochastic"
        print(f"  m={w} {name:10s} E={g['exp']:4d}  M={list(map(int, g['mag']))}")
        print(f"  {'':15s} max |error| {err:.4g}   hardware vs golden: {check(f'bfp m={w} {name}', got == want)}")
        results[(w, r)] = g
    return results


def demo_fmac(xa: np.ndarray, xb: np.ndarray, bcfg: BFPConfig, fcfg: FMACConfig):
    print("\n== 2. Chunked fMAC dot product + array-edge converter (int * 2^e -> FP32) ==")
    exact64 = float(np.dot(xa.astype(np.float64), xb.astype(np.float64)))
    print(f"  float64 reference x.y = {exact64:.6g}")
    op_layout, res_layout = fmac_operand_layout(fcfg), fmac_result_layout(fcfg)
    ecfg = EdgeConfig.preset("default")
    for w in (8, 4, 2):
        qa = bfp.quantize(xa, bcfg, width=w)
        qb = bfp.quantize(xb, bcfg, width=w)
        sa, ma, sb, mb = qa.sign, qa.mag, qb.sign, qb.mag
        n = len(ma)
        words = [op_layout.const({"a_mag": int(ma[k]), "a_sign": int(sa[k]), "b_mag": int(mb[k]),
                                  "b_sign": int(sb[k]), "width_a": w, "width_b": w,
                                  "last": int(k == n - 1)}).as_value().value for k in range(n)]
        dut = FMAC(config=fcfg)
        (got,), cycles = run_stream(dut, words, 1)
        res = res_layout.from_bits(got)
        value = int(res.value)
        want, _ovf, busy = fmac_model.dot(sa, ma, sb, mb, w, w, fcfg.lanes, fcfg.acc_bits)
        beat = fmac_model.product_cycles(w, w, fcfg.lanes)
        expect_cycles = fmac_model.fmac_stream_cycles([(w, w)] * n, fcfg.lanes, dut.latency)
        exp = int(np.ravel(qa.exp)[0]) - (w - 1) + int(np.ravel(qb.exp)[0]) - (w - 1)
        (fp_bits,), _ = run_stream(
            EdgeConverter(config=ecfg),
            [edge_input_layout(ecfg).const({"value": value, "exp": exp}).as_value().value], 1)
        print(f"  m={w}x{w}: {beat:2d} cycles/product, {n} products + latency {dut.latency} "
              f"= {cycles} cycles (model {expect_cycles}: {check(f'fmac cycles m={w}', cycles == expect_cycles)})")
        print(f"          exact integer {value} (golden {want}: {check(f'fmac value m={w}', value == want)})"
              f" x 2^{exp} -> FP32 {f32(fp_bits):.6g} "
              f"(golden: {check(f'edge m={w}', fp_bits == edge_to_fp32(value, exp, ecfg))}), "
              f"BFP error vs float64 {abs(f32(fp_bits) - exact64):.3g}")


def demo_fp32_units(rng: np.random.Generator):
    from hdl.fp32.div import FP32Div, FP32DivIn
    from hdl.fp32.divsqrt_config import FP32DivSqrtConfig
    from hdl.fp32.exp import FP32Exp
    from hdl.fp32.sqrt import FP32Sqrt
    from sim.model import fp32_exp

    print("\n== 3. FP32 units (IEEE binary32, round to nearest even, exact subnormals) ==")
    cfg = FP32DivSqrtConfig.preset("default")
    a = np.array([1.0, 2.0, -7.5, 3e-39, np.inf, 0.0], np.float32)
    b = np.array([3.0, 0.0, 2.5e-3, 1.5, 2.0, 0.0], np.float32)
    fp32 = data.Layout.cast(FP32)
    words = [FP32DivIn.const({"a": fp32.from_bits(int(x)), "b": fp32.from_bits(int(y))}).as_value().value
             for x, y in zip(a.view(np.uint32), b.view(np.uint32))]
    hw, _ = run_stream(FP32Div(config=cfg), words, len(words))
    want = fp32_exp.FP32Div(cfg)(a.view(np.uint32), b.view(np.uint32))["r"]
    for x, y, got, w in zip(a, b, hw, want):
        print(f"  {x:>10.4g} / {y:<10.4g} = {f32(got):<12.6g} {check(f'div {x}/{y}', got == int(w))}")
    s = np.array([2.0, 0.25, 1e-40, -1.0], np.float32)
    hw, _ = run_stream(FP32Sqrt(config=cfg), [int(v) for v in s.view(np.uint32)], len(s))
    want = fp32_exp.FP32Sqrt(cfg)(s.view(np.uint32))["r"]
    for x, got, w in zip(s, hw, want):
        print(f"  sqrt({x:.4g}) = {f32(got):.8g} {check(f'sqrt {x}', got == int(w))}")
    e = np.array([0.0, 1.0, -3.5, -100.0, 88.0], np.float32)
    hw, _ = run_stream(FP32Exp(config=cfg), [int(v) for v in e.view(np.uint32)], len(e))
    want = fp32_exp.FP32Exp(cfg)(e.view(np.uint32))["r"]
    ulps = fp32_exp.exp_ulp_error(e.view(np.uint32), np.array(hw, np.uint32))
    for x, got, w, ulp in zip(e, hw, want, ulps):
        print(f"  exp({x:g}) = {f32(got):.8g} ({float(ulp):.2f} ulp from float64) "
              f"{check(f'exp {x}', got == int(w))}")


#: The short training run of ``make demo``: the S = 4 core (the quicker Verilator build), two
#: epochs of the digits at 4-bit widths. The golden model is not run here: at S = 4 it takes
#: about 3.5 s a step (Python, per BFP group), four times the RTL; ``make train`` and
#: ``tests/test_train_verilated.py`` run it beside the RTL.
DEMO_TRAIN = dict(size=4, widths="4", epochs=2, check_every=0)


def demo_train(out="runs/demo", **overrides) -> int:
    """Train the digits in the Verilated core (``tessera train``, short) and print the test
    accuracy beside the float32 reference's."""
    from sim.host.train import CheckFailed, TrainSpec, train
    spec = TrainSpec(**{**DEMO_TRAIN, **overrides})
    print(f"4. Training in RTL: MLP 64-64-10 on the digits, S = {spec.size}, widths "
          f"{spec.schedule}, {spec.epochs} epoch(s), every step in the Verilated core "
          f"(full run, checked word for word by the golden model: make train)")
    try:
        res = train(spec, out, progress=sys.stderr.isatty(), plots=True)
    except CheckFailed as exc:
        FAILURES.append(f"training run: {exc}")
        print(f"   MISMATCH: {exc}")
        return 1
    if res.interrupted:
        return 130
    s = res.summary
    print(f"   test accuracy {100 * s['test_accuracy']:.2f} % (RTL weights) vs "
          f"{100 * s['reference_accuracy']:.2f} % (float32 reference, same batches)")
    checked = (f"golden model {check('bit-exact', s['golden_checked'])} "
               f"({s['golden_checks']} checks)" if spec.check_every else
               "golden model not run (make train runs it)")
    print(f"   {s['sim_cycles']:,} cycles simulated at {s['sim_cycles_per_second']:,.0f} "
          f"cycles/s; {checked}; outputs in {out}/")
    return 0


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description="make demo")
    ap.add_argument("--blocks-only", action="store_true",
                    help="only the block demonstrations (no Verilator build)")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(2022)
    bcfg = BFPConfig.preset("default")
    x = rng.standard_normal(bcfg.group_size).astype(np.float32)
    x[3] = np.float32(40.0)                      # an outlier: small values lose bits at low m
    demo_bfp(x, bcfg)
    y = rng.standard_normal(bcfg.group_size).astype(np.float32)
    demo_fmac(x, y, bcfg, FMACConfig.preset("default"))
    demo_fp32_units(rng)
    print()
    if not args.blocks_only and demo_train() == 130:
        print("demo: interrupted")
        return 130
    if FAILURES:
        print(f"demo: {len(FAILURES)} check(s) FAILED: {', '.join(FAILURES)}")
        return 1
    print("demo: every hardware result matched its golden model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
