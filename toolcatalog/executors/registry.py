"""Look executors up by kind: `python` (a dotted path to an Executor class) or `http`."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from django.utils.module_loading import import_string

from toolcatalog.executors.base import Executor, PermanentError

_KINDS: dict[str, Callable[[str], Executor]] = {}


def register(kind: str) -> Callable[[Callable[[str], Executor]], Callable[[str], Executor]]:
    """Register a factory that builds an executor of `kind` from a tool's executor reference."""

    def decorator(factory: Callable[[str], Executor]) -> Callable[[str], Executor]:
        _KINDS[kind] = factory
        return factory

    return decorator


@register("python")
def _python(ref: str) -> Executor:
    cls = import_string(ref)
    return cls(ref)


@lru_cache(maxsize=256)
def build(kind: str, ref: str) -> Executor:
    """Return the executor for (kind, ref); executors are stateless, so one instance is shared."""
    if kind == "http":
        from toolcatalog.executors import http  # noqa: F401  (registers the kind)
    factory = _KINDS.get(kind)
    if factory is None:
        raise PermanentError(f"no executor of kind {kind!r}")
    try:
        return factory(ref)
    except ImportError as exc:
        raise PermanentError(f"executor {ref!r} cannot be loaded: {exc}") from exc


def executor_for(tool: object) -> Executor:
    """Return the executor of a tool (anything with executor_kind and executor_ref)."""
    return build(tool.executor_kind, tool.executor_ref)  # type: ignore[attr-defined]
