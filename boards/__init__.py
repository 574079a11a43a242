"""Board targets: FPGA synthesis of Tessera blocks with the open toolchain from PyPI."""
