"""Verification reports over the test tiers (``python -m sim.verify.coverage``)."""
