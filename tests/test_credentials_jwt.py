"""Scoped credentials as EdDSA JWTs, checked by a downstream running as its own process with the JWKS URL alone.

The downstream is demo/verifier.py run with `python -I` from an empty folder and an
environment holding no SECRET_KEY and no Django settings: it cannot import anything
of Gatehouse, and it has nothing but what `/.well-known/jwks.json` publishes.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from django.conf import settings as django_settings

from tests.processes import BASE_DIR, http_server
from toolcatalog.credentials import MAX_TTL_SECONDS, Scope, audience_for, mint
from toolcatalog.models import Tool
from vault import signing

AUDIENCE = "https://refunds.example"
VERIFIER = BASE_DIR / "demo" / "verifier.py"


@pytest.fixture
def key_dir(tmp_path: Path, settings: Any) -> Path:
    """A key directory of one key, the one this process (and the live server's JWKS) signs with."""
    folder = tmp_path / "keys"
    signing.write_new_key(folder / "first.pem")
    settings.GATEHOUSE_SIGNING_KEYS = str(folder)
    return folder


@contextmanager
def downstream(jwks_url: str, folder: Path, *, lifespan: float = 1) -> Iterator[Callable[..., httpx.Response]]:
    """Run the verifier as its own process; yield check(token, operation, resource, route) → its answer."""
    command = [sys.executable, "-I", str(VERIFIER), "--jwks", jwks_url, "--audience", AUDIENCE]
    command += ["--issuer", django_settings.GATEHOUSE_ISSUER, "--lifespan", str(lifespan)]
    # Nothing of Gatehouse's environment: no SECRET_KEY, no settings module, no key file.
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
    process = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = process.stdout.readline() if process.stdout else ""
        assert ready.startswith("listening on "), process.communicate(timeout=5)
        url = ready.split()[-1]

        def check(
            token: str | None, operation: str = "emitir_estorno", resource: str = "PED-1", route: str = "execute"
        ):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            body = {"operation": operation, "resource": resource, "route": route}
            return httpx.post(f"{url}/check", json=body, headers=headers, timeout=10)

        yield check
    finally:
        process.terminate()
        process.wait(timeout=10)


def credential(**overrides: Any) -> str:
    claims = {
        "operation": "emitir_estorno",
        "resource": "PED-1",
        "call_id": "c-1",
        "agent": "support-agent",
        "approval_ref": "decisions:7",
        "audience": AUDIENCE,
        **overrides,
    }
    return mint(**claims)


def altered(token: str) -> str:
    """Return the token with its payload's resource changed and its signature kept."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["resource"] = "PED-2"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


def reason(response: httpx.Response) -> str:
    assert response.status_code == 403, response.text
    return str(response.json()["reason"])


@pytest.fixture
def check(live_server: Any, key_dir: Path, tmp_path: Path) -> Iterator[Callable[..., httpx.Response]]:
    with downstream(f"{live_server.url}/.well-known/jwks.json", tmp_path) as check:
        yield check


def test_the_downstream_accepts_a_fresh_credential_with_its_claims(check: Callable[..., httpx.Response]) -> None:
    response = check(credential())

    assert response.status_code == 200, response.text
    claims = response.json()["claims"]
    assert claims["operation"] == "emitir_estorno"
    assert (claims["resource"], claims["call_id"], claims["agent"]) == ("PED-1", "c-1", "support-agent")
    assert (claims["approval_ref"], claims["scope"]) == ("decisions:7", "execute")


@pytest.mark.parametrize(
    ("token", "request_for", "expected"),
    [
        (lambda: credential(now=time.time() - 120), {}, "expired"),
        (lambda: credential(audience="https://seats.example"), {}, "wrong_audience"),
        (lambda: credential(), {"resource": "PED-2"}, "wrong_resource"),
        (lambda: credential(), {"operation": "hold_seats"}, "wrong_operation"),
        (lambda: credential(scope=Scope.PREVIEW), {"route": "execute"}, "wrong_scope"),
        (lambda: credential(scope=Scope.VERIFY), {"route": "execute"}, "wrong_scope"),
        (lambda: altered(credential()), {}, "bad_signature"),
        (lambda: "not-a-jwt", {}, "invalid"),
        (lambda: None, {}, "missing"),
    ],
    ids=["expired", "other-aud", "other-resource", "other-operation", "preview-used-to-execute",
         "verify-used-to-execute", "altered-payload", "garbage", "absent"],
)  # fmt: skip
def test_the_downstream_refuses_a_credential_that_does_not_fit(
    check: Callable[..., httpx.Response], token: Callable[[], str | None], request_for: dict[str, str], expected: str
) -> None:
    assert reason(check(token(), **request_for)) == expected


def test_a_preview_credential_may_preview_but_not_execute(check: Callable[..., httpx.Response]) -> None:
    preview = credential(scope=Scope.PREVIEW)

    assert check(preview, route="preview").status_code == 200
    assert reason(check(preview, route="execute")) == "wrong_scope"


def test_a_credential_takes_effect_once(check: Callable[..., httpx.Response]) -> None:
    token = credential(jti="call-1/1/execute")

    assert check(token).status_code == 200
    assert reason(check(token)) == "replayed"
    # Another attempt at the same call is another jti.
    assert check(credential(jti="call-1/2/execute")).status_code == 200


def test_a_credential_asked_for_longer_still_lives_sixty_seconds(check: Callable[..., httpx.Response]) -> None:
    asked_for_an_hour = credential(ttl=3600, now=time.time() - MAX_TTL_SECONDS - 5)
    claims = jwt.decode(credential(ttl=3600), options={"verify_signature": False})

    assert claims["exp"] - claims["iat"] == MAX_TTL_SECONDS
    assert reason(check(asked_for_an_hour)) == "expired"


def test_alg_none_and_hs256_tokens_are_refused(check: Callable[..., httpx.Response]) -> None:
    genuine = jwt.decode(credential(), options={"verify_signature": False})
    kid = signing.keyring().active.kid
    unsigned = jwt.encode(genuine, None, algorithm="none", headers={"kid": kid})
    # The classic confusion: an HMAC keyed with the public key, which anyone may read.
    public = signing.keyring().active.jwk()["x"]
    hmac = jwt.encode(genuine, public, algorithm="HS256", headers={"kid": kid})

    assert reason(check(unsigned)) == "wrong_algorithm"
    assert reason(check(hmac)) == "wrong_algorithm"


def test_a_key_removed_from_the_jwks_no_longer_verifies(check: Callable[..., httpx.Response], key_dir: Path) -> None:
    signed_by_the_first = credential()
    assert check(credential()).status_code == 200

    old = key_dir / "first.pem"
    os.utime(old, (time.time() - 60, time.time() - 60))
    signing.write_new_key(key_dir / "second.pem")  # rotation: the newest key signs, the first stays published
    assert check(signed_by_the_first).status_code == 200
    old.unlink()  # revocation
    time.sleep(1.5)  # the downstream keeps the JWK Set one second here (the JWKS says 300)

    assert reason(check(signed_by_the_first)) == "unknown_key"
    assert check(credential()).status_code == 200


def test_secret_key_rotation_leaves_credentials_verifiable(check: Callable[..., httpx.Response], settings: Any) -> None:
    before = credential()
    settings.SECRET_KEY = "another-secret-key-after-rotation-0123456789abcdef"

    assert check(before).status_code == 200
    assert check(credential()).status_code == 200


def test_a_jwks_with_no_usable_key_refuses_every_credential(live_server: Any, key_dir: Path, tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    x25519 = {"kty": "OKP", "crv": "X25519", "x": "hSDwCYkwp1R0i33ctD73Wg2_Og0mOBr066SpjqqbTmo", "kid": "k"}
    (served / "jwks.json").write_text(json.dumps({"keys": [x25519]}))
    (served / "empty.json").write_text(json.dumps({"keys": []}))

    class Files(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(served), **kwargs)

    with http_server(Files) as base:
        for name in ("jwks.json", "empty.json"):
            with downstream(f"{base}/{name}", tmp_path) as check:
                assert reason(check(credential())) == "no_usable_key"


def test_the_verifier_imports_nothing_of_gatehouse() -> None:
    source = VERIFIER.read_text()
    imported = {line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))}

    assert imported <= {"__future__", "argparse", "json", "sys", "threading", "dataclasses", "http", "jwt"}


def test_the_jwks_is_public_keys_only_with_cache_headers(client: Any, key_dir: Path) -> None:
    signing.write_new_key(key_dir / "second.pem")

    response = client.get("/.well-known/jwks.json")

    assert response.status_code == 200
    assert "max-age=300" in response["Cache-Control"] and "public" in response["Cache-Control"]
    keys = response.json()["keys"]
    assert [key["kid"] for key in keys] == [key.kid for key in signing.keyring().keys]
    assert all(set(key) == {"kty", "crv", "x", "kid", "alg", "use"} for key in keys)  # no private "d"


def test_a_tools_audience_is_its_setting_or_its_downstreams_origin(settings: Any) -> None:
    settings.GATEHOUSE_DEMO_SERVICES_URL = "http://127.0.0.1:8000"
    demo = Tool(name="t", executor_kind="gatehouse_protocol", executor_ref="/demo-services/tools/t")
    remote = Tool(name="u", executor_kind="gatehouse_protocol", executor_ref="https://pay.example:8443/v1/refunds")
    named = Tool(name="v", executor_kind="gatehouse_protocol", executor_ref="/x", audience="urn:payments")

    assert audience_for(demo) == "http://127.0.0.1:8000"
    assert audience_for(remote) == "https://pay.example:8443"
    assert audience_for(named) == "urn:payments"


def test_the_python_check_in_docs_credentials_md_works_as_written(live_server: Any, key_dir: Path) -> None:
    document = (BASE_DIR / "docs" / "credentials.md").read_text()
    code = document.split("```python\n", 1)[1].split("```", 1)[0]
    code = code.replace("https://gatehouse.example/.well-known/jwks.json", f"{live_server.url}/.well-known/jwks.json")
    code = code.replace('"https://gatehouse.example"', repr(django_settings.GATEHOUSE_ISSUER))
    namespace: dict[str, Any] = {}
    exec(code, namespace)  # noqa: S102 — the docs' own example, run as a reader would
    authorise = namespace["authorise"]
    token = credential()

    assert authorise(token, "emitir_estorno", "PED-1")["sub"] == "support-agent"
    assert authorise(credential(scope=Scope.PREVIEW), "emitir_estorno", "PED-1", route="preview")
    for refused in [
        lambda: authorise(token, "emitir_estorno", "PED-1"),  # replayed
        lambda: authorise(credential(), "emitir_estorno", "PED-2"),
        lambda: authorise(credential(scope=Scope.PREVIEW), "emitir_estorno", "PED-1"),
        lambda: authorise(credential(audience="https://seats.example"), "emitir_estorno", "PED-1"),
        lambda: authorise(altered(credential()), "emitir_estorno", "PED-1"),
    ]:
        with pytest.raises((PermissionError, jwt.InvalidTokenError)):
            refused()
