"""The public half of the signing keys, for anyone who checks what Gatehouse signed."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET

from vault import signing

# A verifier may keep the set this long: a removed key stops verifying within it, an added one
# is fetched at once by verifiers that meet its unknown kid.
JWKS_MAX_AGE_SECONDS = 300


@require_GET
@cache_control(public=True, max_age=JWKS_MAX_AGE_SECONDS)
def jwks(request: HttpRequest) -> JsonResponse:
    """Serve the JWK Set of the published public keys (`/.well-known/jwks.json`)."""
    return JsonResponse(signing.keyring().jwks(), content_type="application/jwk-set+json")
