"""Signed checkpoints of the chain's head, kept outside the database and checked with public keys alone.

A checkpoint says "event #N had hash H at time T" of the sealed head, signed with Gatehouse's active
Ed25519 key (`vault.signing`). Kept elsewhere (a file shipped to write-once
storage), it reveals a log whose tail was cut off or rewritten, which the chain
alone cannot: a shortened or recomputed chain still verifies. Anyone holding the
public key (`/.well-known/jwks.json`) can check one; nobody without the private key
can make one, SECRET_KEY included.

One checkpoint is one line, the canonical JSON (audit/canonical.py, RFC 8785) of

    {"seq": N, "hash": H, "at": T, "kid": K, "signature": S}

where S is the unpadded base64url Ed25519 signature, by the key named K (its RFC
7638 thumbprint), of the canonical JSON of {"seq": N, "hash": H, "at": T}.
docs/audit.md shows an auditor's check, and docs/verify_export.py is one.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass

from django.utils import timezone

from audit.canonical import canonical_json
from audit.models import Event
from vault import signing


@dataclass(frozen=True)
class Checkpoint:
    """What a genuine checkpoint says."""

    seq: int
    hash: str
    at: str
    kid: str


class CheckpointRefused(Exception):
    """A line is not a checkpoint signed by one of the keys given; the message says why."""


def signed_text(seq: int, head: str, at: str) -> bytes:
    """Return the bytes a checkpoint's signature covers: the canonical JSON of {seq, hash, at}."""
    return canonical_json({"seq": seq, "hash": head, "at": at}).encode()


def make_checkpoint() -> str | None:
    """Return a signed checkpoint (one line) of the sealed head, or None if no event is sealed yet."""
    head = Event.objects.filter(seq__isnull=False).order_by("-seq").values_list("seq", "hash").first()
    seq, head_hash = head if head is not None else (None, None)
    if seq is None or head_hash is None:
        return None
    at = timezone.now().isoformat()
    kid, signature = signing.sign(signed_text(seq, head_hash, at))
    return canonical_json({"seq": seq, "hash": head_hash, "at": at, "kid": kid, "signature": signing.b64url(signature)})


def read_checkpoint(line: str, keys: signing.PublicKeys) -> Checkpoint:
    """Return what a checkpoint line says if one of `keys` signed it; raise CheckpointRefused otherwise."""
    try:
        content = json.loads(line)
        seq, head, at = int(content["seq"]), str(content["hash"]), str(content["at"])
        kid, encoded = str(content["kid"]), str(content["signature"])
        signature = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (ValueError, TypeError, KeyError, binascii.Error):
        raise CheckpointRefused("is not a checkpoint (a JSON object with seq, hash, at, kid and signature)") from None
    if kid not in keys:
        raise CheckpointRefused(f"was signed by key {kid}, which is not among the public keys given")
    if not signing.verifies(keys, kid, signed_text(seq, head, at), signature):
        raise CheckpointRefused(f"has a bad signature: its content is not what key {kid} signed")
    return Checkpoint(seq=seq, hash=head, at=at, kid=kid)


def checkpoint_problems(lines: Iterable[str], keys: signing.PublicKeys | None = None) -> list[str]:
    """Return what the checkpoints reveal about the stored chain (empty if consistent).

    Checked with `keys`, or else with the public halves of this deployment's keys.
    """
    keys = signing.keyring().public_keys() if keys is None else keys
    problems = []
    last_seq = Event.objects.filter(seq__isnull=False).order_by("-seq").values_list("seq", flat=True).first() or 0
    for number, line in enumerate((line.strip() for line in lines), start=1):
        if not line:
            continue
        try:
            checkpoint = read_checkpoint(line, keys)
        except CheckpointRefused as exc:
            problems.append(f"checkpoint {number} {exc}")
            continue
        if checkpoint.seq > last_seq:
            problems.append(
                f"checkpoint {number} saw event #{checkpoint.seq}, but the log ends at #{last_seq}: "
                "its tail was cut off"
            )
            continue
        stored = Event.objects.filter(seq=checkpoint.seq).values_list("hash", flat=True).first()
        if stored != checkpoint.hash:
            problems.append(f"checkpoint {number}: event #{checkpoint.seq} no longer has the hash it had")
    return problems
