"""No import cycle among the package's modules: data flows one way (artifacts -> Profile -> metrics ->
ledger -> rules -> results -> renderers). Every import statement counts, those inside functions too:
a deferred import that closes a circle is still a module reaching back up."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("hybrid", "nsight")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The package modules `name` imports (a `from package import module` names the module)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names if alias.name in MODULES}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package[: len(package) - node.level + 1] + ([node.module] if node.module else [])
                )
            for alias in node.names:
                target = f"{base}.{alias.name}"
                out.add(target if target in MODULES else base)
    return {m for m in out if m in MODULES and m != name}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_the_cycle_finder_finds_a_circle_and_passes_a_chain():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_module_imports_itself_through_others():
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    assert import_cycles(graph) == []


# The rule framework and the registry that lists the families; every other module under hybrid.rules is a
# family, and a family reads the ledger's pools, never another family.
RULE_FRAMEWORK = {
    "hybrid.rules",
    "hybrid.rules.advice",
    "hybrid.rules.base",
    "hybrid.rules.common",
    "hybrid.rules.engine",
    "hybrid.rules.registry",
    "hybrid.rules.switches",
}


def test_no_rule_family_imports_another():
    families = {name for name in MODULES if name.startswith("hybrid.rules.") and name not in RULE_FRAMEWORK}
    assert len(families) >= 10
    for family in sorted(families):
        assert not (_imports(family, MODULES[family]) & families), family


# The layers of the intended structure (docs/DESIGN.md: artifacts -> Profile -> ledger -> rules -> Diagnosis
# stages -> results -> renderers), as the arrows that must never exist.
LOADERS_AND_INJECTOR = {
    "hybrid.load.nsys_export",
    "hybrid.load.nsys_runtime",
    "hybrid.load.nsys_steps",
    "hybrid.load.torch_trace",
    "hybrid.load.ncu_match",
    "hybrid.analysis.job_metrics",
    "hybrid.inject.script",
    "hybrid.inject.stepping",
    "hybrid.inject.loop_trace",
    "hybrid.inject.module_calls",
    "hybrid.inject.rank",
    "hybrid.load.torch_stacks",
    "hybrid.load.settle",
    "hybrid.collect.orchestrate",
}
ANALYSIS = {
    "hybrid.analysis.analyze",
    "hybrid.analysis.diagnosis",
    "hybrid.analysis.metrics",
    "hybrid.analysis.steps",
    "hybrid.analysis.op_cost",
    "hybrid.analysis.op_ranges",
    "hybrid.analysis.counters",
    "hybrid.analysis.tables",
    "hybrid.analysis.roofline",
    "hybrid.analysis.callsites",
    "hybrid.pipeline",
    "hybrid.analysis.step_timeline",
}
ANALYSIS_PACKAGES = ("hybrid.ledger", "hybrid.rules", "hybrid.replay")


def _arrows(sources, forbidden) -> list[tuple[str, str]]:
    """(importer, imported) for every import from a module in `sources` of a module `forbidden` accepts."""
    return [
        (name, target)
        for name in sorted(sources)
        for target in sorted(_imports(name, MODULES[name]))
        if forbidden(target)
    ]


def _in_analysis(name: str) -> bool:
    return name in ANALYSIS or name.startswith(ANALYSIS_PACKAGES)


def test_the_layer_finder_names_a_forbidden_arrow():
    assert ("hybrid.pipeline", "hybrid.analysis.diagnosis") in _arrows({"hybrid.pipeline"}, _in_analysis)


def test_nsight_never_imports_hybrid():
    """nsight/ knows the Nsight tools and their files: it raises its own errors and returns plain frames,
    and hybrid maps them (hybrid.errors.from_nsight, hybrid.load conforms the frames)."""
    assert _arrows({n for n in MODULES if n.startswith("nsight")}, lambda t: t.startswith("hybrid")) == []


def test_loaders_never_import_the_injector():
    """The injector writes, the loaders read: the names both use live in hybrid.markers, so a loader never
    reaches into the in-process injector for them."""
    loaders = {n for n in MODULES if n.startswith("hybrid.load.")} | {"hybrid.analysis.job_metrics"}
    assert _arrows(loaders, lambda t: t.startswith("hybrid.inject")) == []


def test_renderers_never_import_the_analysis():
    """A received results.json renders like a fresh one: renderers read the document, never the analysis."""
    assert _arrows({n for n in MODULES if n.startswith("hybrid.report")}, _in_analysis) == []


def test_analysis_never_imports_the_loaders_or_the_injector():
    assert (
        _arrows(
            {n for n in MODULES if _in_analysis(n) and n != "hybrid.pipeline"},
            lambda t: t in LOADERS_AND_INJECTOR,
        )
        == []
    )


def test_every_rule_id_is_written_in_exactly_one_module():
    """A finding's identity has one home, its rule's module: no other module keys anything by its id."""
    from hybrid.rules import communication
    from hybrid.rules.registry import RULES

    ids = {rule.id for rule in (*RULES, *communication.RULES)}
    ids |= {rule.counters.id for rule in (*RULES, *communication.RULES) if rule.counters is not None}
    assert len(ids) >= 25
    sources = {name: path.read_text() for name, path in MODULES.items() if name.startswith("hybrid")}
    homes = {
        rule_id: [name for name, text in sources.items() if f'"{rule_id}"' in text or f"'{rule_id}'" in text]
        for rule_id in sorted(ids)
    }
    assert {rule_id: names for rule_id, names in homes.items() if len(names) != 1} == {}
