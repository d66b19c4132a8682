"""The machine and the versions a benchmark ran on, as the report states them."""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

PACKAGES = (
    "Django",
    "django-ninja",
    "gunicorn",
    "a2wsgi",
    "uvicorn",
    "celery",
    "kombu",
    "redis",
    "psycopg",
    "psycopg-pool",
    "jsonschema",
)


@dataclass(frozen=True)
class Machine:
    cpus: int
    cpu_model: str
    memory_gib: float
    kernel: str


def machine() -> Machine:
    """Return nproc, the CPU model, total memory and the kernel."""
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "?")
    meminfo = Path("/proc/meminfo").read_text().split()
    memory_kib = int(meminfo[meminfo.index("MemTotal:") + 1])
    return Machine(os.cpu_count() or 1, model, memory_kib / 1024**2, platform.release())


def load_average() -> str:
    """Return the 1, 5 and 15 minute load averages."""
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


def versions() -> dict[str, str]:
    """Return the versions of Python, the servers and the libraries that matter here."""
    from django.db import connection

    found = {"Python": platform.python_version()}
    found.update({name: version(name) for name in PACKAGES})
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        found["PostgreSQL"] = cursor.fetchone()[0]
    found["Redis"] = _redis_version()
    found["wrk"] = _wrk_version()
    return found


def _redis_version() -> str:
    import redis

    from bench.parameters import SETTINGS

    return str(redis.Redis.from_url(SETTINGS.redis_url).info("server").get("redis_version", "?"))


def _wrk_version() -> str:
    done = subprocess.run(["wrk", "-v"], capture_output=True, text=True)
    words = (done.stdout + done.stderr).split()
    return words[1] if len(words) > 1 else "?"
