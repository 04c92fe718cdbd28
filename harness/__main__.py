import os
import sys

from harness.cli.main import main

code = main()
if code == 130:
    # Interrupted: every output is already whole or untouched. Exit now: a KeyboardInterrupt
    # that passed through C code run by PyRun_String (pybind11's eval inside torch) leaves
    # CPython's "unhandled KeyboardInterrupt" flag set even though main() handled it, and the
    # interpreter would then end itself by SIGINT (status -2) instead of 130.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)
raise SystemExit(code)
