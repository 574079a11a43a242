"""sim/verify/misses.py: missed toggle points traced to the named signals of their cone."""
import pytest

from sim.verify.misses import sort_misses

VERILOG = r"""module top(clk);
endmodule
module \top.eng (clk, cmd__payload);
  reg [15:0] cycles;
  wire [15:0] \$1 ;
  wire [15:0] \$2 ;
  reg [7:0] \$3 ;
  assign \$1  = cycles + 1'h1;
  assign \$2  = \$1  & 16'hffff;
  always @* begin
    \$3  = cmd__payload[7:0];
  end
endmodule
"""

MISSED = [
    "# header",
    "top.eng\ttoggle\t4\tcycles[12]:0->1\treg [15:0] cycles;",
    "top.eng\ttoggle\t5\t$2[14]:1->0\twire [15:0] \\$2 ;",
    "top.eng\ttoggle\t6\t$3[6]:0->1\treg [7:0] \\$3 ;",
    "top.eng\tline\t9\tif\tsomething",
    "top\ttoggle\t1\tclk:0->1\tinput clk;",
]


def test_wires_are_traced_to_named_sources_and_categorised():
    res = sort_misses(MISSED, VERILOG, "top.eng")
    assert res["sources"] == {"cycles": 2, "cmd__payload": 1}
    assert res["categories"] == {"cycle counter and response": [12, 14],
                                 "command fields": [6]}


def test_unknown_module_is_named():
    with pytest.raises(ValueError, match="'top.nope'"):
        sort_misses(MISSED, VERILOG, "top.nope")
