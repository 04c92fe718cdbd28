"""Benchmarks: cases as data (``cases``), timing and counters, the sweep, its JSONL log, the
memory probe (``memprobe``, with its process in ``probe_worker``) and the cache benchmark of
whole-model decoding (``cache_bench``).
"""
