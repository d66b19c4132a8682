"""Checkpoints signed with Ed25519, checked with the public key alone; an export an auditor verifies without Gatehouse.

audit_verify runs as its own process holding another SECRET_KEY and another private
key than the one that signed: only the public key it is given can make a checkpoint
pass. docs/verify_export.py runs with `python -I` from an empty folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from audit.chain import record_alone
from audit.checkpoints import make_checkpoint
from audit.models import ActorKind
from audit.sequencer import seal_all
from tests.processes import BASE_DIR, session_database_url
from vault import signing

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = BASE_DIR / "docs" / "verify_export.py"


@pytest.fixture
def public_pem(tmp_path: Path, settings: Any) -> Path:
    """Sign with a key of this test's own; return its public key, as an auditor would be given it."""
    _, key = signing.write_new_key(tmp_path / "signer.pem")
    settings.GATEHOUSE_SIGNING_KEYS = str(tmp_path / "signer.pem")
    path = tmp_path / "gatehouse.pub.pem"
    path.write_text(key.public_pem())
    return path


def write_events(count: int) -> None:
    for n in range(count):
        record_alone("test.event", actor=(ActorKind.SYSTEM, "test"), data={"n": n, "text": "ação ✓", "x": [1.5, 1e16]})
    seal_all()  # as the sequencer does within a second: checkpoints sign the sealed head


