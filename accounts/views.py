"""The console's login and logout: the password form (break-glass only when SSO is on) and SSO sign-out."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import logout as end_session
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.views.decorators.http import require_POST

from accounts import oidc


def login(request: HttpRequest) -> HttpResponseBase:
    """Show the login page: the SSO button when a provider is configured, and the password form."""
    context = {
        "sso_enabled": oidc.enabled(),
        "password_login": settings.GATEHOUSE_PASSWORD_LOGIN,
        "sso_refused": request.GET.get("sso") == "refused",
    }
    return LoginView.as_view(extra_context=context)(request)


@require_POST
def logout(request: HttpRequest) -> HttpResponse:
    """End the console session, and the provider's too where it offers RP-initiated logout.

    The provider's URL needs the ID token, which ends with the session: it is read first.
    """
    destination = oidc.provider_logout_url(request)
    end_session(request)
    return HttpResponseRedirect(destination)
