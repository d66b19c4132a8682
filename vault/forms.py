"""Write-only form pieces for secrets: the stored value is never rendered, only whether one is set."""

from __future__ import annotations

from django import forms

from vault import secrets


class SecretInput(forms.PasswordInput):
    """A password input that never renders a value; its placeholder says whether a secret is stored."""

    def __init__(self, attrs: dict[str, object] | None = None) -> None:
        super().__init__(attrs=attrs, render_value=False)

    def get_context(self, name: str, value: object, attrs: dict[str, object] | None) -> dict[str, object]:
        """Return the widget's context with no value, and a placeholder saying `•••• (set)` or `not set`."""
        context = super().get_context(name, None, attrs)
        widget_attrs = context["widget"]["attrs"]
        widget_attrs["placeholder"] = f"{secrets.MASK} — leave blank to keep" if value else "not set"
        widget_attrs["autocomplete"] = "new-password"  # a browser must not fill in the reviewer's own password
        return context


class SealedHiddenInput(forms.HiddenInput):
    """A hidden input that carries a typed secret to the next step of a form (review, then confirm) sealed.

    The page holds only ciphertext under the secrets key, valid for SEALED_TTL_SECONDS; `unseal` reads it back.
    """

    def format_value(self, value: object) -> str | None:
        """Return the sealed form of a typed secret (nothing typed stays empty)."""
        if value is None or value == "" or str(value).startswith(SEALED_PREFIX):
            return None if value is None else str(value)
        return SEALED_PREFIX + secrets.encrypt(str(value))


SEALED_PREFIX = "sealed:"
SEALED_TTL_SECONDS = 3600


def unseal(value: str) -> str:
    """Return the secret a SealedHiddenInput carried (a value typed afresh is returned as it is)."""
    if not value.startswith(SEALED_PREFIX):
        return value
    try:
        return secrets.decrypt(value.removeprefix(SEALED_PREFIX), ttl=SEALED_TTL_SECONDS)
    except secrets.SecretUnreadable:
        raise forms.ValidationError("This value expired or was altered: type it again.") from None


class SecretField(forms.CharField):
    """A write-only field: blank keeps the stored secret, anything typed replaces it.

    Never rendered: not in its input, and carried to a confirmation step only sealed.
    """

    widget = SecretInput
    hidden_widget = SealedHiddenInput

    def to_python(self, value: object) -> str | None:
        """Return the typed secret, unsealed if it comes from a confirmation step."""
        text = super().to_python(value)
        return unseal(text) if isinstance(text, str) else text

    def has_changed(self, initial: object, data: object) -> bool:
        """Return whether a new secret was typed (blank means unchanged)."""
        return bool(data)
