"""Dynamic client registration (RFC 7591) for MCP hosts: public clients, code flow, redirect URIs checked.

Open, as MCP hosts expect (they register before anyone signs in); what makes it safe
is what a registration may say. django-oauth-toolkit's endpoint does the registering;
this view refuses first what Gatehouse does not allow: a confidential client, a grant
other than the authorization code (and its refresh), a redirect URI that is not https
or a loopback http address (RFC 8252 §7.3), or one with a fragment.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from oauth2_provider.views import DynamicClientRegistrationView

ALLOWED_GRANTS = {"authorization_code", "refresh_token"}
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


@csrf_exempt
@require_POST
def register(request: HttpRequest) -> HttpResponseBase:
    """Refuse the metadata Gatehouse does not accept, then let the toolkit register the client."""
    try:
        metadata = json.loads(request.body)
    except ValueError:
        return _invalid("The body must be a JSON object of client metadata.")
    problem = metadata_problem(metadata) if isinstance(metadata, dict) else "The body must be a JSON object."
    if problem:
        return _invalid(problem)
    response: HttpResponseBase = DynamicClientRegistrationView.as_view()(request)
    return response


def metadata_problem(metadata: dict[str, object]) -> str:
    """Return why Gatehouse refuses this client metadata ('' when it accepts it)."""
    if metadata.get("token_endpoint_auth_method", "client_secret_basic") != "none":
        return "Register a public client ('token_endpoint_auth_method': 'none'); it proves itself with PKCE."
    grants = metadata.get("grant_types", ["authorization_code"])
    if not isinstance(grants, list) or not set(grants) <= ALLOWED_GRANTS:
        return "Only 'authorization_code' and 'refresh_token' grants are offered."
    uris = metadata.get("redirect_uris")
    if not isinstance(uris, list) or not uris:
        return "Give at least one redirect URI."
    for uri in uris:
        if not isinstance(uri, str) or not redirect_uri_allowed(uri):
            return f"Redirect URI {str(uri)[:200]!r} is refused: use https, or http on a loopback address."
    return ""


def redirect_uri_allowed(uri: str) -> bool:
    """Return whether `uri` may receive authorization codes: https, or http on loopback; no fragment, no userinfo."""
    parts = urlsplit(uri)
    if parts.fragment or "@" in parts.netloc or not parts.hostname:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS)


def _invalid(description: str) -> JsonResponse:
    return JsonResponse({"error": "invalid_client_metadata", "error_description": description}, status=400)
