"""Multi-core blocks: links between cores and the collective engine (docs/multicore.md)."""
