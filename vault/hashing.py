"""A keyed hash (HMAC-SHA256) for values that must be compared but never stored: sensitive tool arguments.

A plain SHA-256 of a short secret (a PIN, a card's CVV) is reversed by trying every
value; an HMAC is not, without its key. The key is a secret of its own, kept in the
vault (encrypted at rest, made on first use), apart from SECRET_KEY and from the
Fernet keys: rotating either leaves every stored hash comparable.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets as random

from vault.models import Secret

HASH_KEY_NAME = "argument-hash-key"


def keyed_hash(data: bytes) -> str:
    """Return the HMAC-SHA256 (hex) of `data` under the vault's hash key."""
    return hmac.new(hash_key(), data, hashlib.sha256).hexdigest()


def hash_key() -> bytes:
    """Return the hash key, made on first use (concurrent first uses agree: the name is unique).

    Read each time rather than cached: it is one indexed row, and a process never holds a key another has replaced.
    """
    secret, _ = Secret.objects.get_or_create(
        name=HASH_KEY_NAME,
        defaults={"purpose": "key of the keyed hashes of sensitive arguments", "value": random.token_urlsafe(32)},
    )
    return str(secret.value).encode()
