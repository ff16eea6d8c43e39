"""Text from the profiled program (kernel, op, layer and NVTX names, file paths, tool messages) shown as
data on any output: control characters (C0 and C1, DEL, ESC), line and paragraph separators and bidi
overrides are written as escapes (\\n, \\x1b, \\u202e). A name then cannot clear the screen, retitle the
window, forge a report line with a newline or reorder the text around it. Every renderer passes its
input through `escape_strings` before laying it out; JSON keeps the exact string and escapes the same
characters in its own syntax (`escape_json_text`)."""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls; Arabic letter mark, LRM/RLM, line/paragraph separators, the bidi
# embeddings and overrides (LRE RLE PDF LRO RLO) and isolates (LRI RLI FSI PDI).
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Outside JSON strings only ASCII punctuation, digits and literals occur, so these can be escaped in
# place; JSON's own encoder already escapes C0 controls.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match) -> str:
    char = match.group(0)
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def escape_controls(text: str) -> str:
    """`text` with every unsafe character written as an escape; idempotent, and the identity on text
    without such characters."""
    return UNSAFE.sub(_escape, text)


def escape_strings(value: object) -> object:
    """A copy of a JSON-like value (dicts, lists, strings, numbers) with every string, keys included,
    passed through `escape_controls`."""
    if isinstance(value, str):
        return escape_controls(value)
    if isinstance(value, dict):
        return {
            escape_strings(key) if isinstance(key, str) else key: escape_strings(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [escape_strings(item) for item in value]
    return value


def escape_json_text(text: str) -> str:
    """A JSON document written with ensure_ascii=False, with the characters JSON leaves raw that a
    terminal acts on (C1, DEL, bidi, separators) written as \\uXXXX escapes: the parsed strings are
    unchanged."""
    return _JSON_UNSAFE.sub(lambda match: f"\\u{ord(match.group(0)):04x}", text)
