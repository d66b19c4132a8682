"""`python manage.py signing_key generate [--out FILE|DIR/]`: make an Ed25519 signing key; `show`: the keys in use.

Runs before any key exists (vault.apps lets this one command start without one).
Rotation: generate into the key directory (the new file becomes the active key, the
older ones stay published); revocation: delete a file.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from vault import signing


class Command(BaseCommand):
    help = "Generate an Ed25519 signing key (PKCS#8 PEM), or show the keys in use and their kids."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["generate", "show"])
        parser.add_argument(
            "--out",
            help="generate: the file to write, or a directory (ending in /) to add a new key file to; "
            "default: GATEHOUSE_SIGNING_KEYS, else var/signing-keys/",
        )

    def handle(self, *args: str, action: str, out: str | None, **options: object) -> None:
        if action == "show":
            self.show()
            return
        target = out or settings.GATEHOUSE_SIGNING_KEYS or str(settings.VAR_DIR / "signing-keys") + "/"
        try:
            path, key = signing.write_new_key(target)
        except FileExistsError:
            raise CommandError(f"{target} exists: a key file is never overwritten (give a directory)") from None
        self.stdout.write(self.style.SUCCESS(f"wrote {path} (kid {key.kid})"))
        if not settings.GATEHOUSE_SIGNING_KEYS:
            self.stdout.write(f"set GATEHOUSE_SIGNING_KEYS={path.parent if out is None or out.endswith('/') else path}")

    def show(self) -> None:
        """Print the JWK Set in use (public keys only), the active key first."""
        try:
            keys = signing.keyring()
        except signing.SigningKeyError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps(keys.jwks(), indent=2))
