"""The in-place transposed systolic array: ``S x S`` PEs, three dataflows on the same PEs."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..edge_converter import edge_value_shape, to_magnitude
from ..fmac import FMACCore
from ..fmac_step import FMACSchedule
from ..registry import Block
from .config import BWD_DATA, BWD_WEIGHT, FWD, ArrayConfig
from .pe import PE, elem_layout, op_layout, psum_layout, width_shape

__all__ = ["beat_layout", "wload_layout", "array_out_layout", "array_latency", "SystolicArray"]


def array_latency(config: ArrayConfig, width_a: int, width_b: int) -> int:
    """Cycles from an ``inp`` transfer to its ``out`` vector without backpressure:
    ``(2*S + 1) * beat_cycles + 3 + FMACCore.LATENCY``."""
    return ((2 * config.size + 1) * config.beat_cycles(width_a, width_b) + 3
            + FMACCore.LATENCY)


def beat_layout(config: ArrayConfig) -> data.StructLayout:
    """One ``inp`` beat: ``h[k]`` enters row ``k`` at the left edge, ``v[n]`` column ``n`` at the
    top edge (sign/magnitude, exponent-free); ``bank`` = weight bank of this beat
    (``FWD``/``BWD_DATA``); ``first``/``last`` = first/last beat of a ``BWD_WEIGHT`` batch tile."""
    S = config.size
    return data.StructLayout({
        "h": data.ArrayLayout(elem_layout(config), S),
        "v": data.ArrayLayout(elem_layout(config), S),
        "bank": 1, "first": 1, "last": 1,
    })


def wload_layout(config: ArrayConfig) -> data.StructLayout:
    """One ``wload`` transfer: row ``row`` of stationary bank ``bank``: ``w[n]`` -> PE(row, n)."""
    S = config.size
    return data.StructLayout({
        "w": data.ArrayLayout(elem_layout(config), S),
        "row": range(S), "bank": 1,
    })


def array_out_layout(config: ArrayConfig) -> data.StructLayout:
    """One ``out`` vector: ``value[l]`` (exact ``acc_bits`` integers: two's complement, or
    with ``config.out_magnitude`` magnitude and sign, :func:`hdl.edge_converter.edge_value_shape`)."""
    shape = edge_value_shape(config.acc_bits, config.out_magnitude)
    return data.StructLayout({"value": data.ArrayLayout(shape, config.size)})


class SystolicArray(wiring.Component):
    """In-place transposed systolic array (docs/array.md): ``PE(k, n)`` holds ``W[k, n]``.

    Dataflows (``mode``, constant during a pass; the skew and de-skew registers are inside):

    * ``FWD`` (``Y = X . W``): beat ``m`` carries ``h = X[m, :]``; ``h[k]`` enters row ``k`` and
      moves right (along n); partial sums move down (along k); the output vector of beat ``m``
      is ``Y[m, :]`` (lane ``n``, leaving the bottom edge).
    * ``BWD_DATA`` (``dX = dY . W^T``, the *same* stationary ``W``): beat ``m`` carries
      ``v = dY[m, :]``; ``v[n]`` enters column ``n`` and moves down (along k); partial sums
      move right (along n); the output is ``dX[m, :]`` (lane ``k``, leaving the right edge).
    * ``BWD_WEIGHT`` (``dW = X^T . dY``): a batch tile is exactly ``S`` beats (``first`` on its
      first, ``last`` on its last); beat ``j`` carries ``h = X[j, :]``, ``v = dY[j, :]``; every PE
      accumulates ``X[j, k] * dY[j, n]``; when PE(k, n) finishes a tile its result leaves
      through the column's drain bus while the next tile already accumulates (at most one PE per
      column finishes per beat), and the output vector of the tile's beat ``j`` is row ``j`` of
      the tile: ``dW[j, :]`` (lane ``n``, bottom edge).

    Every valid ``inp`` beat produces exactly one ``out`` vector, in order.

    Timing: a beat is ``B = ceil((width_a/2)(width_b/2)/lanes)`` cycles (``cycles(...)``).
    ``inp`` is ready in the cycle before the cores become ready (the array's beat timer) when
    the output FIFO can reserve a slot (valid beats in flight + FIFO level, as registered one
    cycle earlier, ``< out_depth - 1``); a beat accepted in cycle ``t`` starts in cycle ``t + 1``
    from a register. The array also starts bubble beats while beats are in flight (they flush
    the pipeline). ``inp.ready`` is itself a register (its D input is the next cycle's value of
    that condition, so the timing is exactly that of the combinational condition), and so is
    ``start``: one copy for the control and one per PE row (the row's PEs and left skew
    registers; row 0's also drives the top skew registers), kept apart in synthesis. No path
    from ``start`` or the beat timer reaches the source in the same cycle, and each row's copy
    drives only its row (with the per-PE settings copies below, this took the S = 8 array from
    78-96 MHz to 102-111 MHz on the ECP5; docs/array.md). Without backpressure a beat
    accepted in cycle ``t`` leaves on ``out`` in cycle
    ``t + (2*S + 1)*B + 3 + FMACCore.LATENCY`` (:meth:`latency`). ``mode`` and the widths
    reach PE row ``k`` through ``k + 2`` registers; after they change, no beat starts for
    ``S + 1`` cycles (a beat accepted in the cycle of the change waits; change them only while
    the array is idle, ``busy = 0``).

    Stationary weights: two banks per PE. ``wload`` writes one row of a bank per cycle (the
    write lands one cycle after the transfer, before any beat accepted after the transfer can
    start); it is ready only while no beat tagged with that bank is still inside the array (up
    to the moment PE(S-1, S-1) captured it). The source must not send beats tagged with a bank while it is
    still loading that bank (load a tile, then stream it; load the next tile into the other
    bank while the current one streams).

    FPGA (ECP5-85F, ``make synth``, the array alone in the out-of-context harness): S = 8:
    17,163 LUT4, 1,572 CCU2C, 13,257 FF, 80 TRELLIS_DPR16X4 (LUTRAM), 102.4 MHz after place and
    route (102-111 MHz over three nextpnr seeds); S = 4: 4,376 LUT4, 420 CCU2C, 3,392 FF, 38
    LUTRAM, 127.0 MHz.

    Members
    -------
    inp : In(stream.Signature(beat_layout(config)))
        Operand beats.
    wload : In(stream.Signature(wload_layout(config)))
        Stationary-weight rows.
    out : Out(stream.Signature(array_out_layout(config)))
        Exact integer result vectors (``out_depth``-entry FIFO).
    mode : In(2)
        :data:`~hdl.array.config.FWD`, ``BWD_DATA`` or ``BWD_WEIGHT``.
    width_a, width_b : In(width_shape)
        Mantissa widths: ``a`` is ``h`` (``FWD``, ``BWD_WEIGHT``) or ``v`` (``BWD_DATA``); ``b``
        the weights (``FWD``/``BWD_DATA``) or ``v`` (``BWD_WEIGHT``).
    busy : Out(1)
        Beats in flight or results not yet taken.
    beat : Out(1)
        A beat starts this cycle (for counters).
    """

    @property
    def out_depth(self) -> int:
        """Output FIFO entries: every valid beat in flight reserves one, so the array never
        stops for lack of room while its consumer keeps up (``2*S + 9``; one entry covers the
        registered room check)."""
        return 2 * self.config.size + 9

    def __init__(self, *, config: ArrayConfig):
        if not isinstance(config, ArrayConfig):
            self._MustUse__silence = True        # no "never used" warning when rejected
            raise TypeError(f"SystolicArray.config must be an ArrayConfig, not {config!r}")
        self.config = config
        super().__init__({
            "inp": In(stream.Signature(beat_layout(config))),
            "wload": In(stream.Signature(wload_layout(config))),
            "out": Out(stream.Signature(array_out_layout(config))),
            "mode": In(2),
            "width_a": In(width_shape(config)), "width_b": In(width_shape(config)),
            "busy": Out(1),
            "beat": Out(1),
        })

    def cycles(self, width_a: int, width_b: int) -> int:
        return self.config.beat_cycles(width_a, width_b)

    def latency(self, width_a: int, width_b: int) -> int:
        """Cycles from an ``inp`` transfer to its ``out`` vector without backpressure."""
        return array_latency(self.config, width_a, width_b)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S = cfg.size
        opl = op_layout(cfg)
        psl = psum_layout(cfg)

        # Pass settings reach the PEs through a register chain down the rows (``row_k_settings``
        # holds them k + 1 cycles after a change: the widths of the row's chunk schedule) and
        # one more register per PE for its mode, a copy of its row's (PE row k sees it k + 2
        # cycles after a change), so no input fans out to all S*S PEs in one cycle. After a
        # change no beat starts for S + 1 cycles, so every PE and schedule holds the new
        # settings by the first beat's start (they change only while the array is idle). Every one of these registers loads only when its input differs from
        # its contents: the same values as a free-running register, but each register's enable
        # depends on its own output, so synthesis merges neither the copies of a row nor the
        # chain with a source's own shift register (the synthesis harness feeds the inputs from
        # a scan chain).
        setl = data.StructLayout({"mode": 2, "width_a": width_shape(cfg),
                                  "width_b": width_shape(cfg)})
        settings = Signal(setl, name="settings")
        m.d.comb += [settings.mode.eq(self.mode), settings.width_a.eq(self.width_a),
                     settings.width_b.eq(self.width_b)]

        def follow(reg, src, name):           # reg <= src, loading only when they differ
            load = Signal(name=f"{name}_load")
            m.d.comb += load.eq(Value.cast(src) != Value.cast(reg))
            with m.If(load):
                m.d.sync += reg.eq(src)
            return load

        row_set = [Signal(setl, name=f"row_{k}_settings") for k in range(S)]
        pe_mode = [[Signal(2, name=f"pe_{k}_{n}_mode") for n in range(S)] for k in range(S)]
        changed = follow(row_set[0], settings, "row_0_settings")
        for k in range(S):
            if k:
                follow(row_set[k], row_set[k - 1], f"row_{k}_settings")
            for n in range(S):
                follow(pe_mode[k][n], row_set[k].mode, f"pe_{k}_{n}_mode")
        settle = Signal(range(S + 1), name="settings_settle")
        # quiet: 1 when the settings have not changed for S + 1 cycles (a register; ``quiet_d``
        # is its next value). ``inp.ready`` uses the register, and ``start`` (a register too)
        # is only set for a cycle that will be quiet, so a beat accepted in the very cycle of a
        # change waits in ``hold`` until every row has the new settings.
        quiet = Signal(name="settings_quiet")
        quiet_d = Signal(name="settings_quiet_next")
        m.d.comb += quiet_d.eq(~changed & (settle <= 1))
        with m.If(changed):
            m.d.sync += settle.eq(S)
        with m.Elif(settle != 0):
            m.d.sync += settle.eq(settle - 1)
        m.d.sync += quiet.eq(quiet_d)

        # one chunk schedule per PE row (its PEs run in lockstep), from the row's settings
        pes = [[None] * S for _ in range(S)]
        scheds = []
        for k in range(S):
            # the array starts a beat only when the cores are ready (its beat timer)
            sched = FMACSchedule(config=cfg.fmac, start_when_ready=True)
            m.submodules[f"row_{k}_schedule"] = sched
            scheds.append(sched)
            m.d.comb += [sched.width_a.eq(row_set[k].width_a),
                         sched.width_b.eq(row_set[k].width_b)]
            for n in range(S):
                pe = PE(config=cfg, name=f"pe_{k}_{n}")
                m.submodules[f"pe_{k}_{n}"] = pe
                pes[k][n] = pe
                m.d.comb += pe.mode.eq(pe_mode[k][n])
                wiring.connect(m, sched.cmd, pe.cmd)
        self.pes = pes           # for simulation-time introspection in tests
        self.schedules = scheds

        depth = self.out_depth
        fifo = m.submodules.out_fifo = SyncFIFO(width=array_out_layout(cfg).size, depth=depth)
        # valid beats accepted and not yet pushed into the FIFO: each holds a reserved slot
        inflight = Signal(range(depth + 1), name="inflight")
        # inflight + FIFO level, counted directly (up on ``accept``, down when ``out`` transfers)
        # so the room check is a compare of one register with a constant. The check enters
        # ``inp_ready`` one cycle early (``room_next``), so it keeps one spare slot: inflight +
        # level grows by at most one per cycle.
        used = Signal(range(depth + 1), name="slots_used")
        # The array's beat timer: a local copy of the lockstep cores' ``ready``/``done`` (every
        # PE starts together, so every core's equal these), one cycle ahead for ``ready``. The
        # control reads it instead of a far-away PE, and ``start`` can be a register.
        maxc = cfg.max_mantissa // 2

        def chunks(width, name):          # FMACCore's clamp(width // 2, 1, max_mantissa // 2)
            n = Signal(range(maxc + 1), name=name)
            half = width >> 1
            m.d.comb += n.eq(Mux(half == 0, 1, Mux(half > maxc, maxc, half)))
            return n

        na, nb = chunks(self.width_a, "chunks_a"), chunks(self.width_b, "chunks_b")
        beat_m1 = Signal(range(maxc * maxc), name="beat_cycles_m1")
        with m.Switch(Cat(na, nb)):
            for ca in range(1, maxc + 1):
                for cb in range(1, maxc + 1):
                    with m.Case(ca | (cb << len(na))):
                        m.d.comb += beat_m1.eq(cfg.beat_cycles(2 * ca, 2 * cb) - 1)
            with m.Default():
                m.d.comb += beat_m1.eq(0)
        beat_busy = Signal(name="beat_busy")                # a beat's product steps run
        beat_wait = Signal(range(maxc * maxc), name="beat_wait")   # steps left after this one
        cores_ready = Signal(name="cores_ready")
        ready_next = Signal(name="cores_ready_next")
        beat_done = Signal(name="beat_done")                # every core's ``done``
        m.d.comb += cores_ready.eq(~beat_busy | (beat_wait == 0))
        self.beat_timer = (cores_ready, beat_done)          # for tests (lockstep check)

        # ``inp.ready`` is a register (``inp_ready``): its D input is the value the combinational
        # ready (``cores_ready_next & room & quiet & ~waiting``, room = a free output slot) would
        # have in the next cycle, computed from this cycle's next-state values, so the
        # behaviour is cycle-identical to the combinational ready while nothing that ``start`` drives reaches the source in the
        # same cycle (the source's ``valid`` only enters local control registers and counters).
        start = Signal(name="start")               # a register: a beat starts this cycle
        start_d = Signal(name="start_next")
        accept = Signal(name="accept")
        push = Signal(name="push")
        inp_ready = Signal(name="inp_ready")
        hold = Signal(beat_layout(cfg), name="inp_hold")      # the accepted beat
        hold_valid = Signal(name="inp_hold_valid")            # ... not started yet
        waiting = Signal(name="inp_hold_waiting")             # ... and not starting now
        m.d.comb += [
            waiting.eq(hold_valid & ~start),
            ready_next.eq(Mux(start, beat_m1 == 0, ~beat_busy | (beat_wait <= 1))),
            self.inp.ready.eq(inp_ready),
            accept.eq(self.inp.valid & inp_ready),
            start_d.eq(ready_next & quiet_d & (accept | waiting | (inflight != 0))),
            self.beat.eq(start),
        ]
        # next-cycle values of ``cores_ready_next``, the room check and ``waiting``
        ready_next_n = Signal(name="cores_ready_next_next")
        waiting_n = Signal(name="inp_hold_waiting_next")
        room_d = Signal(name="room_next")
        m.d.comb += [
            ready_next_n.eq(Mux(start_d, beat_m1 == 0,
                                Mux(start, beat_m1 <= 1, ~beat_busy | (beat_wait <= 2)))),
            waiting_n.eq((accept | waiting) & ~start_d),
            room_d.eq(used < depth - 1),
        ]
        m.d.sync += inp_ready.eq(ready_next_n & room_d & quiet_d & ~waiting_n)
        with m.If(accept):
            m.d.sync += [hold.eq(self.inp.payload), hold_valid.eq(1)]
        with m.Elif(start):
            m.d.sync += hold_valid.eq(0)
        m.d.sync += start.eq(start_d)
        with m.If(start):
            m.d.sync += [beat_busy.eq(1), beat_wait.eq(beat_m1)]
        with m.Elif(beat_busy):
            with m.If(beat_wait == 0):
                m.d.sync += beat_busy.eq(0)
            with m.Else():
                m.d.sync += beat_wait.eq(beat_wait - 1)
        m.d.sync += beat_done.eq(beat_busy & (beat_wait == 0))
        # ``start`` drives the control above; each PE row (and its left skew registers; row 0
        # also the top skew registers) has its own copy with the same value. Their D inputs
        # differ only by a term that is 1 whenever ``start_d`` is (``quiet_d`` implies every
        # row holds the current settings), so synthesis keeps them apart instead of merging
        # them back into one register with a fan-out across the array.
        start_row = [Signal(name=f"start_row_{k}") for k in range(S)]
        for k in range(S):
            same = Signal(name=f"row_{k}_settings_same")
            m.d.comb += same.eq(row_set[k].as_value() == row_set[(k + 1) % S].as_value())
            m.d.sync += start_row[k].eq(start_d & same)
            m.d.comb += scheds[k].start.eq(start_row[k])

        # ---- input edges with skew: row k delayed k beats, column n delayed n beats ---------
        p = self.inp.payload

        def entry(elem, name):
            e = Signal(opl, name=name)
            m.d.comb += [
                e.mag.eq(Mux(hold_valid, elem.mag, 0)), e.sign.eq(Mux(hold_valid, elem.sign, 0)),
                e.valid.eq(hold_valid), e.bank.eq(hold.bank), e.first.eq(hold.first),
                e.last.eq(hold.last),
            ]
            return e

        for idx in range(S):
            for edge, elem in (("left", hold.h[idx]), ("top", hold.v[idx])):
                src = entry(elem, f"{edge}_{idx}_entry")
                for j in range(idx):
                    r = Signal(opl, name=f"{edge}_{idx}_skew_{j}")
                    with m.If(start_row[idx] if edge == "left" else start_row[0]):
                        m.d.sync += r.eq(src)
                    src = r
                if edge == "left":
                    m.d.comb += pes[idx][0].h_in.eq(src)
                else:
                    m.d.comb += pes[0][idx].v_in.eq(src)

        for k in range(S):
            for n in range(S):
                pe = pes[k][n]
                if n > 0:
                    m.d.comb += [pe.h_in.eq(pes[k][n - 1].h_out),
                                 pe.ps_left.eq(pes[k][n - 1].ps_out)]
                if k > 0:
                    m.d.comb += [pe.v_in.eq(pes[k - 1][n].v_out),
                                 pe.ps_up.eq(pes[k - 1][n].ps_out)]

        # ---- stationary weight loading ------------------------------------------------------
        bank_use = [Signal(range(4 * S + 4), name=f"bank_{b}_in_use") for b in range(2)]
        # ``bank_use[b] == 0`` as a register beside the count (set from the count's next
        # value), so the loader's ready is a select of two registers, not a compare behind it
        # (the count's compare through the ready into the tile aligner was 14.7 ns estimated
        # in the S = 8 FPGA core)
        bank_free = [Signal(name=f"bank_{b}_free", init=1) for b in range(2)]
        # a beat's count for its bank goes up a cycle after its ``accept`` (``bank_b_inc_q``, a
        # register: ``accept`` comes from the beat source's ``valid``, and through it the
        # source's logic reached the counts' adders, 11.11 ns routed in the S = 8 engine at
        # 354f1af); the loader's ready takes the registered increment as a use, so it is
        # what it was with the count up at once (``count == 0`` and no increment pending)
        inc_q = [Signal(name=f"bank_{b}_inc_q") for b in range(2)]
        wl = self.wload.payload
        m.d.comb += self.wload.ready.eq(Mux(wl.bank, bank_free[1] & ~inc_q[1],
                                            bank_free[0] & ~inc_q[0]))
        wl_go = Signal(name="wl_go")
        m.d.comb += wl_go.eq(self.wload.valid & self.wload.ready)
        # The accepted row is written into the PEs one cycle later from registers (a row
        # strobe per row, the row's data once): the ready check and the row decode do not
        # share a cycle with the fan-out to S*S weight registers. A beat accepted in the cycle
        # after the last row's transfer still sees the new weights (it starts a cycle later).
        wl_q = Signal(wload_layout(cfg), name="wload_q")
        wl_row = [Signal(name=f"wload_row_{k}_en") for k in range(S)]
        m.d.sync += [wl_q.eq(wl)] + [wl_row[k].eq(wl_go & (wl.row == k)) for k in range(S)]
        for k in range(S):
            for n in range(S):
                pe = pes[k][n]
                m.d.comb += [pe.wl_en.eq(wl_row[k]), pe.wl_bank.eq(wl_q.bank),
                             pe.wl_sign.eq(wl_q.w[n].sign), pe.wl_mag.eq(wl_q.w[n].mag)]
        corner = pes[S - 1][S - 1]
        last_use = Signal(opl, name="corner_operand")
        m.d.comb += last_use.eq(Mux(self.mode == BWD_DATA, corner.v_out, corner.h_out))
        uses_w = Signal(name="uses_weights")
        m.d.comb += uses_w.eq(self.mode != BWD_WEIGHT)
        for b in range(2):
            inc = Signal(name=f"bank_{b}_inc")
            dec = Signal(name=f"bank_{b}_dec")
            m.d.sync += inc_q[b].eq(accept & uses_w & (p.bank == b))
            m.d.comb += [
                inc.eq(inc_q[b]),
                dec.eq(start & uses_w & last_use.valid & (last_use.bank == b)),
            ]
            with m.If(inc & ~dec):
                m.d.sync += [bank_use[b].eq(bank_use[b] + 1), bank_free[b].eq(0)]
            with m.Elif(dec & ~inc):
                m.d.sync += [bank_use[b].eq(bank_use[b] - 1),
                             bank_free[b].eq(bank_use[b] == 1)]

        # ---- output edge: bottom (FWD), right (BWD_DATA) or drain buses (BWD_WEIGHT) --------
        done = Signal(name="done")
        done_d1 = Signal(name="done_d1")
        m.d.comb += done.eq(beat_done)
        m.d.sync += done_d1.eq(done)
        finals = []
        for lane in range(S):
            bus = Signal(psl, name=f"drain_bus_{lane}")
            m.d.comb += bus.valid.eq(Cat(*[pes[k][lane].drain.valid for k in range(S)]).any())
            terms = [Mux(pes[k][lane].drain.valid, pes[k][lane].drain.value, 0)
                     for k in range(S)]
            acc = terms[0]
            for t in terms[1:]:
                acc = acc | t
            m.d.comb += bus.value.eq(acc)
            lane_in = Signal(psl, name=f"edge_{lane}_in")
            with m.Switch(self.mode):
                with m.Case(FWD):
                    m.d.comb += lane_in.eq(pes[S - 1][lane].ps_out)
                with m.Case(BWD_DATA):
                    m.d.comb += lane_in.eq(pes[lane][S - 1].ps_out)
                with m.Default():
                    m.d.comb += lane_in.eq(bus)
            src = lane_in
            for j in range(S - lane):          # edge register + S-1-lane de-skew registers
                r = Signal(psl, name=f"edge_{lane}_deskew_{j}")
                with m.If(done):
                    m.d.sync += r.eq(src)
                src = r
            finals.append(src)

        m.d.comb += [
            push.eq(done_d1 & finals[0].valid),
            fifo.w_en.eq(push),
            # (out_magnitude: each chain's magnitude and sign, negated here on the FIFO's
            # write side, which starts at the de-skew registers)
            fifo.w_data.eq(Cat(*[to_magnitude(f.value) if cfg.out_magnitude else f.value
                                 for f in finals])),
            self.out.valid.eq(fifo.r_rdy),
            self.out.payload.eq(fifo.r_data),
            fifo.r_en.eq(self.out.ready),
        ]
        taken = Signal(name="out_taken")
        m.d.comb += taken.eq(self.out.valid & self.out.ready)
        with m.If(accept & ~taken):
            m.d.sync += used.eq(used + 1)
        with m.Elif(taken & ~accept):
            m.d.sync += used.eq(used - 1)
        with m.If(accept & ~push):
            m.d.sync += inflight.eq(inflight + 1)
        with m.Elif(push & ~accept):
            m.d.sync += inflight.eq(inflight - 1)
        m.d.comb += self.busy.eq((inflight != 0) | fifo.r_rdy | ~cores_ready)
        return m


def _params(preset: str) -> dict:
    cfg = ArrayConfig.preset(preset)
    return {
        **cfg.to_dict(),
        "acc_bits": cfg.acc_bits,
        "latency": array_latency(cfg, cfg.max_mantissa, cfg.max_mantissa),
        "latency_formula": "(2*size + 1) * beat_cycles + 3 + FMACCore.LATENCY",
        "inp_bits": beat_layout(cfg).size,
        "wload_bits": wload_layout(cfg).size,
        "out_bits": array_out_layout(cfg).size,
    }


TESSERA_BLOCKS = [
    Block(name="systolic_array",
          build=lambda preset: SystolicArray(config=ArrayConfig.preset(preset)),
          params=_params),
]
