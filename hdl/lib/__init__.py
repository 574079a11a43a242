"""Helpers shared by several blocks: memory-port interfaces, and (as they move here) pipeline,
stream and layout helpers. Nothing in this package imports a block package."""
