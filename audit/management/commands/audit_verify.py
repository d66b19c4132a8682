"""Walk the audit hash chain (its sealed events); exit 0 if intact, 1 naming the first bad event.

Also says how many events wait to be sealed: they are in the log, but not in the
chain until the sequencer (`audit_sequencer`) seals them.

With `--checkpoints FILE`, also check each signed checkpoint against the stored
chain, with public keys only: `--jwks URL` (a Gatehouse's /.well-known/jwks.json),
`--public-key PEM`, or else the public halves of this deployment's keys. Neither
SECRET_KEY nor a private key takes part in the check.
"""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.chain import first_break
from audit.checkpoints import checkpoint_problems
from audit.models import Event
from audit.store import unsealed_count
from audit.typealiases import OptionValue
from vault import signing


class Command(BaseCommand):
    help = "Verify the audit log's hash chain (and, optionally, signed checkpoints). Exit 0 means intact."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--checkpoints", help="A file of signed checkpoints written by audit_checkpoint.")
        keys = parser.add_mutually_exclusive_group()
        keys.add_argument("--jwks", help="Check checkpoints with the public keys of this JWK Set URL.")
        keys.add_argument("--public-key", help="Check checkpoints with this Ed25519 public key (PEM file).")

    def handle(self, *args: str, **options: OptionValue) -> None:
        started = time.perf_counter()
        count = Event.objects.filter(seq__isnull=False).count()
        waiting = unsealed_count()
        # A million events take seconds: say what is being walked before the walk starts.
        self.stdout.write(f"Verifying the audit chain: {count:,} sealed events ({waiting:,} waiting to be sealed)…")
        broken = first_break()
        if broken is not None:
            raise CommandError(f"audit chain broken at event #{broken.seq}: {broken.reason}")
        if options["checkpoints"]:
            keys = public_keys(options["jwks"], options["public_key"])
            with open(options["checkpoints"]) as handle:
                problems = checkpoint_problems(handle, keys)
            if problems:
                raise CommandError("audit checkpoints do not match: " + "; ".join(problems))
        elapsed = time.perf_counter() - started
        rate = f", {count / elapsed:,.0f} events/s" if elapsed and count else ""
        self.stdout.write(
            self.style.SUCCESS(
                f"audit chain intact: {count} events in {elapsed:.2f} s{rate}; {waiting} waiting to be sealed"
            )
        )


def public_keys(jwks_url: str | None, pem_path: str | None) -> signing.PublicKeys:
    """Return the public keys checkpoints are checked with; refuse unusable ones with the reason."""
    try:
        if jwks_url:
            return signing.fetch_jwks(jwks_url)
        if pem_path:
            with open(pem_path, "rb") as handle:
                return signing.public_key_from_pem(handle.read(), pem_path)
        return signing.keyring().public_keys()
    except (signing.SigningKeyError, OSError) as exc:
        raise CommandError(f"no public key to check checkpoints with: {exc}") from None
