"""Executors: plugins that act on downstream systems, looked up by kind."""

from toolcatalog.executors.base import (
    ExecutionContext,
    Executor,
    ExecutorError,
    OutcomeUnknown,
    PermanentError,
    RetryableError,
    Verification,
)
from toolcatalog.executors.registry import executor_for

__all__ = [
    "ExecutionContext",
    "Executor",
    "ExecutorError",
    "OutcomeUnknown",
    "PermanentError",
    "RetryableError",
    "Verification",
    "executor_for",
]
