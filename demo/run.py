"""`make demo`: Gatehouse end to end on SQLite and the embedded broker — no server to install.

Migrates, seeds the demo, then runs the Procfile's processes (web, worker, beat, the audit
sequencer and a demo agent) under honcho, printing their output side by side. Ctrl-C stops them all.

Environment: GATEHOUSE_DEMO_PORT (8000), GATEHOUSE_DEMO_PASSWORD (gatehouse),
GATEHOUSE_VAR_DIR (./var); DATABASE_URL and CELERY_BROKER_URL are honoured if set.
A second run keeps the agents' tokens and the reviewers' passwords (see seed_demo).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from io import StringIO
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
STOP_GRACE_SECONDS = 30


def demo_environment() -> dict[str, str]:
    """Set (and return) the environment every demo process shares; explicit variables win."""
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("GATEHOUSE_DEMO", "1")  # installs the demo app, its services and seed_demo
    # SQLite and the embedded broker are the demo's point, even where DEBUG=0 is exported.
    os.environ.setdefault("GATEHOUSE_ALLOW_EMBEDDED", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("GATEHOUSE_VAR_DIR", str(BASE_DIR / "var"))
    os.environ["GATEHOUSE_VAR_DIR"] = str(Path(os.environ["GATEHOUSE_VAR_DIR"]).resolve())
    if not os.environ.get("GATEHOUSE_SECRETS_KEYS"):
        os.environ["GATEHOUSE_SECRETS_KEYS"] = demo_secrets_key(Path(os.environ["GATEHOUSE_VAR_DIR"]))
    if not os.environ.get("GATEHOUSE_SIGNING_KEYS"):
        os.environ["GATEHOUSE_SIGNING_KEYS"] = str(demo_signing_keys(Path(os.environ["GATEHOUSE_VAR_DIR"])))
    port = os.environ.setdefault("GATEHOUSE_DEMO_PORT", "8000")
    os.environ.setdefault("GATEHOUSE_DEMO_URL", f"http://127.0.0.1:{port}")
    os.environ.setdefault("GATEHOUSE_DEMO_SERVICES_URL", os.environ["GATEHOUSE_DEMO_URL"])
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    os.environ.setdefault("LOG_LEVEL", "WARNING")  # the agent's lines tell the story; keep the rest quiet
    # The Procfile says `python`: make it this interpreter (the project's virtualenv).
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    return dict(os.environ)


def demo_secrets_key(var_dir: Path) -> str:
    """Return the demo's key for secrets at rest: made under `var_dir` on first run (owner-only), then kept.

    Every demo process must share one key: an ephemeral one per process could not read the others' secrets.
    """
    from cryptography.fernet import Fernet

    path = var_dir / "secrets.key"
    if not path.exists():
        var_dir.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(Fernet.generate_key().decode("ascii") + "\n")
    return path.read_text().strip()


def demo_signing_keys(var_dir: Path) -> Path:
    """Return the demo's signing key directory under `var_dir`, with a key made on first run, then kept.

    Every demo process must sign with one key the demo services can fetch from the JWKS: an
    ephemeral one per process would make the worker's credentials unverifiable.
    """
    from vault.signing import KEY_SUFFIX, write_new_key

    folder = var_dir / "signing-keys"
    if not any(folder.glob(f"*{KEY_SUFFIX}")):
        write_new_key(f"{folder}/")
    return folder


@dataclass(frozen=True)
class Access:
    """How to get in: the demo agents' tokens, and whether the reviewers' password is the one given."""

    tokens: dict[str, str]
    tokens_file: Path
    password_is_current: bool


def prepare(password: str) -> Access:
    """Create or upgrade the database and load the demo (both idempotent); return how to get in."""
    import django
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
    tokens_file = settings.VAR_DIR / "demo-tokens.json"
    call_command("seed_demo", password=password, tokens_file=str(tokens_file), stdout=StringIO())
    # seed_demo keeps existing passwords, so the one given may not be theirs (an earlier run's was).
    password_is_current = get_user_model().objects.get(username="alice").check_password(password)
    connections.close_all()  # the children open their own
    return Access(json.loads(tokens_file.read_text()), tokens_file, password_is_current)


def procfile() -> dict[str, str]:
    """Return the Procfile's processes by name."""
    from honcho.environ import parse_procfile

    return dict(parse_procfile((BASE_DIR / "Procfile").read_text()).processes)


def banner(url: str, password: str, access: Access) -> str:
    """Return what the operator needs: where to go, how to log in, and each demo agent's token."""
    from demo.catalog import AGENTS

    login = f"password: {password}"
    if not access.password_is_current:
        login = f"their password since they were created ({password} was not applied: seed_demo --reset-passwords)"
    agents = "".join(
        f"    {name:<17} {token}  {AGENTS[name][0] if name in AGENTS else ''}\n"
        for name, token in access.tokens.items()
    )
    return (
        f"\n  Gatehouse demo: {url}/  (reviewer queue)\n"
        f"  Log in as alice or bob (reviewers) or admin (superuser {url}/admin/), {login}\n"
        f"  Agent tokens (Authorization: Bearer …; kept in {access.tokens_file}):\n{agents}"
        "  A demo agent proposes calls all the time: small ones run by themselves, large refunds\n"
        "  wait for you in the queue. Ctrl-C stops everything.\n"
    )


def main() -> int:
    """Run the demo until Ctrl-C; return the exit status."""
    from honcho import manager as honcho_manager
    from honcho.manager import Manager

    # honcho SIGKILLs whatever has not stopped 5 s after Ctrl-C; a worker finishing its
    # task on a busy machine can need longer, and a killed worker drops its message.
    honcho_manager.KILL_WAIT = STOP_GRACE_SECONDS

    env = demo_environment()
    password = env.get("GATEHOUSE_DEMO_PASSWORD", "gatehouse")
    access = prepare(password)
    print(banner(env["GATEHOUSE_DEMO_URL"], password, access), flush=True)
    manager = Manager()
    for name, command in procfile().items():
        manager.add_process(name, command, env=env, cwd=str(BASE_DIR))
    manager.loop()
    stopped_by_signal = manager.returncode in {130, 143}  # Ctrl-C or SIGTERM: a clean stop
    return 0 if stopped_by_signal else manager.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
