"""Benchmarks: each writes docs/bench/<name>.json and a Markdown table."""
