"""NVTX push/pop ranges in a named domain, for the nsys and ncu passes.

Uses the `nvtx` package (domains are how the nsys/ncu parsers tell our step and module ranges
apart from the program's own). Without it, falls back to torch's NVTX binding, which has no
domain argument: ranges then land in the default domain and the parsers must match them by text.
A disabled range stack does nothing, so callers need no `if` around every push.
"""

from __future__ import annotations

from collections.abc import Callable


def _nvtx_package_ops(domain: str) -> tuple[Callable[[str], None], Callable[[], None]] | None:
    try:
        import nvtx
    except ImportError:
        return None
    nvtx_domain = nvtx.get_domain(domain)
    # Event attributes are built once per distinct message: module names repeat every step.
    attributes: dict[str, object] = {}

    def push(message: str) -> None:
        attrs = attributes.get(message)
        if attrs is None:
            attrs = attributes[message] = nvtx_domain.get_event_attributes(message=message)
        nvtx_domain.push_range(attrs)

    return push, nvtx_domain.pop_range


def _torch_ops() -> tuple[Callable[[str], None], Callable[[], None]]:
    import torch.cuda.nvtx as torch_nvtx

    return torch_nvtx.range_push, torch_nvtx.range_pop


class RangeStack:
    """Push/pop ranges in one NVTX domain on the calling thread; a no-op when disabled."""

    def __init__(self, domain: str, enabled: bool = True) -> None:
        self.domain = domain
        self.enabled = enabled
        self.uses_domain = False
        self.depth = 0
        if enabled:
            ops = _nvtx_package_ops(domain)
            self.uses_domain = ops is not None
            self._push, self._pop = ops if ops is not None else _torch_ops()

    def push(self, message: str) -> None:
        if self.enabled:
            self._push(message)
            self.depth += 1

    def pop(self) -> None:
        if self.enabled and self.depth > 0:
            self._pop()
            self.depth -= 1
