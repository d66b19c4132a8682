"""Reviewer sign-in through an OpenID Connect provider (mozilla-django-oidc), configured by its issuer alone.

The provider's endpoints come from its discovery document
(`<issuer>/.well-known/openid-configuration`), read when a sign-in first needs them and
kept for a few minutes: the console starts, and password logins work, while the
provider is down. The ID token must name this issuer and this client (the library
checks the signature and nonce, not these two). A person is found by the provider's
subject, never by e-mail alone, and may sign in only while one of their provider
groups maps to a Gatehouse group (`GroupMapping`); the mapped groups are set again at
every sign-in. Each sign-in and each refusal is audited.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import urlencode

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, User
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.db import transaction
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from accounts.models import SsoIdentity
from audit.chain import record, record_alone
from audit.models import ActorKind
from audit.typealiases import JSONObject

log = logging.getLogger(__name__)

DISCOVERY_TTL_SECONDS = 300.0
# The library's setting names for the endpoints discovery gives.
DISCOVERED = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
_discovered: dict[str, tuple[float, JSONObject]] = {}


class SignInRefused(SuspiciousOperation):
    """The provider vouched for someone Gatehouse does not let in (no mapped group, a local account's name)."""


def enabled() -> bool:
    """Return whether SSO is configured (an issuer and a client id)."""
    return bool(settings.GATEHOUSE_OIDC_ISSUER and settings.OIDC_RP_CLIENT_ID)


def discovery() -> JSONObject:
    """Return the provider's discovery document, fetched at most every DISCOVERY_TTL_SECONDS."""
    issuer = settings.GATEHOUSE_OIDC_ISSUER
    cached = _discovered.get(issuer)
    if cached is not None and time.monotonic() - cached[0] < DISCOVERY_TTL_SECONDS:
        return cached[1]
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    response = httpx.get(url, timeout=settings.OIDC_TIMEOUT, follow_redirects=False)
    response.raise_for_status()
    document = response.json()
    if not isinstance(document, dict) or document.get("issuer", "").rstrip("/") != issuer.rstrip("/"):
        # RFC 8414 §3.3 / OIDC Discovery §4.3: a document naming another issuer is not this provider's.
        raise ImproperlyConfigured(f"{url} does not describe the issuer {issuer!r}")
    _discovered[issuer] = (time.monotonic(), document)
    return document


def endpoint(name: str) -> str:
    """Return one endpoint URL from the discovery document ('' when the provider has none)."""
    value = discovery().get(name, "")
    return value if isinstance(value, str) else ""


def oidc_setting(attr: str, *default: object) -> object:
    """Return a mozilla-django-oidc setting: the endpoints from discovery, the rest from Django's settings."""
    if attr in DISCOVERED:
        return endpoint(DISCOVERED[attr])
    return import_from_settings(attr, *default)


class OidcBackend(OIDCAuthenticationBackend):
    """The library's code flow, with endpoints from discovery, issuer and audience checked, groups mapped."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self) -> None:
        # The library reads every endpoint here, on every authenticate() of any backend: a password
        # login would then need the provider up. The endpoints are read when a sign-in uses them.
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:
        return endpoint("token_endpoint")

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:
        return endpoint("userinfo_endpoint")

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:
        return endpoint("jwks_uri")

    def authenticate(self, request: HttpRequest | None, **kwargs: object) -> User | None:
        if request is None or "code" not in request.GET or not enabled():
            return None  # a password login (or SSO is off): not this backend's
        try:
            user: User | None = super().authenticate(request, **kwargs)
        except SignInRefused as refusal:
            log.info("SSO sign-in refused: %s", refusal)
            return None
        return user

    def verify_token(self, token: str, **kwargs: object) -> JSONObject:
        payload: JSONObject = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        issuer = str(payload.get("iss", "")).rstrip("/")
        if issuer != settings.GATEHOUSE_OIDC_ISSUER.rstrip("/") or self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("The ID token was issued by another provider or for another client.")
        return payload

    def get_userinfo(self, access_token: str, id_token: str, payload: JSONObject) -> JSONObject:
        """Return the ID token's claims overlaid with the userinfo endpoint's (groups may be in either)."""
        userinfo: JSONObject = super().get_userinfo(access_token, id_token, payload)
        return {**payload, **userinfo}

    def verify_claims(self, claims: JSONObject) -> bool:
        return bool(claims.get("sub"))

    def filter_users_by_claims(self, claims: JSONObject) -> object:
        return self.UserModel.objects.filter(
            sso_identity__issuer=settings.GATEHOUSE_OIDC_ISSUER, sso_identity__subject=str(claims["sub"])
        )

    def create_user(self, claims: JSONObject) -> User:
        groups = mapped_groups(claims)  # refuse before anything is written
        username = username_from(claims)
        if self.UserModel.objects.filter(username__iexact=username).exists():
            refuse(claims, "the username belongs to another account")
        with transaction.atomic():
            user = self.UserModel.objects.create_user(username, email=str(claims.get("email", "")))
            user.set_unusable_password()  # an SSO account has no password to guess
            user.save(update_fields=["password"])
            SsoIdentity.objects.create(user=user, issuer=settings.GATEHOUSE_OIDC_ISSUER, subject=str(claims["sub"]))
            return sync_groups(user, claims, groups)

    def update_user(self, user: User, claims: JSONObject) -> User:
        groups = mapped_groups(claims)
        with transaction.atomic():
            return sync_groups(user, claims, groups)


def username_from(claims: JSONObject) -> str:
    """Return the console username for a new SSO account: the e-mail, else the preferred username, else sub."""
    for claim in ("email", "preferred_username", "sub"):
        value = claims.get(claim)
        if isinstance(value, str) and value:
            return value[:150]
    return ""


def idp_groups(claims: JSONObject) -> list[str]:
    """Return the provider's groups from the configured claim (a list, or one space-separated string)."""
    raw = claims.get(settings.GATEHOUSE_OIDC_GROUPS_CLAIM)
    if isinstance(raw, str):
        return raw.split()
    if isinstance(raw, list):
        return [str(item) for item in raw]
    return []


def mapped_groups(claims: JSONObject) -> list[Group]:
    """Return the Gatehouse groups the claims' provider groups map to; refuse the sign-in when there are none."""
    groups = list(Group.objects.filter(idp_mappings__idp_group__in=idp_groups(claims)).distinct().order_by("name"))
    if not groups:
        refuse(claims, "no mapped group")
    return groups


def refuse(claims: JSONObject, reason: str) -> None:
    """Audit a refused sign-in and stop it."""
    record_alone(
        "login.sso_refused",
        actor=(ActorKind.SYSTEM, "gatehouse"),
        data={
            "subject": str(claims.get("sub", ""))[:255],
            "username": username_from(claims),
            "reason": reason,
            "idp_groups": idp_groups(claims)[:50],
        },
    )
    raise SignInRefused(reason)


def sync_groups(user: User, claims: JSONObject, groups: list[Group]) -> User:
    """Give `user` exactly the mapped groups; audit the sign-in.

    Exactly: the provider is the source of truth for an SSO account, so a group an admin
    added by hand, or one whose mapping was deleted, goes at the next sign-in.
    """
    user.groups.set(groups)
    SsoIdentity.objects.filter(user=user).update(last_groups=idp_groups(claims)[:50])
    record(
        "login.sso",
        actor=(ActorKind.REVIEWER, user.get_username()),
        data={
            "subject": str(claims["sub"])[:255],
            "idp_groups": idp_groups(claims)[:50],
            "groups": [group.name for group in groups],
        },
    )
    return user


class SignInView(OIDCAuthenticationRequestView):
    """Send the browser to the provider's authorization endpoint (from discovery)."""

    get_settings = staticmethod(oidc_setting)


class CallbackView(OIDCAuthenticationCallbackView):
    """Finish the code flow; a refused sign-in lands on the login page saying so."""

    get_settings = staticmethod(oidc_setting)


def provider_logout_url(request: HttpRequest) -> str:
    """Return where sign-out goes: the provider's end_session_endpoint when it has one, else the login page.

    RP-initiated logout: the ID token says which session to end, and the provider sends
    the browser back to the login page.
    """
    end_session = endpoint("end_session_endpoint") if enabled() else ""
    id_token = request.session.get("oidc_id_token")
    if not end_session or not id_token:
        return str(settings.LOGOUT_REDIRECT_URL)
    query = urlencode(
        {
            "id_token_hint": id_token,
            "client_id": settings.OIDC_RP_CLIENT_ID,
            "post_logout_redirect_uri": request.build_absolute_uri(str(settings.LOGOUT_REDIRECT_URL)),
        }
    )
    return f"{end_session}?{query}"
