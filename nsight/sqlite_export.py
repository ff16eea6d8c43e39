"""Read an Nsight Systems SQLite export through the queries in nsight/sql/.

The export is opened read-only. Each query's header names the tables it needs; since nsys creates
tables lazily (no copies captured, no MEMCPY table), a missing table means "no such events" and the
query answers None rather than failing. Queries are package data read with importlib.resources,
so they work from a wheel as well as from a checkout.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd

from nsight.errors import UnreadableInput

# Schema majors this code was written against (3.x: Nsight Systems 2023.x through 2025.x). Another
# major may rename tables or columns; we still try, and say so.
KNOWN_SCHEMA_MAJORS = (3,)

# Tables every nsys export has, whatever was traced; a database without them is not an export.
EXPORT_MARKER_TABLES = ("StringIds", "META_DATA_EXPORT")

SQLITE_MAGIC = b"SQLite format 3\x00"

# Result columns of the sql/ queries that hold text, and bytes; every other column holds numbers (or NULL).
TEXT_COLUMNS = frozenset({"name", "text", "value", "sync_type", "domain"})
BLOB_COLUMNS = frozenset({"payload"})  # NVTX extended payloads (Python sample stacks)

# The time window of the columnar queries (:t0, :t1) that covers every row.
WHOLE_CAPTURE = {"t0": -(2**63), "t1": 2**63 - 1}

# The big tables (kernels, runtime calls, copies, memsets) are read concurrently; the target box for
# `hybrid report` has two cores.
PARALLEL_QUERIES = 2


def _connect_read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


@dataclass(frozen=True)
class Query:
    name: str
    sql: str
    requires: tuple[str, ...]


@cache
def load_query(name: str) -> Query:
    """The query sql/<name>.sql with the tables its `-- requires:` header lists."""
    resource = files("nsight.sql").joinpath(f"{name}.sql")
    sql = resource.read_text(encoding="utf-8")
    match = re.search(r"^--\s*requires:\s*(.+)$", sql, flags=re.MULTILINE)
    if not match:
        raise ValueError(f"sql/{name}.sql has no '-- requires:' header")
    requires = tuple(t.strip() for t in match.group(1).split(",") if t.strip())
    return Query(name, sql, requires)


def resolve_export_path(path: str | Path) -> Path:
    """The export file at `path` (a caller that accepts folders finds the export in them first)."""
    path = Path(path)
    if path.is_dir():
        raise UnreadableInput(f"{path} is a directory, not an Nsight Systems export", "pass the .sqlite file")
    if not path.is_file():
        raise UnreadableInput(
            f"{path} does not exist", "check the path to the .sqlite export or run directory"
        )
    return path


class NsysExport:
    """A read-only connection to one export, with its schema facts and warnings. Close it, e.g.
    with contextlib.closing."""

    def __init__(self, path: str | Path) -> None:
        self.path = resolve_export_path(path)
        if self.path.stat().st_size == 0:
            raise UnreadableInput(
                f"{self.path} is empty (0 bytes)",
                "the export was interrupted; export it again with "
                "`nsys export --type sqlite REPORT.nsys-rep`",
            )
        with self.path.open("rb") as handle:
            if handle.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                raise UnreadableInput(
                    f"{self.path} is not an SQLite database",
                    "export the report with `nsys export --type sqlite REPORT.nsys-rep`, "
                    "or pass the .sqlite file that `nsys profile --export sqlite` wrote",
                )
        self.connection = _connect_read_only(self.path)
        self.warnings: list[str] = []
        try:
            self.tables = {
                row[0]
                for row in self.connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except sqlite3.DatabaseError as exc:
            self.close()
            raise UnreadableInput(
                f"{self.path} cannot be read as SQLite: {exc}",
                "the file is damaged or truncated; export it again from the .nsys-rep",
            ) from exc
        missing = [t for t in EXPORT_MARKER_TABLES if t not in self.tables]
        if missing:
            self.close()
            shown = ", ".join(sorted(self.tables)[:8]) or "no tables"
            raise UnreadableInput(
                f"{self.path} is an SQLite database but not an Nsight Systems export "
                f"(it lacks {', '.join(missing)}; it has {shown})",
                "pass the .sqlite written by `nsys export --type sqlite` or by a hybrid run",
            )
        meta = dict(self.frame("export_meta").itertuples(index=False))
        self.schema_version: str | None = meta.get("EXPORT_SCHEMA_VERSION")
        self.product_version: str | None = meta.get("EXPORT_PRODUCT_VERSION")
        major = meta.get("EXPORT_SCHEMA_VERSION_MAJOR") or (self.schema_version or "").split(".")[0]
        if not str(major).isdigit() or int(major) not in KNOWN_SCHEMA_MAJORS:
            self.warnings.append(
                f"unknown nsys export schema version {self.schema_version or '(none recorded)'} "
                f"(exported by Nsight Systems {self.product_version or 'unknown'}); hybrid knows schema "
                f"major {', '.join(map(str, KNOWN_SCHEMA_MAJORS))}: figures may be missing or wrong"
            )

    def close(self) -> None:
        self.connection.close()

    def missing_tables(self, name: str) -> list[str]:
        return [t for t in load_query(name).requires if t not in self.tables]

    def _execute(
        self, name: str, params: dict | None, connection: sqlite3.Connection | None = None
    ) -> sqlite3.Cursor | None:
        if self.missing_tables(name):
            return None
        query = load_query(name)
        # A windowed query with no window given reads the whole capture.
        given = {**(WHOLE_CAPTURE if ":t0" in query.sql else {}), **(params or {})}
        bound = {k: json.dumps(v) if isinstance(v, (list, tuple)) else v for k, v in given.items()}
        try:
            return (connection or self.connection).execute(query.sql, bound)
        except sqlite3.DatabaseError as exc:
            raise UnreadableInput(
                f"query sql/{name}.sql failed on {self.path}: {exc}",
                "the export's schema differs from what hybrid expects; re-export it with "
                "a supported Nsight Systems (see the schema warning, if any)",
            ) from exc

    def frame(self, name: str, params: dict | None = None) -> pd.DataFrame | None:
        """A small query's rows as a DataFrame; None when a table it needs is absent."""
        cursor = self._execute(name, params)
        if cursor is None:
            return None
        columns = [d[0] for d in cursor.description]
        try:
            rows = cursor.fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._damaged(name, str(exc)) from exc
        for index, row in enumerate(rows):
            for column, value in zip(columns, row, strict=False):
                if value is not None and not _fits_column(column, value):
                    kind = (
                        "text"
                        if column in TEXT_COLUMNS
                        else "bytes"
                        if column in BLOB_COLUMNS
                        else "a number"
                    )
                    raise self._damaged(name, f"record {index} has {column} {value!r:.40}, not {kind}")
        return pd.DataFrame.from_records(rows, columns=columns)

    def columns(
        self, name: str, params: dict | None = None, connection: sqlite3.Connection | None = None
    ) -> dict[str, np.ndarray] | None:
        """An all-integer query written in columnar form (one row, each value a group_concat list,
        see sql/kernels.sql) as int64 arrays by column name. None when a table it needs is absent."""
        cursor = self._execute(name, params, connection)
        if cursor is None:
            return None
        columns = [d[0] for d in cursor.description]
        try:
            row = cursor.fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._damaged(name, str(exc)) from exc
        arrays = {c: self._integers(name, c, v) for c, v in zip(columns, row, strict=False)}
        lengths = {len(a) for a in arrays.values()}
        if len(lengths) > 1:
            raise self._damaged(name, "a record has an empty (NULL) value where a number belongs")
        return arrays

    def _integers(self, name: str, column: str, text: object) -> np.ndarray:
        """One group_concat list as int64; a value that is not an integer is a damaged record, named."""
        if not text:
            return np.empty(0, np.int64)
        text = str(text)
        try:
            parsed = np.fromstring(text, dtype=np.int64, sep=",")
            if len(parsed) == text.count(",") + 1:
                return parsed
        except ValueError:
            pass
        values = text.split(",")
        try:
            return np.array(values, dtype=np.int64)
        except (ValueError, OverflowError):
            at, bad = next(((i, v) for i, v in enumerate(values) if not _is_int(v)), (0, text[:40]))
            raise self._damaged(name, f"record {at} has a non-numeric {column} {bad[:40]!r}") from None

    def _damaged(self, name: str, what: str) -> UnreadableInput:
        # The export's own tables, not only our query's file: they are what the user can look at in sqlite3.
        tables = ", ".join(load_query(name).requires)
        return UnreadableInput(
            f"{self.path} is damaged: {tables} (read by sql/{name}.sql): {what}",
            "export it again from the .nsys-rep (nsys export --type sqlite)",
        )

    def columns_many(self, queries: dict[str, dict | None]) -> dict[str, dict[str, np.ndarray] | None]:
        """Several columnar queries at once (name -> its params), each on its own read-only connection in
        a thread: SQLite releases the GIL while it scans and formats, so two big tables load in parallel."""

        def run(name: str) -> dict[str, np.ndarray] | None:
            connection = _connect_read_only(self.path)
            try:
                return self.columns(name, queries[name], connection=connection)
            finally:
                connection.close()

        with ThreadPoolExecutor(max_workers=PARALLEL_QUERIES) as pool:
            return dict(zip(queries, pool.map(run, queries), strict=True))

    def strings(self, ids: np.ndarray) -> dict[int, str]:
        """StringIds values for the given ids (the distinct ones only are sent)."""
        unique = [int(i) for i in np.unique(ids)]
        if not unique:
            return {}
        found = self.frame("strings", {"ids": unique})
        return {} if found is None else dict(zip(found["id"].astype(int), found["value"], strict=False))


def _fits_column(column: str, value: object) -> bool:
    if column in TEXT_COLUMNS:
        return isinstance(value, str)
    if column in BLOB_COLUMNS:
        return isinstance(value, bytes)
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return -(2**63) <= int(text) < 2**63


def open_export(path: str | Path) -> NsysExport:
    return NsysExport(path)