def checkpoint_file(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoints.txt"
    call_command("audit_checkpoint", out=str(path))
    return path


def audit_verify(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run audit_verify as its own process: another SECRET_KEY, and a private key that did not sign."""
    if not (tmp_path / "not-the-signer.pem").exists():
        signing.write_new_key(tmp_path / "not-the-signer.pem")
    env = {
        **os.environ,
        "DATABASE_URL": session_database_url(),
        "SECRET_KEY": "a-secret-key-the-signer-never-had-0123456789abcdef",
        "GATEHOUSE_SIGNING_KEYS": str(tmp_path / "not-the-signer.pem"),
    }
    command = [sys.executable, str(BASE_DIR / "manage.py"), "audit_verify", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_a_checkpoint_verifies_with_the_public_key_alone(tmp_path: Path, public_pem: Path) -> None:
    write_events(4)
    path = checkpoint_file(tmp_path)

    result = audit_verify(tmp_path, "--checkpoints", str(path), "--public-key", str(public_pem))

    assert result.returncode == 0, result.stderr
    assert "audit chain intact: 4 events" in result.stdout


def test_a_checkpoint_verifies_with_the_jwks_url(tmp_path: Path, public_pem: Path, live_server: Any) -> None:
    write_events(2)
    path = checkpoint_file(tmp_path)

    result = audit_verify(tmp_path, "--checkpoints", str(path), "--jwks", f"{live_server.url}/.well-known/jwks.json")

    assert result.returncode == 0, result.stderr


def test_a_checkpoint_signed_by_another_key_is_refused(tmp_path: Path, public_pem: Path, settings: Any) -> None:
    write_events(2)
    signing.write_new_key(tmp_path / "intruder.pem")
    settings.GATEHOUSE_SIGNING_KEYS = str(tmp_path / "intruder.pem")
    path = checkpoint_file(tmp_path)

    result = audit_verify(tmp_path, "--checkpoints", str(path), "--public-key", str(public_pem))

    assert result.returncode != 0
    intruder = signing.load(tmp_path / "intruder.pem").active.kid
    assert f"was signed by key {intruder}, which is not among the public keys given" in result.stderr


def test_a_checkpoint_with_an_altered_head_is_refused(tmp_path: Path, public_pem: Path) -> None:
    write_events(3)
    checkpoint = json.loads(make_checkpoint() or "")
    checkpoint["hash"] = "0" * 64
    path = tmp_path / "checkpoints.txt"
    path.write_text(json.dumps(checkpoint) + "\n")

    result = audit_verify(tmp_path, "--checkpoints", str(path), "--public-key", str(public_pem))

    assert result.returncode != 0
    assert "checkpoint 1 has a bad signature" in result.stderr


def test_secret_key_rotation_leaves_checkpoints_verifiable(tmp_path: Path, public_pem: Path, settings: Any) -> None:
    write_events(2)
    path = checkpoint_file(tmp_path)
    settings.SECRET_KEY = "the-next-secret-key-after-rotation-0123456789abcdef"
    call_command("audit_checkpoint", out=str(path))  # a second checkpoint, made after the rotation

    result = audit_verify(tmp_path, "--checkpoints", str(path), "--public-key", str(public_pem))

    assert result.returncode == 0, result.stderr


def test_unusable_public_keys_are_refused_with_the_reason(tmp_path: Path, public_pem: Path, live_server: Any) -> None:
    write_events(1)
    path = checkpoint_file(tmp_path)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key\n")

    bad_pem = audit_verify(tmp_path, "--checkpoints", str(path), "--public-key", str(garbage))
    no_jwks = audit_verify(tmp_path, "--checkpoints", str(path), "--jwks", f"{live_server.url}/healthz")

    assert bad_pem.returncode != 0 and f"{garbage}: not a PEM public key" in bad_pem.stderr
    assert no_jwks.returncode != 0 and "the JWK Set has no usable key" in no_jwks.stderr


def run_script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the auditor's script as its own process: `-I`, an empty folder, nothing of Gatehouse's environment."""
    folder = tmp_path / "auditor"
    folder.mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
    command = [sys.executable, "-I", str(SCRIPT), *args]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_an_export_and_its_checkpoint_verify_with_the_standalone_script(tmp_path: Path, public_pem: Path) -> None:
    write_events(5)
    checkpoints = checkpoint_file(tmp_path)
    export = tmp_path / "audit.jsonl"
    call_command("audit_export", out=str(export))

    result = run_script(tmp_path, str(export), "--checkpoints", str(checkpoints), "--public-key", str(public_pem))

    assert result.returncode == 0, result.stderr
    assert "export intact: 5 events" in result.stdout
    assert "event #5 has the signed hash" in result.stdout
    assert len(export.read_text().splitlines()) == 5


def test_the_script_refuses_an_altered_or_cut_export_and_a_foreign_checkpoint(
    tmp_path: Path, public_pem: Path, settings: Any
) -> None:
    write_events(4)
    checkpoints = checkpoint_file(tmp_path)
    export = tmp_path / "audit.jsonl"
    call_command("audit_export", out=str(export))
    lines = export.read_text().splitlines()
    altered, cut = tmp_path / "altered.jsonl", tmp_path / "cut.jsonl"
    altered.write_text("\n".join([*lines[:2], lines[2].replace('"n":2', '"n":9'), *lines[3:]]) + "\n")
    cut.write_text("\n".join(lines[:3]) + "\n")
    signing.write_new_key(tmp_path / "other.pem")
    other_public = tmp_path / "other.pub.pem"
    other_public.write_text(signing.load(tmp_path / "other.pem").active.public_pem())
    keys = ("--checkpoints", str(checkpoints))

    assert (
        "event #3: its content does not match its hash"
        in run_script(tmp_path, str(altered), *keys, "--public-key", str(public_pem)).stderr
    )
    assert (
        "saw event #4, but the export ends at #3"
        in run_script(tmp_path, str(cut), *keys, "--public-key", str(public_pem)).stderr
    )
    assert "not one given" in run_script(tmp_path, str(export), *keys, "--public-key", str(other_public)).stderr


def test_a_rewritten_and_rehashed_export_does_not_match_its_checkpoint(tmp_path: Path, public_pem: Path) -> None:
    # An operator rewrites an event and recomputes the chain after it: the export verifies as a chain,
    # but the checkpoint kept elsewhere does not match it any more.
    write_events(3)
    checkpoints = checkpoint_file(tmp_path)
    export = tmp_path / "audit.jsonl"
    call_command("audit_export", out=str(export))
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    lines[2]["data"]["n"] = 99
    rehashed = _rehash(lines)
    forged = tmp_path / "forged.jsonl"
    forged.write_text("\n".join(json.dumps(line) for line in rehashed) + "\n")

    result = run_script(tmp_path, str(forged), "--checkpoints", str(checkpoints), "--public-key", str(public_pem))

    assert result.returncode == 1
    assert "event #3 no longer has the hash it had" in result.stderr


def _rehash(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from audit.hashing import GENESIS_HASH, content_digest, sealed_hash

    prev = GENESIS_HASH
    for event in events:
        content = {key: value for key, value in event.items() if key not in ("prev_hash", "hash", "digest", "seq")}
        event["digest"] = content_digest(content)
        event["prev_hash"], event["hash"] = prev, sealed_hash(prev, event["seq"], event["digest"])
        prev = event["hash"]
    return events
