"""The command line, one module per command group: ``check`` (list, check), ``review``
(diff, map, differences), ``bench`` (bench, report), ``models`` (decode, train-step,
copy-task, cache-bench); ``main`` builds the parser. Nothing imports this package.
"""
