"""The console's typed request: what its middleware and decorators guarantee a view.

Every console view is behind `login_required`, and `HtmxMiddleware` runs on every
request, so a view annotated with `ConsoleRequest` can use `request.user` as a
`User` and `request.htmx` without checks. Django's `HttpRequest` cannot say either.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class ConsoleRequest(HttpRequest):
    """A signed-in person's request to the console (never constructed: a view's annotation)."""

    user: User
    htmx: HtmxDetails
