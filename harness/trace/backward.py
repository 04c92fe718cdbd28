"""Where a difference that only the backward shows starts (the outputs agree, a gradient
does not): each variant's autograd nodes in the order the backward runs them, with the
gradients each returns (a hook on every node of the graph), aligned by op name; the first
node whose gradients differ, and where the two backward graphs part before it.

Both run in float64 on CPU on the same weights, inputs and cotangent as the check's runs;
a kernel with no sub-modules (the ``attention_kernel`` family) is localised the same way.
"""

from __future__ import annotations

import difflib
from typing import Any, Mapping

import torch

from harness.base.boundary import user_code
from harness.base.config import Config
from harness.check.runs import cast_inputs, cotangent
from harness.check.tensors import compare_tensors
from harness.registry import Variant, build
from harness.trace.diff_result import BackwardDivergence

Step = tuple[str, list]   # (op name, the gradients it returned, float64 on CPU, None where absent)


def _nodes(root) -> list:
    seen, order, todo = set(), [], [root]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        order.append(node)
        todo += [n for n, _ in node.next_functions]
    return order


def backward_steps(variant: Variant, cfg: Config, inputs64: Mapping[str, Any],
                   weights: Mapping[str, torch.Tensor]) -> list[Step]:
    """The backward of ``variant`` (float64) as steps in execution order; a leaf's
    ``AccumulateGrad`` is named after the input it fills (``AccumulateGrad(q)``)."""
    family = variant.family_spec
    module, _ = build(variant, cfg, dtype=torch.float64, weights=weights)
    inputs = cast_inputs(inputs64, torch.float64, "cpu", family.grad_inputs)
    out = family.specified(inputs, variant.call(module, inputs))
    if not isinstance(out, torch.Tensor) or out.grad_fn is None:
        return []
    leaves = {id(t): n for n, t in inputs.items() if isinstance(t, torch.Tensor) and t.requires_grad}
    leaves |= {id(p): n for n, p in module.named_parameters()} if isinstance(module, torch.nn.Module) else {}
    steps: list[Step] = []

    def keep(grads) -> list:
        return [g.detach().to("cpu", torch.float64).clone() if isinstance(g, torch.Tensor) else None for g in grads]

    handles = []
    for node in _nodes(out.grad_fn):
        variable = getattr(node, "variable", None)
        if variable is not None:   # AccumulateGrad: what reaches the leaf is its grad_outputs
            name = f"AccumulateGrad({leaves.get(id(variable), 'a leaf')})"
            handles.append(node.register_hook(lambda gi, go, name=name: steps.append((name, keep(go)))))
        else:
            handles.append(node.register_hook(lambda gi, go, name=node.name(): steps.append((name, keep(gi)))))
    try:
        with user_code("backward"):
            (out * cotangent(out.shape, cfg.seed).to(out.dtype)).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return steps


def _differs(a: list, b: list) -> float | None:
    """The largest gap of two steps' gradients when they differ (inf for another shape or
    NaN pattern), None when they agree."""
    if len(a) != len(b):
        return float("inf")
    worst = None
    for x, y in zip(a, b):
        if x is None or y is None:
            if (x is None) != (y is None):
                return float("inf")
            continue
        v = compare_tensors(x, y, None, None, torch.float64)
        if not v.verdict.agrees:
            worst = max(worst or 0.0, v.max_abs)
    return worst


def _ops(names: list[str], most: int = 4) -> str:
    if not names:
        return "nothing"
    return " ".join(names) if len(names) <= most else " ".join(names[:most - 1]) + f" ... ({len(names)} ops)"


def backward_divergence(a: Variant, b: Variant, cfg: Config, inputs64: Mapping[str, Any],
                        weights: Mapping[str, torch.Tensor]) -> BackwardDivergence | None:
    """The first backward step (by op, A's execution order) whose gradients differ from
    the step B runs in its place, and the ops where the two graphs part before it; None
    when every aligned step agrees."""
    sa, sb = backward_steps(a, cfg, inputs64, weights), backward_steps(b, cfg, inputs64, weights)
    parted = None
    matcher = difflib.SequenceMatcher(None, [n for n, _ in sa], [n for n, _ in sb], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            parted = parted or (_ops([n for n, _ in sa[i1:i2]]), _ops([n for n, _ in sb[j1:j2]]))
            continue
        for k in range(i2 - i1):
            gap = _differs(sa[i1 + k][1], sb[j1 + k][1])
            if gap is not None:
                op = sa[i1 + k][0]
                text = (f"the outputs agree; the backward differs first at {op} (A's backward step "
                        f"{i1 + k + 1} of {len(sa)}, B's {j1 + k + 1} of {len(sb)}; max_abs {gap:.3g})")
                if parted:
                    text += f", after the graphs part: A runs {parted[0]} where B runs {parted[1]}"
                return BackwardDivergence(op, i1 + k, j1 + k, gap, parted, text)
    return None
