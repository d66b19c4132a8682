"""Client ID Metadata Documents: a client known only by the https URL of its metadata.

The toolkit's fetcher speaks https to public addresses only, so the test's fetcher
reads `https://client.example/…` from a real HTTP server on loopback instead; all
else — Gatehouse's checks of the document, the registration, consent, the token — is
the product's own path.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from oauth2_provider.cimd import CIMDError
from oauth2_provider.models import Application

from agents.models import Agent
from audit.typealiases import JSONObject
from oauth.cimd import CheckedMetadataFetcher
from tests.mcp_server import LiveAsgi
from tests.processes import http_server
from tests.test_identity_oauth import authorize_query, carla, consent, pkce, rpc, signed_in  # noqa: F401 — fixtures

CALLBACK = "http://127.0.0.1:9/callback"
DOCUMENTS: dict[str, JSONObject] = {}
SERVED_AT = {"url": ""}


class Documents(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps(DOCUMENTS.get(self.path, {})).encode()
        self.send_response(200 if self.path in DOCUMENTS else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "max-age=300")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return None


class LoopbackFetcher(CheckedMetadataFetcher):
    """Read https://client.example/PATH from the test's document server instead of the internet."""

    def fetch_document(self, client_id: str) -> tuple[JSONObject, int]:
        response = httpx.get(SERVED_AT["url"] + urlsplit(client_id).path, timeout=5)
        response.raise_for_status()
        return response.json(), 300


@pytest.fixture
def documents(settings: Any) -> Iterator[dict[str, JSONObject]]:
    settings.OAUTH2_PROVIDER = {**settings.OAUTH2_PROVIDER, "CIMD_METADATA_FETCHER": f"{__name__}.LoopbackFetcher"}
    with http_server(Documents) as url:
        SERVED_AT["url"] = url
        yield DOCUMENTS
    DOCUMENTS.clear()


def document(client_id: str, fields: JSONObject | None = None) -> JSONObject:
    return {
        "client_id": client_id,
        "client_name": "A host known by its URL",
        "redirect_uris": [CALLBACK],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        **(fields or {}),
    }


def test_a_client_known_by_its_metadata_url_is_authorized_and_calls_mcp(
    live_asgi: LiveAsgi,
    signed_in: httpx.Client,  # noqa: F811 — the fixture imported above
    documents: dict[str, JSONObject],
) -> None:
    client_id = "https://client.example/mcp/client.json"
    documents["/mcp/client.json"] = document(client_id)
    verifier, challenge = pkce()
    agent_choice = f"agent:{Agent.objects.get(name='support-agent').pk}"

    advertised = httpx.get(f"{live_asgi.url}/.well-known/oauth-authorization-server").json()
    allowed = consent(signed_in, authorize_query(live_asgi, client_id, CALLBACK, challenge), agent_choice)
    code = parse_qs(urlsplit(allowed.headers["location"]).query)["code"][0]
    token = httpx.post(
        f"{live_asgi.url}/oauth/token/",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": CALLBACK,
            "client_id": client_id,
            "code_verifier": verifier,
        },
    )

    assert advertised["client_id_metadata_document_supported"] is True
    assert token.status_code == 200, token.text
    assert rpc(live_asgi, token.json()["access_token"]).status_code == 200
    application = Application.objects.get(client_id=client_id)
    assert (application.name, application.client_type) == ("A host known by its URL", Application.CLIENT_PUBLIC)


@pytest.mark.parametrize(
    "fields",
    [
        {"redirect_uris": ["http://evil.example/cb"]},
        {"grant_types": ["implicit"]},
        {"client_id": "https://other.example/x"},
    ],
)
def test_a_document_gatehouse_would_not_register_is_an_unknown_client(
    live_asgi: LiveAsgi,
    signed_in: httpx.Client,  # noqa: F811 — the fixture imported above
    documents: dict[str, JSONObject],
    fields: JSONObject,
) -> None:
    path = f"/bad-{uuid.uuid4().hex}.json"  # a failed fetch backs its URL off for a while: one URL per case
    client_id = f"https://client.example{path}"
    documents[path] = document(client_id, fields)

    response = signed_in.get(authorize_query(live_asgi, client_id, CALLBACK, pkce()[1]))

    assert response.status_code == 400
    assert "location" not in response.headers
    assert not Application.objects.filter(client_id=client_id).exists()
    if "client_id" not in fields:  # Gatehouse's rules refused it (a foreign client_id, the toolkit's)
        with pytest.raises(CIMDError, match=r"refused|Only 'authorization_code'"):
            LoopbackFetcher().fetch(client_id)
