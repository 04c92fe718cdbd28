"""Reporting: renders results it is given (never runs a check or a sweep): JSON output
(``io``), check tables, REPORT.md (``markdown``, ``bench_tables``, ``plots``, ``targets``).
"""
