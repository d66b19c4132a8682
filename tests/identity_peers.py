"""The test OpenID Connect provider (tests/oidc_provider), started as its own process for the SSO tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.processes import BASE_DIR, free_port, wait_until

CLIENT_ID = "gatehouse-console"
CLIENT_SECRET = "gatehouse-console-secret-for-tests"
IDP_PASSWORD = "provider password 1"
# The provider's people: carla is an approver there, dave only in sales, erin in both approver groups.
IDP_USERS = [
    {"username": "carla", "email": "carla@example.com", "groups": ["gatehouse-approvers"]},
    {"username": "dave", "email": "dave@example.com", "groups": ["sales"]},
    {"username": "erin", "email": "erin@example.com", "groups": ["gatehouse-approvers", "gatehouse-seniors"]},
]


@dataclass(frozen=True)
class Provider:
    url: str

    @property
    def issuer(self) -> str:
        return f"{self.url}/o"


def rsa_key_pem() -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.fixture(scope="module")
def oidc_provider(live_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    """Run the provider on a free port, its one client redirecting to the live server's SSO callback."""
    folder = tmp_path_factory.mktemp("oidc-provider")
    (folder / "key.pem").write_bytes(rsa_key_pem())
    setup = {
        "users": [{**person, "password": IDP_PASSWORD} for person in IDP_USERS],
        "client": {
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "redirect_uris": [f"{live_server.url}/accounts/oidc/callback/"],
            "post_logout_redirect_uris": [f"{live_server.url}/accounts/login/"],
        },
    }
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "OIDC_PROVIDER_DB": str(folder / "provider.sqlite3"),
        "OIDC_PROVIDER_KEY": str(folder / "key.pem"),
        "PYTHONPATH": str(BASE_DIR),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.oidc_provider.serve", str(port), json.dumps(setup)],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=open(folder / "provider.log", "wb"),  # noqa: SIM115 — closed with the process
        start_new_session=True,
    )
    provider = Provider(f"http://127.0.0.1:{port}")
    try:
        wait_until(lambda: _answers(f"{provider.issuer}/.well-known/openid-configuration"), timeout=40)
        yield provider
    finally:
        process.kill()
        process.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def sso_settings(settings: Any, provider: Provider) -> None:
    """Point Gatehouse's SSO at the provider, as the GATEHOUSE_OIDC_* variables would."""
    settings.GATEHOUSE_OIDC_ISSUER = provider.issuer
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_RP_SCOPES = "openid email profile"
