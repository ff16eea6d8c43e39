"""A results.json read from a file hybrid did not necessarily write: loaded, checked against the contract,
and rendered with bad input said as such rather than as a traceback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from hybrid.errors import UsageError


@contextlib.contextmanager
def received(*sources: Path) -> Iterator[None]:
    """Rendering results documents read from files hybrid did not necessarily write: a value of a type
    no renderer expects (a hand-edited or damaged file) is bad input naming the file, not a traceback.
    The findings were already cleaned on load (hybrid.schema.typed_findings); this catches the rest."""
    try:
        yield
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, ArithmeticError) as error:
        named = " or ".join(str(source) for source in sources)
        raise UsageError(
            f"{named} holds a value of a type results.json never has ({type(error).__name__}: "
            f"{str(error)[:120]})",
            "re-create it with `hybrid report RUN_DIR` from the run's artifacts",
        ) from None


def load_results(path: Path) -> dict:
    import json

    from hybrid.files import read_regular_text, reads

    target = path / "results.json" if path.is_dir() else path
    reads(target)
    fix = "re-create it with `hybrid report RUN_DIR`"
    try:
        document = json.loads(read_regular_text(target), parse_int=_json_int)
    except FileNotFoundError:
        if path.is_dir() and (path / "run.json").is_file():  # a run directory never analyzed (or re-analyzed)
            raise UsageError(
                f"{target} not found: {path} holds a run that was not analyzed",
                f"analyze it first with `hybrid report {path} --out {path}`, then compare",
            ) from None
        raise UsageError(
            f"{target} not found", "pass a run directory holding results.json, or the file itself"
        ) from None
    except IsADirectoryError:
        raise UsageError(f"{target} is a directory", "pass a run directory holding results.json") from None
    except OSError as error:
        raise UsageError(f"cannot read {target}: {error.strerror or error}", "check the path") from None
    except (ValueError, RecursionError) as error:
        raise UsageError(f"{target} is not a results.json document: {error}", fix) from None
    if not isinstance(document, dict):
        raise UsageError(
            f"{target} is not a results.json document: it holds a JSON {type(document).__name__}, "
            "not an object",
            "pass the results.json that `hybrid run` or `hybrid report` wrote",
        )
    from hybrid.schema import typed_findings

    problems = typed_findings(document, str(target))
    if problems and isinstance(document.get("warnings"), list):
        document["warnings"] += problems
    return document


def _json_int(text: str) -> int | float:
    """A JSON integer; one beyond a float's range (10**400) reads as inf, which every reader already treats
    as no measurement, instead of an int no figure can be computed with (OverflowError in float())."""
    return int(text) if len(text.lstrip("-")) <= 308 else float(text)


def complete(document: dict, target: Path) -> dict:
    """A results document that has the contract's keys (hybrid.schema), else bad input naming what is
    missing."""
    from hybrid.schema import missing_keys

    try:
        missing = missing_keys(document)
    except (AttributeError, TypeError):  # a section of the wrong type (a number where an object belongs)
        missing = ["sections of the right types"]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise UsageError(
            f"{target} is not a complete results.json document: it lacks {shown}",
            "re-create it with `hybrid report RUN_DIR` from the run's artifacts",
        )
    return document
