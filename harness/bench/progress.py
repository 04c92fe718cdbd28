"""A sweep's progress on standard error: tqdm's bar on a terminal; anywhere else (a CI log,
a pipe, a file) one plain line per finished group and never a carriage return."""

from __future__ import annotations

import sys
from typing import Iterator

from tqdm import tqdm

write = tqdm.write  # a line above the bar (the bar redrawn below it), or a plain line


class Progress:
    """Progress over ``total`` groups, shown when ``shown`` (the sweep's ``progress``)."""

    def __init__(self, total: int, shown: bool):
        self.total, self.done, self.what = total, 0, ""
        self.terminal = sys.stderr is not None and sys.stderr.isatty()
        self.lines = shown and not self.terminal
        self.bar = tqdm(total=total, desc="bench", unit="group", disable=not (shown and self.terminal),
                        dynamic_ncols=True)

    def each(self, groups: list) -> Iterator:
        """``groups``, one at a time; each counted as finished when the next is asked for."""
        for group in groups:
            yield group
            self.done += 1
            self.bar.update()
            if self.lines:
                print(f"bench: {self.done}/{self.total} groups: {self.what}", file=sys.stderr, flush=True)

    def starts(self, what: str) -> None:
        self.what = what
        self.bar.set_postfix_str(what, refresh=False)

    def close(self) -> None:
        self.bar.close()
