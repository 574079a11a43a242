"""Unconnect the carry-outs nothing reads from a yosys ECP5 netlist (JSON), before nextpnr.

yosys maps every adder and comparator wider than 4 bits to a chain of ``CCU2C`` cells whose
last ``COUT`` is wired to a net even when nothing reads it. nextpnr-ecp5 gives every chain
whose last ``COUT`` has a net a *feed-out*: one more ``CCU2C``, two logic cells
(``split_carry_chain`` in nextpnr's ``ecp5/pack.cc``), used or not. An ``x`` bit on that port
is no net for nextpnr, so no feed-out. Nothing else changes: only output bits that drive no
cell input, no module port and no kept wire are touched, so the netlist computes the same.

``make synth`` runs this between yosys and nextpnr (``boards.synth``); as a script::

    python boards/carryfix.py top.json
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

__all__ = ["unconnect_unused_carry_outs", "main"]


def unconnect_unused_carry_outs(netlist: dict) -> int:
    """Set every unread ``CCU2C.COUT`` bit of every module to ``"x"``; returns how many."""
    changed = 0
    for module in netlist["modules"].values():
        cells = module.get("cells", {})
        readers: Counter = Counter()
        for cell in cells.values():
            dirs = cell.get("port_directions", {})
            for port, bits in cell.get("connections", {}).items():
                if dirs.get(port) != "output":
                    readers.update(b for b in bits if isinstance(b, int))
        for port in module.get("ports", {}).values():
            readers.update(b for b in port["bits"] if isinstance(b, int))
        for net in module.get("netnames", {}).values():
            if net.get("attributes", {}).get("keep"):
                readers.update(b for b in net["bits"] if isinstance(b, int))
        for cell in cells.values():
            if cell.get("type") != "CCU2C":
                continue
            bits = cell.get("connections", {}).get("COUT")
            if bits and isinstance(bits[0], int) and not readers[bits[0]]:
                bits[0] = "x"
                changed += 1
    return changed


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: carryfix.py NETLIST.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    netlist = json.loads(path.read_text())
    n = unconnect_unused_carry_outs(netlist)
    path.write_text(json.dumps(netlist))
    print(f"carryfix: {n} unread CCU2C carry-outs unconnected in {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
