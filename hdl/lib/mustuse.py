"""Silencing Amaranth's "created but never used" warning (``UnusedElaboratable``).

An elaboratable that is built and then deliberately not elaborated -- a constructor that
rejects its arguments, a block built only to read its ``latency``, a child a parent builds in
its constructor and may still reject -- would warn when garbage-collected.
"""
from __future__ import annotations

__all__ = ["mark_used"]


def mark_used(elaboratable):
    """Mark ``elaboratable`` as used (no ``UnusedElaboratable`` warning); returns it."""
    elaboratable._MustUse__used = True
    return elaboratable
