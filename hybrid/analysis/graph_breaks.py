"""The graph breaks torch.compile recorded in the profiled process (the injector's `graph_breaks`: each
reason dynamo gave, how often, and where), as metrics: the reasons by their first line, and the hints dynamo
wrote with them. Since torch 2.8 a reason is a message of its own lines: the reason, `Explanation:`,
`Hint:` lines, a developer context and a link (the planted graph_breaks capture: "Unsupported
Tensor.item() call with capture_scalar_outputs=False", hinting capture_scalar_outputs = True); shown
whole, it buried the reason in the report."""

from __future__ import annotations

from hybrid.provenance import MEASURED_TORCH, Metric

TOP_REASONS = 3
HINT = "Hint:"


def reason_and_hints(message: str) -> tuple[str, list[str]]:
    """A dynamo graph-break message's first line and its `Hint:` lines (none in older messages)."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    if not lines:
        return "", []
    hints = [line.removeprefix(HINT).strip() for line in lines[1:] if line.startswith(HINT)]
    return lines[0], hints


def graph_break_metrics(breaks: object) -> dict[str, Metric]:
    """`graph_breaks` (distinct reasons, or the count an older capture recorded), `graph_break_reasons`
    ('Unsupported Tensor.item() call with capture_scalar_outputs=False (x3)', the three most frequent) and
    `graph_break_hints` (dynamo's own hints for them, where it wrote any)."""
    if breaks is None:
        return {}
    reasons = breaks if isinstance(breaks, list) else []
    count = (
        len(reasons) if isinstance(breaks, list) else int(breaks) if isinstance(breaks, (int, float)) else 0
    )
    out = {"graph_breaks": Metric(count, "breaks", MEASURED_TORCH)}
    texts, hints = [], []
    for entry in reasons[:TOP_REASONS]:
        message = entry.get("reason", str(entry)) if isinstance(entry, dict) else str(entry)
        reason, own_hints = reason_and_hints(message)
        times = entry.get("count") if isinstance(entry, dict) else None
        texts.append(reason + (f" (x{times})" if isinstance(times, int) and times > 1 else ""))
        hints += [hint for hint in own_hints if hint not in hints]
    out["graph_break_reasons"] = Metric("; ".join(texts), "", MEASURED_TORCH)
    if hints:
        out["graph_break_hints"] = Metric(" ".join(hints), "", MEASURED_TORCH)
    return out
