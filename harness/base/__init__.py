"""Base pieces every layer above may use, and which import nothing else from the harness:
errors, the config, dtypes by device, the kernel-path operators, mask conversions, seeding,
and the verdict vocabulary.
"""
