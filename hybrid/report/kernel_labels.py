"""Kernel names as the terminal and the comparison show them, told apart: short_name cuts a C++ kernel name
to one line, and cuDNN's and cuBLAS's kernels differ only deep inside it (resnet50's top kernels hold two
`sm80_xmma_fprop_implicit_gem...gnc4_execute_kernel__5x_cudnn`, tile 128x32x8 and 32x32x8). Where two
different names would read the same, each gets the words of its name the others lack ([tilesize128x32x8]);
and the launch configuration, where the analysis kept it, is written as CUDA writes a launch:
<<<grid, block>>>, trailing 1s dropped (<<<(64,2), 256>>>)."""

from __future__ import annotations

import re
from collections import defaultdict

from hybrid.report.common import short_name

_WORD = re.compile(r"[A-Za-z0-9]+")
SUFFIX_WORDS = 2  # distinguishing words shown at most; the full name is in results.json and the HTML
SUFFIX_WIDTH = 24


def _dims(value: object) -> str | None:
    if not isinstance(value, list) or not value or not all(isinstance(v, int) and v > 0 for v in value):
        return None
    kept = list(value)
    while len(kept) > 1 and kept[-1] == 1:
        kept.pop()
    return str(kept[0]) if len(kept) == 1 else "(" + ",".join(map(str, kept)) + ")"


def launch_text(kernel: dict) -> str:
    """'<<<1024, 256>>>' from a kernel's grid and block ('' where the analysis has none), with '+N' for the
    other launch configurations the same name ran with."""
    grid, block = _dims(kernel.get("grid")), _dims(kernel.get("block"))
    if grid is None or block is None:
        return ""
    others = kernel.get("launch_configs")
    more = f" +{others - 1}" if isinstance(others, int) and others > 1 else ""
    return f"<<<{grid}, {block}>>>{more}"


def _suffix(name: str, others: list[str]) -> str:
    """The first words of `name` that some other name lacks."""
    other_words = [set(_WORD.findall(other)) for other in others]
    words = []
    for word in dict.fromkeys(_WORD.findall(name)):
        if any(word not in other for other in other_words):
            words.append(word)
        if len(words) == SUFFIX_WORDS:
            break
    return ",".join(words)[:SUFFIX_WIDTH]


def distinct_labels(names: list[str], width: int) -> list[str]:
    """Each name shortened to `width`; names that would read the same get a distinguishing suffix, and
    any still alike a number (#1, #2). The same full name twice keeps one label (it is one kernel)."""
    labels = [short_name(name, width) for name in names]
    groups: dict[str, list[int]] = defaultdict(list)
    for index, label in enumerate(labels):
        groups[label].append(index)
    for members in groups.values():
        full = list(dict.fromkeys(names[i] for i in members))
        if len(full) < 2:
            continue
        for index in members:
            suffix = _suffix(names[index], [other for other in full if other != names[index]])
            if suffix:
                labels[index] = f"{short_name(names[index], width - len(suffix) - 3)} [{suffix}]"
    seen: dict[str, list[str]] = defaultdict(list)
    for index, label in enumerate(labels):
        if names[index] not in seen[label]:
            seen[label].append(names[index])
    for label, owners in seen.items():
        if len(owners) > 1:
            for index, name in enumerate(names):
                if labels[index] == label:
                    labels[index] = f"{label} #{owners.index(name) + 1}"
    return labels
