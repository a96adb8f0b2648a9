"""Benchmarks: `make bench` measures dtq alone, `make bench-peers` measures it against its peers."""
