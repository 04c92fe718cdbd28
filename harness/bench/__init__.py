"""Benchmarks: cases as data (``cases``), timing and counters, the sweep, its JSONL log, and
the memory probe (``memprobe``, with its process in ``probe_worker``).
"""
