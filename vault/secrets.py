"""Secrets encrypted at rest: Fernet keys from GATEHOUSE_SECRETS_KEYS, newest first.

New writes are encrypted with the newest key; a stored secret is read with whichever
key it was written under, so adding a key in front and running `rotate_secrets` moves
every secret onto it, after which the old key can be dropped. The keys are separate
from SECRET_KEY: whoever holds SECRET_KEY (sessions, CSRF) cannot read secrets, and
rotating SECRET_KEY leaves them readable.
"""

from __future__ import annotations

import logging
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

logger = logging.getLogger(__name__)

ENV_VAR = "GATEHOUSE_SECRETS_KEYS"
MASK = "•••• (set)"
MASK_CHANGED = "•••• (changed)"


class SecretUnreadable(Exception):
    """A stored secret that none of the configured keys decrypts (its key was dropped, or it was altered)."""


def configured_keys() -> tuple[str, ...]:
    """Return the configured keys (settings.GATEHOUSE_SECRETS_KEYS, from the environment), newest first."""
    return tuple(settings.GATEHOUSE_SECRETS_KEYS)


def check_configuration() -> None:
    """Refuse a missing key with DEBUG off, or any malformed key, in one line that names the problem.

    Run when the app registry is ready, so every process (web, worker, beat, commands) refuses to start.
    """
    keys = configured_keys()
    if not keys and not settings.DEBUG:
        raise ImproperlyConfigured(
            f"{ENV_VAR} must be set when DEBUG is off (comma-separated Fernet keys, newest first; make one with: "
            "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
        )
    if not keys:
        logger.warning(
            "%s is not set: secrets are encrypted with an ephemeral key that lives as long as this process "
            "(other processes cannot read them, nor can this one after a restart)",
            ENV_VAR,
        )
    _cipher(keys)


@lru_cache(maxsize=4)
def _cipher(keys: tuple[str, ...]) -> MultiFernet:
    """Return the MultiFernet over `keys` (an ephemeral key if there are none); refuse a malformed key."""
    if not keys:
        return MultiFernet([Fernet(Fernet.generate_key())])
    fernets = []
    for position, key in enumerate(keys, start=1):
        try:
            fernets.append(Fernet(key))
        except (ValueError, TypeError):
            # The key itself is never echoed: it is a secret even when malformed.
            raise ImproperlyConfigured(
                f"{ENV_VAR}: key {position} of {len(keys)} is not a Fernet key "
                "(32 bytes in url-safe base64, 44 characters)"
            ) from None
    return MultiFernet(fernets)


def cipher() -> MultiFernet:
    """Return the cipher for the keys configured now."""
    return _cipher(configured_keys())


def encrypt(plaintext: str) -> str:
    """Return `plaintext` encrypted under the newest key, as text."""
    return cipher().encrypt(plaintext.encode()).decode("ascii")


def decrypt(token: str, ttl: int | None = None) -> str:
    """Return the plaintext of `token`, under whichever configured key (and, given `ttl` seconds, if younger)."""
    try:
        return cipher().decrypt(token.encode("ascii"), ttl=ttl).decode()
    except (InvalidToken, UnicodeEncodeError):
        raise SecretUnreadable(
            f"a stored secret cannot be decrypted with any key in {ENV_VAR} (was its key removed?)"
        ) from None


def reencrypt(token: str) -> str:
    """Return `token` encrypted anew under the newest key (same plaintext)."""
    try:
        return cipher().rotate(token.encode("ascii")).decode("ascii")
    except (InvalidToken, UnicodeEncodeError):
        raise SecretUnreadable(f"a stored secret cannot be decrypted with any key in {ENV_VAR}") from None


def generate_key() -> str:
    """Return a new Fernet key."""
    return Fernet.generate_key().decode("ascii")


def mask(value: str | None) -> str:
    """Return what a person may see of a secret: whether it is set, never its value."""
    return MASK if value else ""
