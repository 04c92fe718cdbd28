"""Whole models as systems: greedy decoding and the incremental cache, one training step,
the copy task and the cache benchmark.
"""
