"""Logging filters: an expected refusal is one INFO line, so the WARNING and ERROR lines are the ones to read.

Installed by `config.settings.LOGGING`; this module imports no models (logging is
configured before the apps are loaded).
"""

from __future__ import annotations

import logging

from psycopg.errors import PipelineAborted


def _demote(record: logging.LogRecord, level: int) -> bool:
    """Relabel `record` at `level` without its traceback; return whether its logger still wants it."""
    record.levelno, record.levelname = level, logging.getLevelName(level)
    record.exc_info = record.exc_text = None
    return logging.getLogger(record.name).isEnabledFor(level)


class ClientErrorsAtInfo(logging.Filter):
    """Log a 4xx answer (`django.request`) as one INFO line without a traceback.

    A refused proposal, a replay's conflict or a reviewer without the permission is
    the product doing its job; Django logs each at WARNING, a 403 with a full traceback.
    Server errors (5xx) keep their level and traceback.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500 and record.levelno > logging.INFO:
            return _demote(record, logging.INFO)
        return True


class AbortedPipelineAtDebug(logging.Filter):
    """Demote psycopg's "error ignored terminating Pipeline …: pipeline aborted" to DEBUG.

    When a statement in a pipeline fails (a taken idempotency key on a replay or a
    conflict), psycopg logs that the pipeline's closing sync failed too, then raises
    the statement's own error, which the caller handles. The line says nothing more.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if any(isinstance(arg, PipelineAborted) for arg in args):
            return _demote(record, logging.DEBUG)
        return True
