"""`python manage.py rotate_secrets`: re-encrypt every secret at rest under the newest key.

Put the new key first in GATEHOUSE_SECRETS_KEYS (keep the old ones after it), restart,
run this, then drop the old keys. `--generate-key` prints a new key and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.apps import apps
from django.core.management.base import BaseCommand, CommandParser
from django.db import models, transaction

from vault import secrets
from vault.fields import EncryptedTextField

BATCH = 500


def encrypted_fields() -> Iterator[tuple[type[models.Model], EncryptedTextField]]:
    """Yield (model, field) for every encrypted column of every installed model (concrete ones, each once)."""
    for model in apps.get_models():
        if model._meta.proxy or not model._meta.managed:
            continue
        for field in model._meta.local_concrete_fields:
            if isinstance(field, EncryptedTextField):
                yield model, field


def rotate_column(model: type[models.Model], field: EncryptedTextField) -> int:
    """Re-encrypt one column under the newest key; return how many values were rewritten.

    Each batch's rows are locked while rewritten, so a secret changed meanwhile is not overwritten with its old value.
    """
    rows = model._base_manager.exclude(**{f"{field.name}__isnull": True})
    pks = list(rows.values_list("pk", flat=True))
    rewritten = 0
    for start in range(0, len(pks), BATCH):
        with transaction.atomic():
            locked = model._base_manager.select_for_update().filter(pk__in=pks[start : start + BATCH])
            for pk, plaintext in locked.values_list("pk", field.name):
                if plaintext:
                    # update() encrypts under the newest key and leaves auto_now stamps alone: nothing else changed.
                    model._base_manager.filter(pk=pk).update(**{field.name: plaintext})
                    rewritten += 1
    return rewritten


class Command(BaseCommand):
    help = "Re-encrypt every secret stored at rest with the newest key in GATEHOUSE_SECRETS_KEYS."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--generate-key", action="store_true", help="print a new key and change nothing")

    def handle(self, *args: str, **options: object) -> None:
        if options["generate_key"]:
            self.stdout.write(secrets.generate_key())
            return
        total = 0
        for model, field in encrypted_fields():
            count = rotate_column(model, field)
            total += count
            self.stdout.write(f"{model._meta.label}.{field.name}: {count} re-encrypted")
        self.stdout.write(f"{total} secrets re-encrypted under the newest key")
