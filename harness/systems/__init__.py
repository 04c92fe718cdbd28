"""Whole models as systems: greedy decoding and the incremental cache (``decoding``), one
training step (``training``), the copy task (``copy_task``); ``models`` holds the shared
weights and inputs. (The cache benchmark times decoding: it is ``harness.bench.cache_bench``.)
"""
