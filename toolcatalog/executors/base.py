"""The executor protocol: how Gatehouse acts on, previews and checks a downstream system.

Executors are plugins looked up by kind (`toolcatalog.executors.registry`). They
never see the agent's token: each attempt gets a credential scoped to one call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from audit.typealiases import JSONObject


@dataclass(frozen=True)
class ExecutionContext:
    """Everything an executor may know about one attempt at one call."""

    tool_name: str
    arguments: JSONObject
    resource: str | None
    call_id: str
    agent_name: str
    idempotency_key: str
    credential: str
    approval_ref: str = ""


@dataclass(frozen=True)
class Verification:
    """What reading the downstream state back showed."""

    confirmed: bool
    observed: JSONObject
    detail: str = ""


class ExecutorError(Exception):
    """A failed attempt. `retryable` says whether trying again may succeed."""

    retryable: bool = False

    def __init__(self, message: str, *, detail: JSONObject | None = None) -> None:
        super().__init__(message)
        self.detail = detail or {}


class PermanentError(ExecutorError):
    retryable = False


class RetryableError(ExecutorError):
    retryable = True


class OutcomeUnknown(ExecutorError):
    """The request was sent and no answer came (timeout, connection lost): the effect may have happened.

    Never retried automatically: the call needs reconciliation by a person. An executor
    whose tool may safely run twice (read-only, or idempotent) raises RetryableError instead.
    """

    retryable = False


class Executor(ABC):
    """Acts on one downstream system for one tool."""

    #: True when the downstream receives the attempt's idempotency key and applies a
    #: repeat at most once: only then may an attempt cut short by a crash run again.
    idempotent_delivery: bool = False

    def __init__(self, ref: str) -> None:
        self.ref = ref

    @abstractmethod
    def execute(self, ctx: ExecutionContext) -> JSONObject:
        """Apply the effect once (the idempotency key makes a repeat harmless); return its result."""

    @abstractmethod
    def dry_run(self, ctx: ExecutionContext) -> JSONObject:
        """Predict the effect without applying it: `{summary, before, after}`."""

    @abstractmethod
    def verify(self, ctx: ExecutionContext, result: JSONObject) -> Verification:
        """Read the downstream state back and say whether the effect is really there."""
