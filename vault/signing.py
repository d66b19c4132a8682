"""Signing keys: the Ed25519 key pairs credentials and audit checkpoints are signed with.

Anyone can check what Gatehouse signed with its public keys alone (served at
`/.well-known/jwks.json`); only the private key can sign, and it is not SECRET_KEY,
so a downstream service or an auditor holds nothing that could mint a credential
or forge a checkpoint.

`GATEHOUSE_SIGNING_KEYS` names a PKCS#8 PEM file, or a directory of them: there the
newest file (by modification time, then name) is the active key and the older ones
stay published, so what they signed still verifies while it may be presented. A key
is named by its RFC 7638 JWK thumbprint (its `kid`). The key set is read again when
the file or directory changes, so adding a key (rotation) or removing one (revocation)
needs no restart. With `DEBUG` on and no key set, a process makes an ephemeral key and
says so; with `DEBUG` off, it refuses to start (`vault.apps`).

This module imports no other Gatehouse app.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

log = logging.getLogger(__name__)

ALGORITHM = "EdDSA"  # the JOSE name of Ed25519 signatures (RFC 8037)
KEY_SUFFIX = ".pem"
SETTING = "GATEHOUSE_SIGNING_KEYS"
GENERATE_HINT = "python manage.py signing_key generate --out var/signing-keys/"

JWK = dict[str, str]


class SigningKeyError(ImproperlyConfigured):
    """The signing keys cannot be used; the message says which file and why, in one line."""


@dataclass(frozen=True)
class SigningKey:
    """One Ed25519 key pair and its `kid`."""

    kid: str
    private: Ed25519PrivateKey
    source: str  # the file it was read from, or "ephemeral"

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    def jwk(self) -> JWK:
        """Return the public key as a JWK (RFC 8037), with its kid, algorithm and use."""
        return {**_thumbprint_members(self.public), "kid": self.kid, "alg": ALGORITHM, "use": "sig"}

    def public_pem(self) -> str:
        """Return the public key as a SubjectPublicKeyInfo PEM (what `--public-key` takes)."""
        return self.public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode()


@dataclass(frozen=True)
class Keyring:
    """The active key (it signs) and every published key, newest first (they verify)."""

    keys: tuple[SigningKey, ...]
    ephemeral: bool = False

    @property
    def active(self) -> SigningKey:
        return self.keys[0]

    def jwks(self) -> dict[str, list[JWK]]:
        """Return the JWK Set of the public keys: what `/.well-known/jwks.json` serves."""
        return {"keys": [key.jwk() for key in self.keys]}

    def public_keys(self) -> dict[str, Ed25519PublicKey]:
        """Return {kid: public key} of every published key."""
        return {key.kid: key.public for key in self.keys}


def b64url(data: bytes) -> str:
    """Return unpadded base64url (as JOSE writes binary values)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _thumbprint_members(public: Ed25519PublicKey) -> JWK:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {"crv": "Ed25519", "kty": "OKP", "x": b64url(raw)}


def kid_of(public: Ed25519PublicKey) -> str:
    """Return the RFC 7638 JWK thumbprint of a public key: SHA-256 over its required members, sorted."""
    members = json.dumps(_thumbprint_members(public), sort_keys=True, separators=(",", ":"))
    return b64url(hashlib.sha256(members.encode()).digest())


def key_from_pem(data: bytes, source: str) -> SigningKey:
    """Return the key of a PKCS#8 PEM Ed25519 private key; raise SigningKeyError naming `source` and the problem."""
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SigningKeyError(f"{source}: not an unencrypted PKCS#8 PEM private key ({reason})") from None
    if not isinstance(private, Ed25519PrivateKey):
        raise SigningKeyError(f"{source}: a {type(private).__name__}, not an Ed25519 key")
    return SigningKey(kid=kid_of(private.public_key()), private=private, source=source)


def load(path: Path) -> Keyring:
    """Return the keys of a PEM file, or of every `*.pem` file of a directory (newest first)."""
    if path.is_dir():
        files = sorted(path.glob(f"*{KEY_SUFFIX}"), key=lambda file: (file.stat().st_mtime_ns, file.name), reverse=True)
        if not files:
            raise SigningKeyError(f"{SETTING}={path}: no *{KEY_SUFFIX} key file in this directory ({GENERATE_HINT})")
    elif path.is_file():
        files = [path]
    else:
        raise SigningKeyError(f"{SETTING}={path}: no such file or directory ({GENERATE_HINT})")
    return Keyring(tuple(key_from_pem(file.read_bytes(), str(file)) for file in files))


def keyring() -> Keyring:
    """Return this process's keys, read again whenever the configured file or directory changed."""
    configured = settings.GATEHOUSE_SIGNING_KEYS
    if not configured:
        if not settings.DEBUG:
            raise SigningKeyError(
                f"{SETTING} must name an Ed25519 key file or directory when DEBUG is off ({GENERATE_HINT})"
            )
        return _ephemeral()
    path = Path(configured)
    return _load(path, _stamp(path))


