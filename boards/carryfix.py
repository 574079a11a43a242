"""Take nextpnr's carry feed cells out of a yosys ECP5 netlist (JSON), before nextpnr.

yosys maps every adder and comparator wider than ``ALU_LUT_BITS`` to a chain of ``CCU2C``
cells. nextpnr-ecp5 adds a ``CCU2C`` (two logic cells) at either end of a chain
(``split_carry_chain`` in nextpnr's ``ecp5/pack.cc``):

- a *feed-out* when the last ``COUT`` has a net, even one nothing reads.
  :func:`unconnect_unused_carry_outs` sets such bits to ``x``, which is no net for nextpnr.
  Only output bits that drive no cell input, no module port and no kept wire are touched.
- a *feed-in* when the first ``CIN`` has a net, and a constant carry-in (yosys ties it to
  ``0`` for ``a + b`` and to ``1`` for ``a - b`` and the comparators) is one.
  :func:`absorb_constant_carry_ins` makes the first cell's first half compute the carry
  into its second half from ``A0, B0`` alone, which is how nextpnr's own feed-in cell works
  (its LUT4 is 0, so the half's carry-out is its LUT2; ``CCU2C`` in yosys's
  ``ecp5/cells_sim.v``), and unconnects ``CIN``. That half's sum then no longer holds bit
  0: when something reads it, a ``LUT4`` computes it instead (one logic cell, not two).

Both keep the netlist's function: ``tests/test_carryfix.py`` proves it with yosys's SAT
solver on adders, subtractors and comparators, the new ``CIN`` left free.

``make synth`` runs this between yosys and nextpnr (``boards.synth``); as a script::

    python boards/carryfix.py top.json
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

__all__ = ["unconnect_unused_carry_outs", "absorb_constant_carry_ins", "main"]


def _readers(module: dict) -> Counter:
    """How many cell inputs, module ports and kept wires read each net bit of ``module``."""
    readers: Counter = Counter()
    for cell in module.get("cells", {}).values():
        dirs = cell.get("port_directions", {})
        for port, bits in cell.get("connections", {}).items():
            if dirs.get(port) != "output":
                readers.update(b for b in bits if isinstance(b, int))
    for port in module.get("ports", {}).values():
        readers.update(b for b in port["bits"] if isinstance(b, int))
    for net in module.get("netnames", {}).values():
        if net.get("attributes", {}).get("keep"):
            readers.update(b for b in net["bits"] if isinstance(b, int))
    return readers


def unconnect_unused_carry_outs(netlist: dict) -> int:
    """Set every unread ``CCU2C.COUT`` bit of every module to ``"x"``; returns how many."""
    changed = 0
    for module in netlist["modules"].values():
        cells = module.get("cells", {})
        readers = _readers(module)
        for cell in cells.values():
            if cell.get("type") != "CCU2C":
                continue
            bits = cell.get("connections", {}).get("COUT")
            if bits and isinstance(bits[0], int) and not readers[bits[0]]:
                bits[0] = "x"
                changed += 1
    return changed


def _init(bits: str) -> list[int]:
    """A yosys JSON ``INIT`` parameter (binary, most significant bit first) as 16 bits."""
    bits = bits.strip()
    if len(bits) < 16 or set(bits) - {"0", "1"}:
        raise ValueError(f"carryfix: INIT {bits!r} is not a 16-bit binary constant")
    return [int(b) for b in reversed(bits[-16:])]


def _init_str(table: list[int]) -> str:
    return "".join(str(b) for b in reversed(table))


def absorb_constant_carry_ins(netlist: dict) -> tuple[int, int]:
    """Unconnect the constant ``CIN`` of every ``CCU2C`` that starts a chain; returns how
    many, and how many ``LUT4`` cells now compute a bit 0 that something reads.

    A cell is changed when its ``CIN`` is ``"0"`` or ``"1"``, ``INJECT1_0`` is ``"NO"``
    and ``C0`` and ``D0`` are constants other than both ``0`` (``INIT0[3:0]``, the half's
    LUT2, must be free to hold the carry while its LUT4 is 0; yosys ties ``D0`` to 1). With
    carry-in ``c``, propagate ``p`` (the LUT4) and generate ``g`` (the LUT2), the half's
    carry-out is ``p ? c : g`` and its sum ``p ^ c``: the new ``INIT0`` has the LUT4 0 at
    the tied ``C0, D0`` and ``p ? c : g`` as the LUT2, so the carry-out no longer depends on
    ``CIN``.
    """
    changed = added = 0
    for mname, module in netlist["modules"].items():
        cells = module.get("cells", {})
        readers = _readers(module)
        new_cells = {}
        for name, cell in cells.items():
            if cell.get("type") != "CCU2C":
                continue
            conn, params = cell.get("connections", {}), cell.get("parameters", {})
            cin = conn.get("CIN", ["x"])[0]
            c0, d0 = conn.get("C0", ["1"])[0], conn.get("D0", ["1"])[0]
            if (cin not in ("0", "1") or str(params.get("INJECT1_0", "YES")).strip() != "NO"
                    or c0 not in ("0", "1") or d0 not in ("0", "1") or c0 == d0 == "0"):
                continue
            c = int(cin)
            init = _init(params["INIT0"])
            base = 4 * int(c0) + 8 * int(d0)            # the LUT4's entries at the tied C0, D0
            p = [init[base + i] for i in range(4)]      # index B0 * 2 + A0
            g = init[0:4]
            new = [0] * 16
            new[0:4] = [c if p[i] else g[i] for i in range(4)]
            params["INIT0"] = _init_str(new)
            conn["CIN"] = ["x"]
            changed += 1
            s0 = conn.get("S0", ["x"])[0]
            if isinstance(s0, int) and readers[s0]:
                table = [p[i & 3] ^ c for i in range(16)]  # A, B = A0, B0; C, D unused
                new_cells[f"{name}$carryfix_s0"] = {
                    "hide_name": 1, "type": "LUT4",
                    "parameters": {"INIT": _init_str(table)}, "attributes": {},
                    "port_directions": {"A": "input", "B": "input", "C": "input",
                                        "D": "input", "Z": "output"},
                    "connections": {"A": list(conn["A0"]), "B": list(conn["B0"]),
                                    "C": ["0"], "D": ["0"], "Z": [s0]}}
                conn["S0"] = ["x"]
                added += 1
        cells.update(new_cells)
    return changed, added


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: carryfix.py NETLIST.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    netlist = json.loads(path.read_text())
    n = unconnect_unused_carry_outs(netlist)
    k, luts = absorb_constant_carry_ins(netlist)
    path.write_text(json.dumps(netlist))
    print(f"carryfix: {n} unread CCU2C carry-outs unconnected in {path.name}; {k} constant "
          f"carry-ins absorbed ({luts} LUT4s for a bit 0 that is read)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
