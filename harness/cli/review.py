"""``diff``, ``map`` and ``differences``: reviewing where and why variants differ."""

from __future__ import annotations

import time

from harness.base.config import Config
from harness.base.dtypes import dtype_of, resolve_device
from harness.base.errors import HarnessError
from harness.cli.common import _load
from harness.families.catalog import get_family
from harness.registry import get_variant
from harness.report.differences_md import is_own_differences, write_differences
from harness.report.io import ensure_writable, write_json
from harness.trace.differences import differences
from harness.trace.kernel_map import propose_kernel_map
from harness.trace.mapsearch import propose_map
from harness.trace.pairs import diff_pair, pick_case
from harness.trace.render import render


def _common_dtype(a, b) -> str:
    """float32, or the first dtype both variants run in when one declares its dtypes (a kernel
    that runs only in half precision)."""
    declared = [v.dtypes for v in (a, b) if v.dtypes]
    if not declared:
        return "float32"
    both = [d for d in declared[0] if all(d in ds for ds in declared)]
    return "float32" if "float32" in both or not both else both[0]


def cmd_diff(args) -> int:
    _load(args)
    cfg = Config.parse(args.set)
    device = resolve_device(args.device)
    if args.dtype:
        dtype_of(args.dtype)
    ensure_writable(args.json)
    family = get_family(args.family)
    a, b = get_variant(family.name, args.a), get_variant(family.name, args.b)
    if a.key == b.key:
        raise HarnessError(f"diff {family.name} {args.a} {args.b}: A and B are the same variant; give two "
                           f"(`python -m harness list --family {family.name}` lists them)")
    args.dtype = args.dtype or _common_dtype(a, b)
    for v in (a, b):
        why = v.dtype_reason(args.dtype)
        if why:
            raise HarnessError(f"diff: {v.id} {why}; give --dtype {v.dtypes[0]}")
    if args.case:
        family.case(args.case)
        case = args.case
    else:
        case, verdicts = pick_case(family.name, a, b, cfg, args.dtype)
        print("cases: " + ", ".join(f"{c} {v}" for c, v in verdicts) + f"; tracing '{case}'")
    result = diff_pair(family.name, a, b, case, cfg, args.dtype, device=device, mistakes=True)
    print(render(result))
    if args.json:
        write_json(args.json, result.to_json())
    return 0


def cmd_map(args) -> int:
    if args.id is not None and not args.id.replace("_", "").replace("-", "").isalnum():
        raise HarnessError(f"--id {args.id!r} must be letters, digits, '_' or '-' (a variant id)")
    _load(args)
    ensure_writable(args.json)
    if args.family == "attention_kernel":  # a plain function: layout, mask form and conventions
        proposal = propose_kernel_map(args.target, cfg=Config.parse(args.set), variant_id=args.id)
    else:
        proposal = propose_map(args.target, args.family, init=args.init, call=args.call,
                               cfg=Config.parse(args.set), variant_id=args.id)
    print(proposal.text)
    if args.json:
        write_json(args.json, proposal.as_dict())
    return 0 if proposal.found else 1


def cmd_differences(args) -> int:
    _load(args)
    ensure_writable(args.out, "--out", own=is_own_differences)
    for name in args.family or []:  # before minutes of tracing
        get_family(name)
    cfg = Config.parse(args.set)
    started = time.perf_counter()
    findings = differences(None, None, families=args.family, cfg=cfg)
    path = write_differences(args.out, findings, cfg)
    print(f"differences: {len(findings)} families in {time.perf_counter() - started:.0f} s")
    print(f"wrote {path}")
    return 0