def _stamp(path: Path) -> tuple[int, ...]:
    """Return what changes when a key is added, removed or replaced (a directory's and its files' mtimes)."""
    try:
        if path.is_dir():
            return (path.stat().st_mtime_ns, *(file.stat().st_mtime_ns for file in path.glob(f"*{KEY_SUFFIX}")))
        return (path.stat().st_mtime_ns,)
    except OSError:
        return ()


@lru_cache(maxsize=4)
def _load(path: Path, stamp: tuple[int, ...]) -> Keyring:
    return load(path)


@lru_cache(maxsize=1)
def _ephemeral() -> Keyring:
    private = Ed25519PrivateKey.generate()
    log.warning(
        "DEBUG is on and %s is not set: signing with an ephemeral key, so credentials and checkpoints signed by "
        "this process will not verify in another process or after a restart (%s)",
        SETTING,
        GENERATE_HINT,
    )
    return Keyring((SigningKey(kid=kid_of(private.public_key()), private=private, source="ephemeral"),), True)


def check_at_startup() -> None:
    """Load the keys now, so a process without usable keys refuses to start rather than fail its first call."""
    keyring()


def sign(message: bytes) -> tuple[str, bytes]:
    """Return (kid, Ed25519 signature of `message`) by the active key."""
    key = keyring().active
    return key.kid, key.private.sign(message)


def new_key_pem() -> bytes:
    """Return a fresh Ed25519 private key as unencrypted PKCS#8 PEM."""
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def write_new_key(target: Path | str) -> tuple[Path, SigningKey]:
    """Write a new key to `target` (a file, or a directory — existing or ending in "/" — to add a timestamped file to).

    Return where it went and the key. The file is created readable by its owner only, and never overwrites one.
    It appears whole: written aside (a name the key glob skips), then linked in place, so a running process
    that reads the directory meanwhile never meets half a key.
    """
    out = Path(target)
    if out.is_dir() or str(target).endswith(("/", os.sep)):
        out.mkdir(parents=True, exist_ok=True)
        out = out / f"signing-key-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}{KEY_SUFFIX}"
    out.parent.mkdir(parents=True, exist_ok=True)
    pem = new_key_pem()
    aside = out.with_name(f".{out.name}.{os.getpid()}.partial")
    descriptor = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(pem)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(aside, out)  # fails if `out` exists: a key is never overwritten
    finally:
        aside.unlink(missing_ok=True)
    return out, key_from_pem(pem, str(out))


# ------------------------------------------------------------------ public keys alone (for whoever verifies)

PublicKeys = dict[str, Ed25519PublicKey]


def public_key_from_pem(data: bytes, source: str) -> PublicKeys:
    """Return {kid: key} of a SubjectPublicKeyInfo PEM Ed25519 public key; refuse anything else, saying why."""
    try:
        public = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SigningKeyError(f"{source}: not a PEM public key ({reason})") from None
    if not isinstance(public, Ed25519PublicKey):
        raise SigningKeyError(f"{source}: a {type(public).__name__}, not an Ed25519 public key")
    return {kid_of(public): public}


def public_keys_from_jwks(document: object, source: str) -> PublicKeys:
    """Return {kid: key} of the Ed25519 signing keys of a JWK Set; refuse a set with none usable."""
    entries = document.get("keys") if isinstance(document, dict) else None
    keys: PublicKeys = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or (entry.get("kty"), entry.get("crv")) != ("OKP", "Ed25519"):
            continue
        if entry.get("use", "sig") != "sig" or not isinstance(entry.get("x"), str):
            continue
        try:
            raw = base64.urlsafe_b64decode(entry["x"] + "=" * (-len(entry["x"]) % 4))
            public = Ed25519PublicKey.from_public_bytes(raw)
        except ValueError:
            continue
        keys[str(entry.get("kid") or kid_of(public))] = public
    if not keys:
        raise SigningKeyError(f"{source}: the JWK Set has no usable key (an Ed25519 signing key, kty OKP)")
    return keys


def fetch_jwks(url: str, timeout: float = 10) -> PublicKeys:
    """Return the keys of the JWK Set at `url` (http or https); refuse an unreachable or unusable one."""
    if not url.startswith(("http://", "https://")):
        raise SigningKeyError(f"{url}: a JWKS URL must be http or https")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 — the scheme is checked above
            document = json.load(response)
    except (OSError, ValueError) as exc:
        raise SigningKeyError(f"{url}: the JWK Set cannot be read ({exc})") from None
    return public_keys_from_jwks(document, url)


def verifies(keys: PublicKeys, kid: str, message: bytes, signature: bytes) -> bool:
    """Return whether `signature` is the Ed25519 signature of `message` by the key `kid` among `keys`."""
    public = keys.get(kid)
    if public is None:
        return False
    try:
        public.verify(signature, message)
    except InvalidSignature:
        return False
    return True
