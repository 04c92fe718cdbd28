"""The ``bench`` and ``report`` commands (see harness.bench and harness.report)."""


def add_commands(sub, common) -> None:
    return None
