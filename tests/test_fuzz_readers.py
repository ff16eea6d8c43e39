"""Every reader of received artifacts, fed truncated and corrupted copies of real H200 captures: the only
failure allowed is a HybridError with exit code 2 that names a cause (the CLI prints it and exits 2);
anything else would reach the user as a traceback and exit 1.

Readers: the nsys SQLite export, the torch.profiler trace, the ncu CSV, results.json (compare's
loader and the comparison itself), inject.json and run.json of a run directory. Each goes through
the same path as `hybrid report` / `hybrid compare`: load, then analyze.

Derandomized with a fixed example budget so CI is reproducible and fast (well under a minute on
two cores); HYBRID_FUZZ_EXAMPLES=500 explores more locally.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid.errors import EXIT_USAGE, HybridError

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "tests" / "fixtures" / "h200-probe"
# A real run directory small enough to analyze many times: one planted workload, all three passes.
SMALL_RUN = ROOT / "tests" / "fixtures" / "planted" / "occ_few_row_cumsum" / "run"
RESULTS = ROOT / "tests" / "fixtures" / "results" / "h200_simple_cnn.json"

EXAMPLES = int(os.environ.get("HYBRID_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=EXAMPLES or 12,
    derandomize=not EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)


def only_input_errors(call) -> None:
    """Run `call`; a HybridError must be a usage/input error with a cause. Any other exception fails."""
    try:
        call()
    except HybridError as error:
        assert error.exit_code == EXIT_USAGE, error.message()
        assert error.cause


# -- corruption strategies ------------------------------------------------------------------------


def damaged_bytes(data: bytes) -> st.SearchStrategy[bytes]:
    """A truncation, a few overwritten bytes, or a duplicated/dropped chunk of `data`."""
    size = len(data)
    truncated = st.integers(0, size - 1).map(lambda n: data[:n])
    flips = st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 255)), min_size=1, max_size=16)

    def flipped(changes: list[tuple[int, int]]) -> bytes:
        out = bytearray(data)
        for at, value in changes:
            out[at] = value
        return bytes(out)

    chunk = st.tuples(st.integers(0, size - 1), st.integers(1, 4096))
    dropped = chunk.map(lambda c: data[: c[0]] + data[c[0] + c[1] :])
    doubled = chunk.map(lambda c: data[: c[0] + c[1]] + data[c[0] :])
    return st.one_of(truncated, flips.map(flipped), dropped, doubled)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _paths(doc: object, prefix: tuple = (), limit: int = 20_000) -> list[tuple]:
    """Every key/index path in a JSON document (breadth first, at most `limit`)."""
    out, queue = [], [(prefix, doc)]
    while queue and len(out) < limit:
        path, node = queue.pop(0)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            out.append((*path, key))
            queue.append(((*path, key), child))
    return out


@st.composite
def mutated_json(draw, doc: object, paths: list[tuple]) -> object:
    """`doc` with 1-4 values replaced by arbitrary JSON, or deleted."""
    doc = json.loads(json.dumps(doc))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(paths))
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(JSON_VALUES)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed this path
    return doc


# -- the readers ---------------------------------------------------------------------------------

EXPORT = (PROBE / "nsys_matmul_copy.sqlite").read_bytes()


@FUZZ
@given(data=damaged_bytes(EXPORT))
def test_damaged_nsys_export(tmp_path_factory, data):
    from hybrid.pipeline import analyze_export

    path = tmp_path_factory.mktemp("nsys") / "profile.sqlite"
    path.write_bytes(data)
    only_input_errors(lambda: analyze_export(path, step_range="step"))


def _export_cells() -> list[tuple[str, str, int]]:
    """(table, column, rows) of every table in the probe export, to damage single records."""
    with sqlite3.connect(PROBE / "nsys_matmul_copy.sqlite") as con:
        tables = [row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return [
            (table, column[1], con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
            for table in tables
            for column in con.execute(f'PRAGMA table_info("{table}")')
        ]


EXPORT_CELLS = [cell for cell in _export_cells() if cell[2] > 0]
CELL_VALUES = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=6),
    st.binary(max_size=4),
)


@FUZZ
@given(
    changes=st.lists(
        st.tuples(st.sampled_from(EXPORT_CELLS), st.integers(0, 10**6), CELL_VALUES), min_size=1, max_size=4
    )
)
def test_nsys_export_with_malformed_records(tmp_path_factory, changes):
    """Records of the wrong type (text timestamps, NULL ids, blobs) in any table the reader may touch."""
    from hybrid.pipeline import analyze_export

    path = tmp_path_factory.mktemp("nsys") / "profile.sqlite"
    path.write_bytes(EXPORT)
    with sqlite3.connect(path) as con:
        for (table, column, rows), row, value in changes:
            try:
                con.execute(
                    f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = '
                    f'(SELECT rowid FROM "{table}" LIMIT 1 OFFSET ?)',
                    (value, row % rows),
                )
            except sqlite3.IntegrityError:
                continue  # a NOT NULL or UNIQUE column: SQLite itself keeps such a record out
    only_input_errors(lambda: analyze_export(path, step_range="step"))


TRACE_TEXT = (PROBE / "torch_trace.json").read_bytes()
TRACE = json.loads(TRACE_TEXT)
TRACE_PATHS = _paths(TRACE)


def _analyze_trace(tmp_path_factory, content: bytes) -> None:
    from hybrid.pipeline import analyze_run_dir

    run = tmp_path_factory.mktemp("run")
    (run / "torch").mkdir()
    (run / "torch" / "trace.json").write_bytes(content)
    only_input_errors(lambda: analyze_run_dir(run))


@FUZZ
@given(data=damaged_bytes(TRACE_TEXT))
def test_damaged_torch_trace_bytes(tmp_path_factory, data):
    _analyze_trace(tmp_path_factory, data)


@FUZZ
@given(doc=mutated_json(TRACE, TRACE_PATHS))
def test_malformed_torch_trace_records(tmp_path_factory, doc):
    _analyze_trace(tmp_path_factory, json.dumps(doc).encode())


def _first_op_with_shapes(events: list) -> dict:
    return next(e for e in events if e.get("ph") == "X" and e.get("args", {}).get("Input Dims"))


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda events: next(e for e in events if e.get("ph") == "X").update(ts=True), "non-numeric 'ts'"),
        (lambda events: next(e for e in events if e.get("ph") == "X").update(dur=float("nan")), "'dur'"),
        (lambda events: _first_op_with_shapes(events)["args"]["Input Dims"].append(["8", 4]), "Input Dims"),
        (
            lambda events: _first_op_with_shapes(events)["args"]["Input Dims"].append([[2, False]]),
            "Input Dims",
        ),
        (
            lambda events: _first_op_with_shapes(events)["args"].update({"Input type": ["float", 3]}),
            "Input type",
        ),
        (lambda events: _first_op_with_shapes(events)["args"].update({"Input Dims": "[1, 2]"}), "Input Dims"),
    ],
)
def test_a_torch_trace_record_of_the_wrong_json_type_is_named(tmp_path, damage, said):
    """A boolean is not a timestamp, a string is not a size, at any depth of a tensor list's shapes; the
    record is named by its index."""
    from hybrid.load.torch_trace import load_torch_trace

    doc = json.loads(TRACE_TEXT)
    damage(doc["traceEvents"])
    (tmp_path / "trace.json").write_text(json.dumps(doc))
    with pytest.raises(HybridError) as refused:
        load_torch_trace(tmp_path / "trace.json")
    assert said in refused.value.message() and "traceEvents[" in refused.value.message()


def test_a_tensor_lists_nested_shapes_and_an_empty_shape_are_read(tmp_path):
    from hybrid.load.torch_trace import load_torch_trace

    doc = json.loads(TRACE_TEXT)
    _first_op_with_shapes(doc["traceEvents"])["args"]["Input Dims"] += [[[2, 3], [4]], [], 7]
    (tmp_path / "trace.json").write_text(json.dumps(doc))
    assert len(load_torch_trace(tmp_path / "trace.json").ops) == len(
        load_torch_trace(PROBE / "torch_trace.json").ops
    )


@FUZZ
@given(data=damaged_bytes(gzip.compress(TRACE_TEXT)))
def test_damaged_gzipped_torch_trace(tmp_path_factory, data):
    from hybrid.pipeline import analyze_run_dir

    run = tmp_path_factory.mktemp("run")
    (run / "torch").mkdir()
    (run / "torch" / "trace.json.gz").write_bytes(data)
    only_input_errors(lambda: analyze_run_dir(run))


def _small_run_with(tmp_path_factory, relative: str, content: bytes) -> Path:
    run = tmp_path_factory.mktemp("run") / "run"
    shutil.copytree(SMALL_RUN, run)
    (run / relative).write_bytes(content)
    return run


CSV_TEXT = (SMALL_RUN / "ncu" / "counters.csv").read_bytes()
CSV_CELLS = st.sampled_from(["", "n/a", "no data", "nan", "-1", "1e400", "abc", '"', "(1, 2)", "0", ",,,"])


@st.composite
def damaged_csv(draw) -> bytes:
    """Bytes-level damage, or CSV-level: lines dropped or duplicated, cells replaced by odd values."""
    if draw(st.booleans()):
        return draw(damaged_bytes(CSV_TEXT))
    lines = CSV_TEXT.decode().splitlines()
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["drop", "double", "cell"]))
        if action == "drop":
            del lines[at]
        elif action == "double":
            lines.insert(at, lines[at])
        else:
            cells = lines[at].split('","')
            cells[draw(st.integers(0, len(cells) - 1))] = draw(CSV_CELLS)
            lines[at] = '","'.join(cells)
        if not lines:
            break
    return "\n".join(lines).encode()


@FUZZ
@given(data=damaged_csv())
def test_damaged_ncu_csv(tmp_path_factory, data):
    from hybrid.load.ncu_match import read_counters
    from hybrid.pipeline import analyze_run_dir

    run = _small_run_with(tmp_path_factory, "ncu/counters.csv", data)
    only_input_errors(lambda: read_counters(run / "ncu" / "counters.csv"))
    # In a run directory, unreadable counters are left out with a warning; given with --ncu, refused.
    only_input_errors(lambda: analyze_run_dir(run))
    only_input_errors(lambda: analyze_run_dir(run, ncu_csv=run / "ncu" / "counters.csv"))


INJECT = json.loads((SMALL_RUN / "torch" / "inject.json").read_text())
RUN_JSON = json.loads((SMALL_RUN / "run.json").read_text())


@FUZZ
@given(
    doc=mutated_json(INJECT, _paths(INJECT)),
    data=damaged_bytes(json.dumps(INJECT).encode()),
    as_bytes=st.booleans(),
)
def test_damaged_inject_json(tmp_path_factory, doc, data, as_bytes):
    from hybrid.pipeline import analyze_run_dir

    run = _small_run_with(
        tmp_path_factory, "torch/inject.json", data if as_bytes else json.dumps(doc).encode()
    )
    only_input_errors(lambda: analyze_run_dir(run))


@FUZZ
@given(
    doc=mutated_json(RUN_JSON, _paths(RUN_JSON)),
    data=damaged_bytes(json.dumps(RUN_JSON).encode()),
    as_bytes=st.booleans(),
)
def test_damaged_run_json(tmp_path_factory, doc, data, as_bytes):
    from hybrid.pipeline import analyze_run_dir

    run = _small_run_with(tmp_path_factory, "run.json", data if as_bytes else json.dumps(doc).encode())
    only_input_errors(lambda: analyze_run_dir(run))


RESULTS_DOC = json.loads(RESULTS.read_text())


@settings(FUZZ, max_examples=(EXAMPLES or 40))
@given(
    doc=mutated_json(RESULTS_DOC, _paths(RESULTS_DOC)),
    data=damaged_bytes(RESULTS.read_bytes()),
    as_bytes=st.booleans(),
)
def test_damaged_results_json(tmp_path_factory, doc, data, as_bytes):
    from hybrid.cli.received import complete, load_results, received
    from hybrid.report.compare import compare_results, render_compare
    from hybrid.report.html_report import render_html
    from hybrid.report.terminal import render_terminal

    path = tmp_path_factory.mktemp("results") / "results.json"
    path.write_bytes(data if as_bytes else json.dumps(doc).encode())

    # As the CLI reads a received document: cleaned on load, rendered inside received().
    def compare() -> None:
        with received(path):
            candidate = load_results(path)
            render_compare(compare_results(RESULTS_DOC, candidate))
            render_compare(compare_results(candidate, RESULTS_DOC))

    def report() -> None:  # `hybrid report results.json`: the document re-rendered
        with received(path):
            document = complete(load_results(path), path)
            render_terminal(document, verbose=True, color=False)
            render_html(document)

    only_input_errors(compare)
    only_input_errors(report)


@pytest.mark.parametrize("document", ["[]", "[1, 2]", '"text"', "3", "null"])
def test_results_json_that_is_not_an_object_is_refused(tmp_path, document):
    from hybrid.cli.received import load_results

    path = tmp_path / "results.json"
    path.write_text(document)
    with pytest.raises(HybridError) as error:
        load_results(path)
    assert error.value.exit_code == EXIT_USAGE and str(path) in error.value.cause
