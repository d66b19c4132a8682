"""Verify a Gatehouse audit export and its signed checkpoints, trusting nothing but a public key.

    pip install cryptography rfc8785
    python verify_export.py audit.jsonl --checkpoints checkpoints.txt --public-key gatehouse.pub.pem
    python verify_export.py audit.jsonl --checkpoints checkpoints.txt --jwks https://gatehouse.example/.well-known/jwks.json

Exit 0 and one line per check when everything holds; exit 1 naming the first problem.
It imports nothing from Gatehouse: the formats it reads are documented in docs/audit.md.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import urllib.request
from collections.abc import Iterable

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

GENESIS = "0" * 64


class Problem(Exception):
    """What does not verify, in one line."""


def canonical(value: object) -> str:
    """RFC 8785 (JCS); an integer no double holds exactly is written in its exact digits."""
    try:
        return rfc8785.dumps(value).decode()
    except rfc8785.IntegerDomainError:
        if isinstance(value, dict):
            items = sorted(value.items(), key=lambda item: item[0].encode("utf-16be"))
            return "{" + ",".join(f"{canonical(key)}:{canonical(item)}" for key, item in items) + "}"
        if isinstance(value, list):
            return "[" + ",".join(canonical(item) for item in value) + "]"
        exact = rfc8785.dumps(float(value)).decode() if abs(value) < 2**1024 else ""
        return exact if exact and int(float(value)) == value else str(value)


def legacy_forms(fields: dict) -> Iterable[str]:
    """The text events written by early versions were hashed in (sorted compact JSON; floats as written)."""
    yield json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def as_floats(value: object) -> object:
        if isinstance(value, dict):
            return {key: as_floats(item) for key, item in value.items()}
        if isinstance(value, list):
            return [as_floats(item) for item in value]
        if isinstance(value, int) and not isinstance(value, bool) and 10**16 <= abs(value) < 2**1024:
            return float(value) if int(float(value)) == value else value
        return value

    yield json.dumps(as_floats(fields), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_gives(event: dict, prev: str, stored_hash: str) -> bool:
    """Whether the event's content gives its hash: sealed form (it carries a digest), else the chained forms."""
    if "digest" in event:
        content = {key: value for key, value in event.items() if key not in ("seq", "digest")}
        digest = hashlib.sha256(canonical(content).encode()).hexdigest()
        sealed = hashlib.sha256(f"{prev}\n{event['seq']}\n{digest}".encode("ascii")).hexdigest()
        return digest == event["digest"] and sealed == stored_hash
    texts = [canonical(event), *legacy_forms(event)]
    return any(hashlib.sha256((prev + text).encode()).hexdigest() == stored_hash for text in texts)


def event_hashes(lines: Iterable[str]) -> Iterable[tuple[int, str]]:
    """Yield (seq, hash) of each event after checking that it chains and that its content gives its hash."""
    expected_seq, prev = 1, GENESIS
    for line in lines:
        event = json.loads(line)
        stored_prev, stored_hash = event.pop("prev_hash"), event.pop("hash")
        if event["seq"] != expected_seq:
            raise Problem(f"event #{expected_seq} is missing (found #{event['seq']})")
        if stored_prev != prev:
            raise Problem(f"event #{expected_seq} does not chain to the event before it")
        if not content_gives(event, prev, stored_hash):
            raise Problem(f"event #{expected_seq}: its content does not match its hash")
        yield expected_seq, stored_hash
        expected_seq, prev = expected_seq + 1, stored_hash


def public_keys(pem_path: str | None, jwks: str | None) -> dict[str, Ed25519PublicKey]:
    """{kid: key} from a PEM public key file, or a JWK Set (a URL or a file)."""
    if pem_path:
        with open(pem_path, "rb") as handle:
            key = serialization.load_pem_public_key(handle.read())
        if not isinstance(key, Ed25519PublicKey):
            raise Problem(f"{pem_path} is not an Ed25519 public key")
        members = {"crv": "Ed25519", "kty": "OKP", "x": b64(key.public_bytes_raw())}
        kid = b64(hashlib.sha256(json.dumps(members, sort_keys=True, separators=(",", ":")).encode()).digest())
        return {kid: key}
    if jwks.startswith(("http://", "https://")):
        with urllib.request.urlopen(jwks, timeout=10) as response:  # noqa: S310 — http(s) only
            document = json.load(response)
    else:
        with open(jwks) as handle:
            document = json.load(handle)
    keys = {
        entry["kid"]: Ed25519PublicKey.from_public_bytes(unb64(entry["x"]))
        for entry in document.get("keys", [])
        if entry.get("kty") == "OKP" and entry.get("crv") == "Ed25519" and "kid" in entry
    }
    if not keys:
        raise Problem(f"{jwks} has no usable key (an Ed25519 key, kty OKP)")
    return keys


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def read_checkpoint(line: str, keys: dict[str, Ed25519PublicKey]) -> tuple[int, str, str]:
    """Return (seq, hash, at) of a checkpoint signed by one of `keys`."""
    checkpoint = json.loads(line)
    signed = canonical({"seq": checkpoint["seq"], "hash": checkpoint["hash"], "at": checkpoint["at"]})
    key = keys.get(checkpoint["kid"])
    if key is None:
        raise Problem(f"checkpoint of #{checkpoint['seq']} is signed by key {checkpoint['kid']}, not one given")
    try:
        key.verify(unb64(checkpoint["signature"]), signed.encode())
    except InvalidSignature:
        raise Problem(f"checkpoint of #{checkpoint['seq']} has a bad signature") from None
    return checkpoint["seq"], checkpoint["hash"], checkpoint["at"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Verify a Gatehouse audit export and its signed checkpoints.")
    parser.add_argument("export", help="the file audit_export wrote (JSON lines)")
    parser.add_argument("--checkpoints", help="the file audit_checkpoint appends to")
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("--public-key", help="Gatehouse's Ed25519 public key (PEM)")
    keys.add_argument("--jwks", help="Gatehouse's JWK Set: its URL (…/.well-known/jwks.json) or a saved copy")
    options = parser.parse_args(argv)
    try:
        checkpoints = []
        if options.checkpoints:
            if not (options.public_key or options.jwks):
                raise Problem("checking checkpoints needs --public-key or --jwks")
            found = public_keys(options.public_key, options.jwks)
            with open(options.checkpoints) as handle:
                checkpoints = [read_checkpoint(line, found) for line in handle if line.strip()]
        wanted = {seq for seq, _, _ in checkpoints}
        seen, last = {}, (0, GENESIS)
        with open(options.export, encoding="utf-8") as handle:
            for seq, head in event_hashes(line for line in handle if line.strip()):
                last = (seq, head)
                if seq in wanted:
                    seen[seq] = head
        print(f"export intact: {last[0]} events, head #{last[0]} {last[1]}")
        for seq, head, at in checkpoints:
            if seq > last[0]:
                raise Problem(f"the checkpoint of {at} saw event #{seq}, but the export ends at #{last[0]}")
            if seen[seq] != head:
                raise Problem(f"the checkpoint of {at}: event #{seq} no longer has the hash it had")
            print(f"checkpoint of {at}: event #{seq} has the signed hash")
    except (Problem, OSError, ValueError, KeyError, TypeError) as exc:
        print(f"NOT VERIFIED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
