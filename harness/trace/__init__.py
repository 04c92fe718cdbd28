"""Tracing differences: where two variants first diverge (``recording``, ``divergence``),
which unit makes the difference (``attribution``), layout hints, the DIFFERENCES.md
findings (``differences``) and the map search of ``harness map`` (``map_candidates``, ``map_slots``, ``map_traits``,
``mapsearch``).
"""
