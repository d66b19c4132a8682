"""One table of secrets, encrypted at rest: other apps keep a secret by pointing at a row here."""

from __future__ import annotations

from django.db import models

from vault.fields import EncryptedTextField


class Secret(models.Model):
    """A secret value, encrypted under GATEHOUSE_SECRETS_KEYS; `purpose` says what it is for (never the value)."""

    # Set for the few secrets the product itself looks up (a key of its own); other apps point at rows by FK.
    name = models.CharField(max_length=100, unique=True, null=True, blank=True)
    purpose = models.CharField(max_length=200)
    value = EncryptedTextField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"secret {self.pk} ({self.purpose})"
