"""Barrel rotation of equal-width lanes by a run-time amount, and the rotated lane memories
that transpose a block with it."""
from __future__ import annotations

from amaranth.hdl import Cat, Mux, Signal, Value
from amaranth.lib.memory import Memory

__all__ = ["rotate_lanes", "ColumnRows", "rotated_block_memories"]


def rotate_lanes(lanes, amount, *, left: bool) -> Value:
    """``lanes`` (a list of equal-width values, lane 0 first) rotated by ``amount`` lanes.

    ``left`` moves lane ``j`` to lane ``(j + amount) mod n``, otherwise to ``(j - amount)
    mod n`` (``n = len(lanes)``). A barrel of one 2:1 multiplexer level per bit of
    ``amount``; level ``i`` rotates by ``2**i mod n`` lanes, so any ``n`` works for
    ``amount < n``. Combinational; returns the rotated lanes concatenated, lane 0 in the
    low bits.
    """
    n = len(lanes)
    width = len(Value.cast(lanes[0]))
    x = Cat(*lanes)
    for i in range(len(Value.cast(amount))):
        step = ((1 << i) % n) * width
        if step:
            x = Mux(amount[i], x.rotate_left(step) if left else x.rotate_right(step), x)
    return x


class ColumnRows:
    """Registers holding, for each lane memory ``k`` of :func:`rotated_block_memories`, the
    row ``(k - col) mod n`` that column ``col`` is in: its read address from a register, not
    from a subtract behind the column counter (at S = 8 that subtract began 164 estimated
    paths of 14.7 ns through a quantizer's lane memories into its converter).

    ``col`` is the caller's column counter, stepping ``0, 1, .., n - 1, 0, ..`` (``n`` a
    power of two); the caller adds :meth:`step` wherever it advances it and :meth:`restart`
    wherever it sets it to 0 (reset: ``col`` must reset to 0).

    Parameters
    ----------
    n : int
        Lanes (a power of two).
    name : str
        Prefix of the registers' names (``{name}{k}``).

    Attributes
    ----------
    rows : list of Signal
        Lane ``k``'s row, ``(k - col) mod n``.
    """

    def __init__(self, n: int, name: str):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1 or n & (n - 1):
            raise ValueError(f"ColumnRows n must be a power of two, not {n!r}")
        bits = max(1, (n - 1).bit_length())
        self.rows = [Signal(bits, name=f"{name}{k}", init=k % (1 << bits)) for k in range(n)]

    def step(self):
        """Sync statements of ``col <= col + 1 (mod n)``: every row one less (mod n)."""
        return [r.eq(r - 1) for r in self.rows] if len(self.rows) > 1 else []

    def restart(self):
        """Sync statements of ``col <= 0``: lane ``k``'s row ``k``."""
        return [r.eq(k) for k, r in enumerate(self.rows)]


def rotated_block_memories(m, *, name: str, width: int, w_lanes, w_row, w_bank, r_col, r_bank,
                           r_rows: ColumnRows | None = None):
    """Two ``n x n`` blocks (banks) of ``width``-bit elements in ``n = len(w_lanes)`` lane
    memories of ``2n`` words (bank, row) with asynchronous reads (LUT RAM on the ECP5), so that
    a row is written and a column read in one cycle each.

    Row ``r`` is stored rotated by ``r``: lane memory ``k`` holds its element ``(k - r) mod n``.
    Column ``c`` is then in row ``(k - c) mod n`` of lane memory ``k``, a different address per
    lane. ``n`` is a power of two.

    Parameters
    ----------
    m : Module
    name : str
        Prefix of the memories' submodule names (``{name}{k}``).
    w_lanes : list of Value
        The row written (element ``j`` first), at row ``w_row`` of bank ``w_bank``; the write
        enables are the caller's (``ports[k].en``, every lane's on a row write).
    r_col, r_bank : Value
        The column read, of bank ``r_bank``.
    r_rows : ColumnRows, optional
        The lanes' rows of ``r_col`` from registers (the caller steps them with ``r_col``);
        without it each lane's read address is ``(k - r_col) mod n`` in logic.

    Returns
    -------
    (ports, read)
        The lane memories' write ports, and their read data concatenated (lane ``k``:
        element ``r_col`` of row ``(k - r_col) mod n``, lane 0 in the low bits): rotated right
        by ``r_col`` lanes (:func:`rotate_lanes`, ``left=False``) it is the column in row order.
    """
    n = len(w_lanes)
    if r_rows is not None and len(r_rows.rows) != n:
        raise ValueError(f"rotated_block_memories r_rows must have {n} rows (one per lane), "
                         f"not {len(r_rows.rows)}")
    row_bits = max(1, (n - 1).bit_length())
    wrot = rotate_lanes(w_lanes, w_row, left=True)        # lane k: element (k - row) mod n
    ports, reads = [], []
    for k in range(n):
        mem = Memory(shape=width, depth=2 << row_bits, init=[])
        m.submodules[f"{name}{k}"] = mem
        wp, rp = mem.write_port(), mem.read_port(domain="comb")
        m.d.comb += [wp.addr.eq(Cat(w_row[:row_bits], w_bank)),
                     wp.data.eq(wrot.word_select(k, width)),
                     rp.addr.eq(Cat(r_rows.rows[k] if r_rows is not None
                                    else (k - r_col)[:row_bits], r_bank))]
        ports.append(wp)
        reads.append(rp.data)
    return ports, Cat(*reads)
