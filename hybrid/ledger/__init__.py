"""The time ledger, between metrics and rules: each steady step's window partitioned by cause, each
nanosecond once (build.build_ledger); the causes and their precedence are declared in causes."""

from hybrid.ledger.build import SEGMENT_COLUMNS, Ledger, build_ledger

__all__ = ["SEGMENT_COLUMNS", "Ledger", "build_ledger"]
