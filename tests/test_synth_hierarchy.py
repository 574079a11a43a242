"""boards.hierarchy: the yosys ``stat`` parser and the subtree sums (no yosys run)."""
import pytest

from boards.hierarchy import logic_cells, parse_stat, subtree_totals

STAT = """
=== top.a.b ===

   Number of cells:                 5
       2   CCU2C
       3   LUT4

=== top.a ===

   Number of cells:                 4
       4   LUT4
       1   TRELLIS_FF

=== top ===

   Number of cells:                 3
       1   CCU2C
       1   LUT4
       1   top.a

=== design hierarchy ===

       9   top
"""


def test_parse_stat_reads_every_module_but_the_design_summary():
    mods = parse_stat(STAT)
    assert set(mods) == {"top", "top.a", "top.a.b"}
    assert mods["top.a.b"]["CCU2C"] == 2 and mods["top.a.b"]["LUT4"] == 3
    assert logic_cells(mods["top.a.b"]) == 7          # a CCU2C takes two logic cells


def test_subtree_totals_sum_the_modules_below():
    tree = subtree_totals(parse_stat(STAT), "top")
    assert logic_cells(tree["top.a.b"]) == 7
    assert logic_cells(tree["top.a"]) == 7 + 4
    assert logic_cells(tree["top"]) == 7 + 4 + 3
    assert tree["top"]["TRELLIS_FF"] == 1


def test_bad_listings_are_rejected():
    with pytest.raises(ValueError, match="no module sections"):
        parse_stat("nothing here")
    with pytest.raises(ValueError, match="not under the top"):
        subtree_totals(parse_stat(STAT), "other")
