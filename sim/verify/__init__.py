"""Verification tools that run beside the test suite (mutation testing: ``make mutation``)."""
