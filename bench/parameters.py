"""What the benchmark runs against: its own database, Redis DB, ports, durations.

Every knob is an environment variable. The defaults keep each measurement short on
a 2-core machine, but the large data size is issue 27's (1,000,000 pending calls,
10,000,000 audit events): loading it, and walking it with audit_verify, take most of
a `make bench` run (it logs how long each load phase took). The same environment is
given to the web server, the worker and this process (which measures some things in-process).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


@dataclass(frozen=True)
class BenchSettings:
    """The benchmark's parameters (BENCH_* environment variables override them)."""

    pg_admin_url: str = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432")
    database: str = os.environ.get("BENCH_DATABASE", "gatehouse_bench")
    redis_url: str = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
    port: int = _int("BENCH_PORT", 18080)
    downstream_port: int = _int("BENCH_DOWNSTREAM_PORT", 18081)
    # A second web server, the same but with GATEHOUSE_POSTGRESQL_STORE=0: the A/B of the store's statements.
    portable_port: int = _int("BENCH_PORTABLE_PORT", 18082)
    # The reference server: the same settings under gunicorn's sync workers, for the bare insert as usually served.
    reference_port: int = _int("BENCH_REFERENCE_PORT", 18083)
    web_workers: int = _int("BENCH_WEB_WORKERS", 2 * (os.cpu_count() or 1) + 1)
    # Threads per process of Gatehouse's server (gunicorn gthread); each may hold a database connection.
    web_threads: int = _int("BENCH_WEB_THREADS", 4)
    # Per web process, at least web_threads; × web workers × 3 servers must stay under PostgreSQL's
    # max_connections (100 here): the reference server's sync workers use one at a time.
    pool_max: int = _int("BENCH_DB_POOL_MAX", 4)
    runs: int = _int("BENCH_RUNS", 3)
    duration: float = _float("BENCH_DURATION", 8.0)
    # Each ingest run's seconds per endpoint come in this many blocks, the endpoints taking turns.
    ingest_rounds: int = max(1, _int("BENCH_INGEST_ROUNDS", 4))
    warmup: float = _float("BENCH_WARMUP", 2.0)
    page_duration: float = _float("BENCH_PAGE_DURATION", 4.0)
    e2e_calls: int = _int("BENCH_E2E_CALLS", 100)
    # The large data size: issue 27's, for the reviewer pages and audit_verify.
    pending_calls: int = _int("BENCH_PENDING_CALLS", 1_000_000)
    audit_events: int = _int("BENCH_AUDIT_EVENTS", 10_000_000)
    small_pending_calls: int = _int("BENCH_SMALL_PENDING_CALLS", 1_000)
    small_audit_events: int = _int("BENCH_SMALL_AUDIT_EVENTS", 10_000)
    # The chain the walk's A/B runs on, between the two sizes: its portable twin walks in one process.
    walk_ab_events: int = _int("BENCH_WALK_AB_EVENTS", 1_000_000)
    output: Path = Path(os.environ.get("BENCH_OUTPUT", BASE_DIR / "docs" / "benchmarks.md"))

    @property
    def database_url(self) -> str:
        return f"{self.pg_admin_url}/{self.database}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def portable_base_url(self) -> str:
        return f"http://127.0.0.1:{self.portable_port}"

    @property
    def reference_base_url(self) -> str:
        return f"http://127.0.0.1:{self.reference_port}"

    @property
    def downstream_url(self) -> str:
        return f"http://127.0.0.1:{self.downstream_port}"

    @property
    def instant_endpoint(self) -> str:
        """The instant downstream's search_seats: the bench's copy of the tool, and the bare governed shape, call it."""
        return f"{self.downstream_url}/search_seats"

    def environment(self) -> dict[str, str]:
        """Return the production-like environment every process of the bench stack shares."""
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.settings",  # the product's settings plus bench.bare
            "DEBUG": "0",
            "SECRET_KEY": "bench-only-secret-key-0123456789abcdef0123456789abcdef",
            "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
            "DATABASE_URL": self.database_url,
            "CELERY_BROKER_URL": self.redis_url,
            "GATEHOUSE_DEMO_SERVICES_URL": self.base_url,
            "GATEHOUSE_DEMO": "1",  # the measured tools are the demo's, and seed_demo loads them
            "BENCH_INSTANT_ENDPOINT": self.instant_endpoint,  # for bench.bare's governed shape
            # The per-agent limit (1,200/min by default) would answer 429 to a load test.
            "GATEHOUSE_RATE_LIMIT_PER_MINUTE": "0",
            # The per-agent call budget (1,000 an hour by default) would too: set high, still counted as in production.
            "GATEHOUSE_AGENT_BUDGET_CALLS": "1000000000",
            "GATEHOUSE_DB_POOL_MAX": str(self.pool_max),
            "GATEHOUSE_VAR_DIR": str(BASE_DIR / "var" / "bench"),
            # The stack's signing key (DEBUG is off): made by bench.run on first use, one for every process.
            "GATEHOUSE_SIGNING_KEYS": str(BASE_DIR / "var" / "bench" / "signing-keys"),
            # Its key for secrets at rest (DEBUG is off, so every process needs one): bench-only, like SECRET_KEY.
            "GATEHOUSE_SECRETS_KEYS": "G2SYsZdLjuIZMe1WropSnmz6L_X7S59TbEuA-G8Lg14=",
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }


SETTINGS = BenchSettings()
