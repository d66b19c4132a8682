"""A model field that keeps its value encrypted at rest and gives plaintext in Python.

Declare a secret as `token = EncryptedTextField(blank=True)`: the column holds a Fernet
token (vault.secrets), the attribute holds the plaintext, `rotate_secrets` re-encrypts
every such column with the newest key. In a form it is write-only (vault.forms): the
value is never rendered, and a blank submission keeps the stored secret.
"""

from __future__ import annotations

from django import forms
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.expressions import Expression
from django.db.models.lookups import Lookup

from vault import forms as vault_forms
from vault import secrets


class EncryptedTextField(models.TextField):  # type: ignore[type-arg]
    """Text stored encrypted under GATEHOUSE_SECRETS_KEYS; plaintext in Python, ciphertext in the database.

    Only `isnull` lookups make sense: each encryption is randomised, so equal plaintexts differ in the column.
    """

    description = "Text encrypted at rest"

    def from_db_value(self, value: str | None, expression: Expression, connection: BaseDatabaseWrapper) -> str | None:
        """Return the plaintext of a stored token (an empty column stays empty)."""
        if not value:
            return value
        return secrets.decrypt(value)

    def get_prep_value(self, value: object) -> str | None:
        """Return the token to store for a plaintext value (an empty value is stored empty: nothing to hide)."""
        prepared = super().get_prep_value(value)
        if prepared is None:
            return None
        plaintext = str(prepared)
        return secrets.encrypt(plaintext) if plaintext else ""

    def get_lookup(self, lookup_name: str) -> type[Lookup[object]] | None:
        """Allow `isnull` only: comparing plaintext with a randomised ciphertext could never match."""
        if lookup_name != "isnull":
            return None
        return super().get_lookup(lookup_name)

    def formfield(
        self,
        form_class: type[forms.Field] | None = None,
        choices_form_class: type[forms.ChoiceField] | None = None,
        **kwargs: object,
    ) -> forms.Field | None:
        """Return a write-only form field: it never renders the stored value.

        The widget is forced over any given (the admin offers a textarea for every TextField, which would show it).
        Not required: blank keeps the stored secret.
        """
        forced = {"widget": vault_forms.SecretInput, "required": False, "strip": False}
        return super().formfield(form_class=vault_forms.SecretField, choices_form_class=None, **{**kwargs, **forced})

    def save_form_data(self, instance: models.Model, data: object) -> None:
        """Keep the stored secret when the form left the field blank (it never showed it, so blank means unchanged)."""
        if data:
            super().save_form_data(instance, data)

    def value_to_string(self, obj: models.Model) -> str:
        """Serialise (dumpdata) as the mask: a fixture or dump never carries the secret."""
        return secrets.mask(self.value_from_object(obj))
