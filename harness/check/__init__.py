"""Checking variants: runs and the run cache (``runs``), tensor comparison (``tensors``),
precision allowances, the spec checks against the oracle (``spec``), the pair matrix
(``pairs``), gradcheck, dropout and torch.compile (``extras``), results as data
(``results``) and whole checks (``api``).
"""
