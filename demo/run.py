"""`make demo`: Gatehouse end to end on SQLite and Celery's filesystem broker — no server to install.

Migrates, seeds the demo, then runs the Procfile's processes (web, worker, beat and
a demo agent) under honcho, printing their output side by side. Ctrl-C stops them all.

Environment: GATEHOUSE_DEMO_PORT (8000), GATEHOUSE_DEMO_PASSWORD (gatehouse),
GATEHOUSE_VAR_DIR (./var); DATABASE_URL and CELERY_BROKER_URL are honoured if set.
"""

from __future__ import annotations

import os
import sys
from io import StringIO
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def demo_environment() -> dict[str, str]:
    """Set (and return) the environment every demo process shares; explicit variables win."""
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("GATEHOUSE_VAR_DIR", str(BASE_DIR / "var"))
    os.environ["GATEHOUSE_VAR_DIR"] = str(Path(os.environ["GATEHOUSE_VAR_DIR"]).resolve())
    port = os.environ.setdefault("GATEHOUSE_DEMO_PORT", "8000")
    os.environ.setdefault("GATEHOUSE_DEMO_URL", f"http://127.0.0.1:{port}")
    os.environ.setdefault("GATEHOUSE_DEMO_SERVICES_URL", os.environ["GATEHOUSE_DEMO_URL"])
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    os.environ.setdefault("LOG_LEVEL", "WARNING")  # the agent's lines tell the story; keep the rest quiet
    # The Procfile says `python`: make it this interpreter (the project's virtualenv).
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    return dict(os.environ)


def prepare(password: str) -> None:
    """Create or upgrade the database and load the demo (both idempotent)."""
    import django
    from django.core.management import call_command
    from django.db import connections

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
    call_command("seed_demo", password=password, stdout=StringIO())
    connections.close_all()  # the children open their own


def procfile() -> dict[str, str]:
    """Return the Procfile's processes by name."""
    from honcho.environ import parse_procfile

    return dict(parse_procfile((BASE_DIR / "Procfile").read_text()).processes)


def banner(url: str, password: str) -> str:
    """Return what the operator needs: where to go and how to log in."""
    return (
        f"\n  Gatehouse demo: {url}/  (reviewer queue)\n"
        f"  Log in as alice or bob (reviewers) or admin (superuser {url}/admin/), password: {password}\n"
        "  A demo agent proposes calls all the time: small ones run by themselves, large refunds\n"
        "  wait for you in the queue. Ctrl-C stops everything.\n"
    )


def main() -> int:
    """Run the demo until Ctrl-C; return the exit status."""
    from honcho.manager import Manager

    env = demo_environment()
    password = env.get("GATEHOUSE_DEMO_PASSWORD", "gatehouse")
    prepare(password)
    print(banner(env["GATEHOUSE_DEMO_URL"], password), flush=True)
    manager = Manager()
    for name, command in procfile().items():
        manager.add_process(name, command, env=env, cwd=str(BASE_DIR))
    manager.loop()
    stopped_by_signal = manager.returncode in {130, 143}  # Ctrl-C or SIGTERM: a clean stop
    return 0 if stopped_by_signal else manager.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
