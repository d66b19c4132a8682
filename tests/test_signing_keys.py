"""Signing keys: kids, directories and rotation, refusals with a reason, processes that will not start without one."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tests.processes import BASE_DIR
from vault import signing


def test_a_kid_is_the_rfc_7638_thumbprint() -> None:
    # RFC 8037, appendix A.3: the thumbprint of the example Ed25519 public key.
    x = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
    public = Ed25519PublicKey.from_public_bytes(base64.urlsafe_b64decode(x + "="))

    assert signing.kid_of(public) == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


def test_in_a_directory_the_newest_key_signs_and_the_older_ones_stay_published(tmp_path: Path, settings: Any) -> None:
    _, older = signing.write_new_key(tmp_path / "a-older.pem")
    os.utime(tmp_path / "a-older.pem", (time.time() - 60, time.time() - 60))
    _, newer = signing.write_new_key(tmp_path / "b-newer.pem")
    settings.GATEHOUSE_SIGNING_KEYS = str(tmp_path)

    keys = signing.keyring()

    assert keys.active.kid == newer.kid
    assert [key.kid for key in keys.keys] == [newer.kid, older.kid]
    assert signing.sign(b"m")[0] == newer.kid


def test_a_key_added_or_removed_is_seen_without_a_restart(tmp_path: Path, settings: Any) -> None:
    _, first = signing.write_new_key(tmp_path / "first.pem")
    os.utime(tmp_path / "first.pem", (time.time() - 60, time.time() - 60))
    settings.GATEHOUSE_SIGNING_KEYS = str(tmp_path)
    assert signing.keyring().active.kid == first.kid

    _, second = signing.write_new_key(tmp_path / "second.pem")
    assert [key.kid for key in signing.keyring().keys] == [second.kid, first.kid]

    (tmp_path / "first.pem").unlink()
    assert [key.kid for key in signing.keyring().keys] == [second.kid]


def rsa_pem() -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"not a key at all\n", "not an unencrypted PKCS#8 PEM private key"),
        (
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            "not an unencrypted PKCS#8 PEM private key",
        ),
        (b"", "not an unencrypted PKCS#8 PEM private key"),
        (None, "not an Ed25519 key"),
    ],
    ids=["garbage", "truncated", "empty", "rsa"],
)
def test_a_malformed_key_file_is_refused_naming_the_file(tmp_path: Path, content: bytes | None, says: str) -> None:
    path = tmp_path / "key.pem"
    path.write_bytes(rsa_pem() if content is None else content)

    with pytest.raises(signing.SigningKeyError) as refused:
        signing.load(path)

    assert str(path) in str(refused.value)
    assert says in str(refused.value)


def test_an_empty_directory_or_a_missing_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(signing.SigningKeyError, match=r"no \*\.pem key file"):
        signing.load(tmp_path)
    with pytest.raises(signing.SigningKeyError, match="no such file or directory"):
        signing.load(tmp_path / "missing")


def test_a_jwk_set_with_no_usable_key_is_refused() -> None:
    x25519 = {"kty": "OKP", "crv": "X25519", "x": "hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo", "kid": "k"}
    for document in ({"keys": []}, {"keys": [x25519]}, {"nothing": 1}, ["not", "a", "set"]):
        with pytest.raises(signing.SigningKeyError, match="no usable key"):
            signing.public_keys_from_jwks(document, "the set")


def manage(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `manage.py` as its own process, with the test environment but these variables."""
    environment = {key: value for key, value in os.environ.items() if key != "GATEHOUSE_SIGNING_KEYS"}
    environment.update(env, GATEHOUSE_VAR_DIR=str(tmp_path))
    command = [sys.executable, str(BASE_DIR / "manage.py"), *args]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120, check=False)


def last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def test_without_a_key_and_with_debug_off_every_process_refuses_to_start(tmp_path: Path) -> None:
    environment = {key: value for key, value in os.environ.items() if key != "GATEHOUSE_SIGNING_KEYS"}
    starts = {
        "command": [sys.executable, "manage.py", "check"],
        "web": [sys.executable, "-c", "from config.asgi import application"],
        "worker": [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo"],
        "beat": [sys.executable, "-m", "celery", "-A", "config", "beat", "--schedule", str(tmp_path / "beat")],
    }
    for name, command in starts.items():
        result = subprocess.run(
            command, cwd=BASE_DIR, env=environment, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode != 0, name
        assert "GATEHOUSE_SIGNING_KEYS must name an Ed25519 key file or directory when DEBUG is off" in last_line(
            result.stderr
        ), (name, result.stderr[-2000:])


def test_a_malformed_key_file_stops_a_process_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")

    result = manage("check", tmp_path=tmp_path, GATEHOUSE_SIGNING_KEYS=str(bad))

    assert result.returncode != 0
    assert f"{bad}: not an unencrypted PKCS#8 PEM private key" in last_line(result.stderr)


def test_signing_key_generate_runs_without_a_key_and_makes_one_processes_start_with(tmp_path: Path) -> None:
    keys = tmp_path / "signing-keys"

    generated = manage("signing_key", "generate", "--out", f"{keys}/", tmp_path=tmp_path)
    shown = manage("signing_key", "show", tmp_path=tmp_path, GATEHOUSE_SIGNING_KEYS=str(keys))
    checked = manage("check", tmp_path=tmp_path, GATEHOUSE_SIGNING_KEYS=str(keys))

    assert generated.returncode == 0, generated.stderr
    [written] = keys.glob("*.pem")
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    kid = signing.load(written).active.kid
    assert kid in generated.stdout
    assert shown.returncode == 0 and f'"kid": "{kid}"' in shown.stdout
    assert '"d"' not in shown.stdout  # public halves only
    assert checked.returncode == 0, checked.stderr


def test_generate_never_overwrites_a_key(tmp_path: Path) -> None:
    path = tmp_path / "key.pem"
    signing.write_new_key(path)
    before = path.read_bytes()

    result = manage("signing_key", "generate", "--out", str(path), tmp_path=tmp_path)

    assert result.returncode != 0
    assert "never overwritten" in result.stderr
    assert path.read_bytes() == before


def test_with_debug_on_and_no_key_a_process_signs_with_an_ephemeral_key_and_says_so(tmp_path: Path) -> None:
    result = manage("check", tmp_path=tmp_path, DEBUG="1")

    assert result.returncode == 0, result.stderr
    assert "signing with an ephemeral key" in result.stderr


def test_make_demo_makes_a_signing_key_on_first_run_and_keeps_it(tmp_path: Path) -> None:
    from demo.run import demo_signing_keys

    first = demo_signing_keys(tmp_path)
    again = demo_signing_keys(tmp_path)

    assert first == again == tmp_path / "signing-keys"
    assert len(list(first.glob("*.pem"))) == 1
    assert signing.load(first).active.kid == signing.load(again).active.kid
