"""Password logins, which an SSO deployment switches off for everyone but the break-glass superuser."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.http import HttpRequest


class PasswordBackend(ModelBackend):
    """Django's username-and-password check; with GATEHOUSE_PASSWORD_LOGIN=0 only superusers pass it.

    The superuser stays able to sign in with a password so that a provider outage, or a
    wrong group mapping, never locks every administrator out of the console.
    """

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: object
    ) -> User | None:
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None or settings.GATEHOUSE_PASSWORD_LOGIN or getattr(user, "is_superuser", False):
            return user
        return None
