"""Every string an HTML page shows goes through one writer: control characters escaped, HTML escaped, and
the user's absolute paths cut to their last component unless asked to keep them."""

from __future__ import annotations

import html
import re

from hybrid.report.common import format_value, source_label
from hybrid.report.safe_text import escape_controls

_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])(?:/|[A-Za-z]:\\)(?:[^\s/\\\"'<>]+[/\\])+([^\s/\\\"'<>]*)")


class HtmlWriter:
    """Escapes (and, unless asked otherwise, strips machine paths from) every string it is given."""

    def __init__(self, include_paths: bool) -> None:
        self.include_paths = include_paths

    def text(self, value: object) -> str:
        text = escape_controls("" if value is None else str(value))
        if not self.include_paths:
            text = _ABSOLUTE_PATH.sub(lambda match: f".../{match.group(1)}", text)
        return html.escape(text, quote=True)

    def value(self, value: object, unit: str = "") -> str:
        return self.text(format_value(value, unit))

    def source(self, source: object) -> str:
        source = str(source or "")
        css = source.split(":", 1)[0] if source else "unknown"
        return f'<span class="src {self.text(css)}">[{self.text(source_label(source) or "unknown")}]</span>'
