"""An executor that takes its worker down with it, every time: a poison task for the fault tests."""

from __future__ import annotations

import os
import signal
from typing import Any

from toolcatalog.executors import ExecutionContext, Executor, Verification


class WorkerKillingExecutor(Executor):
    """SIGKILLs the worker process that runs it, before any effect, as a segfault or the OOM killer would."""

    idempotent_delivery = True  # so Gatehouse may try again, up to its attempt limit

    def execute(self, ctx: ExecutionContext) -> dict[str, Any]:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")

    def dry_run(self, ctx: ExecutionContext) -> dict[str, Any]:
        return {"summary": "would take the worker down", "before": None, "after": None}

    def verify(self, ctx: ExecutionContext, result: dict[str, Any]) -> Verification:
        return Verification(confirmed=False, observed={})
