"""The terminal text of `parity`: a function of its ``ParityReport`` (given, not computed)."""

from __future__ import annotations

from tabulate import tabulate


def parity_text(report, described: str = "") -> str:
    """The metrics table, the cache table, and the verdict with its explanation."""
    r = report
    head = [f"checkpoint {described or r.checkpoint} ({r.family}): {r.reference} (the checkpoint's class) vs "
            f"{r.port} (the port), {r.dtype}",
            f"tokens: {r.tokens}, {r.shape[0]} sequences x {r.shape[1]}"]
    if r.reached:
        head.append("features reached: " + "; ".join(
            f"{s['feature']} by {s['how']}" if s["reached"] else
            f"{s['feature']} NOT reached (taken out, the class's worst KL is {s['kl_removed']:.3g})"
            for s in r.reached))
    head.append("")
    rows = [(m.name, str(m.verdict), m.value, m.bound) for m in r.metrics]
    parts = head + [tabulate(rows, headers=("metric", "verdict", "measured", "bound"))]
    details = [f"  {m.name}: {m.detail}" for m in r.metrics if m.detail]
    if details:
        parts += [""] + details
    if r.cache:
        parts += ["", "k/v cache against the model's own full forward (the check's verdict on every call; "
                      "the wider dtype's runs give the noise)",
                  tabulate([(c.side, c.model, c.schedule, str(c.verdict), f"{c.max_abs:.3g}", c.first_bad or "-")
                            for c in r.cache],
                           headers=("side", "model", "schedule", "verdict", "max |Δ log-p|", "first differing call"))]
    parts.append("")
    if r.agrees:
        parts.append(f"agrees: {r.port} computes what {r.reference} computes on this checkpoint")
    else:
        parts.append(f"DIFFERS: {r.port} does not compute what {r.reference} computes on this checkpoint")
        for m in r.mistakes:
            parts.append(f"  mistake: {m['name']}: {m['explanation']} ({m.get('by', 'undone')}, the worst KL is "
                         f"{m['kl_undone']:.3g})")
        if not r.mistakes and any(not m.ok for m in r.metrics if m.name.startswith("per-token KL")):
            parts.append("  mistake: none of the classic porting mistakes, undone alone, makes the port agree")
        if r.divergence:
            parts.append(f"  first divergence: {r.divergence}")
    parts += [f"note: {n}" for n in r.notes]
    return "\n".join(parts)
