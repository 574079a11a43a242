"""Fuzzing the matmul engine's and the optimizer engine's command streams in the Amaranth
simulator (docs/testing.md, "Fuzzing"): seeded random raw commands -- valid ones and every
kind of malformed one (bad opcodes, memories, addresses, counts, shapes, widths, rounding,
registers and register values) -- each answered as the golden model predicts (a refused
command changes nothing: the matmul engine answers an error status, the optimizer engine sets
its sticky ``error`` bit), every wait with a cycle deadline, and every memory read back and
compared with the model's at the end."""
from hdl.array.config import ArrayConfig
from hdl.array.standalone import MatmulEngineWithMemories
from hdl.fp32.config import FP32Config
from hdl.fp32.divsqrt_config import FP32DivSqrtConfig
from hdl.optim.config import STATUS_FIELDS, OptimConfig
from hdl.optim.standalone import OptimEngineWithMemories
from sim.model.array import ERR_ADDR, ERR_MODE, ERR_ROUNDING, ERR_SHAPE, ERR_WIDTH, OK
from sim.tb.amaranth_tb import StreamTransport, run_sim
from sim.tb.fuzz import fuzz_matmul_engine, fuzz_optim_engine


def test_matmul_engine_random_commands():
    """120 random commands back to back (S = 2, 16-line scratchpads), then all 48 lines."""
    cfg = ArrayConfig(size=2, mem_depth=16, dim_bits=5)
    dut = MatmulEngineWithMemories(config=cfg)
    out = {}

    async def tb(ctx):
        out.update(await fuzz_matmul_engine(cfg, StreamTransport(ctx, dut.cmd, dut.rsp),
                                            seed=11, n=120))

    run_sim(dut, tb)
    statuses = {s for (_, s) in out}
    assert {OK, ERR_MODE, ERR_SHAPE, ERR_WIDTH, ERR_ROUNDING, ERR_ADDR} <= statuses, out
    assert out.get((2, OK), 0) >= 10, out          # passes that ran


class AmaranthOptimPort:
    """The optimizer engine's streams in the Amaranth simulator, every wait with a deadline
    (the ``port`` of :func:`sim.tb.fuzz.fuzz_optim_engine`)."""

    def __init__(self, ctx, dut, deadline=400):
        self.ctx, self.dut, self.deadline = ctx, dut, deadline

    async def _put(self, st, payload):
        ctx = self.ctx
        ctx.set(st.valid, 1)
        ctx.set(st.payload.as_value() if hasattr(st.payload, "as_value") else st.payload,
                payload)
        for _ in range(self.deadline):
            _, _, ready = await ctx.tick().sample(st.ready)
            if ready:
                ctx.set(st.valid, 0)
                return
        raise TimeoutError(f"stream not ready within {self.deadline} cycles")

    async def send(self, payload):
        await self._put(self.dut.cmd, payload)

    async def send_words(self, words):
        for w in words:
            await self._put(self.dut.wdata, w)

    async def get_words(self, count):
        ctx, st, out = self.ctx, self.dut.rdata, []
        ctx.set(st.ready, 1)
        for _ in range(self.deadline * max(count, 1)):
            _, _, valid, payload = await ctx.tick().sample(st.valid, st.payload)
            if valid:
                out.append(int(payload))
                if len(out) == count:
                    ctx.set(st.ready, 0)
                    return out
        raise TimeoutError(f"{len(out)} of {count} words")

    async def wait_idle(self):
        await self.ctx.tick()
        for _ in range(self.deadline):
            if not self.ctx.get(self.dut.busy):
                return
            await self.ctx.tick()
        raise TimeoutError(f"engine busy after {self.deadline} cycles")

    def status(self) -> dict:
        st = self.ctx.get(self.dut.status)
        return {name: int(getattr(st, name)) for name, _ in STATUS_FIELDS}


def test_optim_engine_random_commands():
    """150 random commands (depth 16); after each the whole status (``error`` included) equals
    the model's; then W, M, V, G read back."""
    cfg = OptimConfig(depth=16, reduce_lanes=8)
    dut = OptimEngineWithMemories(config=cfg, fp32_config=FP32Config(),
                                  divsqrt_config=FP32DivSqrtConfig.preset("tiny"))
    seen = {}

    async def tb(ctx):
        seen.update(await fuzz_optim_engine(cfg, AmaranthOptimPort(ctx, dut), seed=5, n=150))

    run_sim(dut, tb)
    assert seen["refused"] >= 10 and seen["steps"] >= 5 and seen["reads"] >= 10, seen
