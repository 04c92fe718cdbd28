"""Checking variants. Read this first: a verdict is three hops from ``python -m harness check``.
1. ``api.check_all(families, configs, settings=CheckSettings(...))`` walks every variant's cells, a
   family at a time (``api._family_part``; kept whole by ``check_cache`` where one is named).
2. ``spec.SpecChecker.check(variant, config, case, dtype)`` reads the cell's ``Evidence`` from the run cache.
3. ``verdict.decide(evidence, settings)`` decides, pure: the error row, the exact elements, or each tensor.
Then ``pairs.derive_pairs`` derives the pair matrix from those results; ``results`` holds them all.

The rest: runs and the run cache (``runs``, keyed by ``run_keys``), tensor comparison
(``mismatch``, ``tensors``), precision allowances (``precision``, ``rules``, ``own_dtype``),
gradcheck, dropout and torch.compile (``extras``) and the settings of a whole check (``settings``).
"""
