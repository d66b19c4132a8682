from __future__ import annotations

import sys

from django.apps import AppConfig


class VaultConfig(AppConfig):
    """Keys and secrets: the signing keys credentials and checkpoints are signed with, and secrets kept encrypted."""

    name = "vault"

    def ready(self) -> None:
        """Refuse to start without usable keys: every process (web, worker, beat, command) sets up the apps."""
        from vault import secrets, signing

        if sys.argv[1:2] == ["signing_key"]:  # the command that makes the signing key must run before one exists
            return
        secrets.check_configuration()
        signing.check_at_startup()
