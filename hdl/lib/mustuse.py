"""Silencing Amaranth's "created but never used" warning (``UnusedElaboratable``).

An elaboratable that is built and then deliberately not elaborated -- a constructor that
rejects its arguments, a block built only to read its ``latency``, a child a parent builds in
its constructor and may still reject -- would warn when garbage-collected.
"""
from __future__ import annotations

from contextlib import contextmanager

__all__ = ["mark_used", "used_if_rejected", "check_config_type"]


def mark_used(elaboratable):
    """Mark ``elaboratable`` as used (no ``UnusedElaboratable`` warning); returns it."""
    elaboratable._MustUse__used = True
    return elaboratable


@contextmanager
def used_if_rejected(elaboratable):
    """``with used_if_rejected(self): <checks>`` in a constructor: a ``TypeError`` or
    ``ValueError`` raised inside marks ``elaboratable`` used (:func:`mark_used`) before it
    propagates, so the rejected component warns of nothing."""
    try:
        yield
    except (TypeError, ValueError):
        mark_used(elaboratable)
        raise


def check_config_type(elaboratable, config, cls, name: str = "config") -> None:
    """A constructor's type check of its config: ``TypeError`` naming
    ``<Component>.<name>`` unless ``config`` is a ``cls``; the refused component is marked used
    first (:func:`mark_used`)."""
    if not isinstance(config, cls):
        mark_used(elaboratable)
        raise TypeError(f"{type(elaboratable).__name__}.{name} must be a {cls.__name__}, "
                        f"not {config!r}")
