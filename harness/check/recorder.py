"""The aten operators a variant's call runs, recorded to name the kernel path it took."""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

from harness.base.kernels import PATH_MARKERS


class OpRecorder(TorchDispatchMode):
    """Records the aten operators that run (to name the kernel path taken)."""

    # higher-order operators (flex_attention, cond, ...) come here too, with this mode popped:
    # recorded by name and run as they are (without it torch refuses them under any mode)
    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __enter__(self):
        # flex_attention wraps its op in torch.compile(fullgraph=True), which refuses to run
        # under a Python dispatch mode (and the failed compile poisons later calls): while
        # recording, flex runs its op eagerly (its own debug switch), restored on exit
        import torch.nn.attention.flex_attention as flex

        self._flex_debug = flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG
        flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
        return super().__enter__()

    def __exit__(self, *exc):
        import torch.nn.attention.flex_attention as flex

        try:
            return super().__exit__(*exc)
        finally:
            flex._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = self._flex_debug

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = getattr(func, "overloadpacket", None)
        self.ops.append(packet.__name__ if packet is not None else str(getattr(func, "_name", func)))
        return func(*args, **(kwargs or {}))

    def path(self) -> str:
        seen = []
        for op in self.ops:
            for marker in PATH_MARKERS:
                if op == marker.lstrip("_") or op == marker or op.endswith(marker):
                    if op not in seen:
                        seen.append(op)
        return "+".join(seen) if seen else "explicit ops"
