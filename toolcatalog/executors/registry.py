"""Look executors up by kind: `python` (a dotted path to an Executor class), `gatehouse_protocol`, `http`, `mcp`."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Protocol

from django.utils.module_loading import import_string

from toolcatalog.executors.base import Executor, PermanentError
from toolcatalog.executors.http import GatehouseProtocolExecutor
from toolcatalog.executors.httpapi import HttpApiExecutor
from toolcatalog.executors.mcp import McpExecutor


def _python(ref: str) -> Executor:
    cls: type[Executor] = import_string(ref)
    return cls(ref)


# Each kind and the factory that builds its executor from a tool's executor reference.
_KINDS: dict[str, Callable[[str], Executor]] = {
    "python": _python,
    "gatehouse_protocol": GatehouseProtocolExecutor,
    "http": HttpApiExecutor,
    "mcp": McpExecutor,
}


@lru_cache(maxsize=256)
def build(kind: str, ref: str) -> Executor:
    """Return the executor for (kind, ref); executors are stateless, so one instance is shared."""
    factory = _KINDS.get(kind)
    if factory is None:
        raise PermanentError(f"no executor of kind {kind!r}")
    try:
        return factory(ref)
    except ImportError as exc:
        raise PermanentError(f"executor {ref!r} cannot be loaded: {exc}") from exc


class ExecutorNamed(Protocol):
    """What names a tool's executor (a Tool, or a stand-in with the same two fields)."""

    @property
    def executor_kind(self) -> str: ...

    @property
    def executor_ref(self) -> str: ...


def executor_for(tool: ExecutorNamed) -> Executor:
    """Return the executor of a tool (anything with executor_kind and executor_ref)."""
    return build(tool.executor_kind, tool.executor_ref)
