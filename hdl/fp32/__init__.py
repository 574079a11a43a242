"""IEEE 754 binary32 arithmetic units (round-to-nearest-even, exact subnormals)."""
