"""Who may open console pages, and the one way console views fetch a call.

Console pages authenticate people by session only: an agent's bearer token is
never looked at here, so it opens nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import wraps
from typing import Concatenate, ParamSpec, cast
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django_htmx.http import HttpResponseClientRedirect
from django_htmx.middleware import HtmxDetails

from approvals.decisions import REVIEW_PERMISSION
from approvals.models import ToolCall
from audit.http import ConsoleRequest

Params = ParamSpec("Params")


def reviewer_required(
    view: Callable[Concatenate[ConsoleRequest, Params], HttpResponse],
) -> Callable[Concatenate[HttpRequest, Params], HttpResponse]:
    """Let only signed-in reviewers through: others are sent to log in, or get 403.

    An htmx poll whose session ended gets a client-side redirect to the login page,
    instead of the login page being swapped into a fragment.
    """

    @wraps(view)
    def wrapper(request: HttpRequest, /, *args: Params.args, **kwargs: Params.kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            htmx: HtmxDetails | None = getattr(request, "htmx", None)
            if htmx:
                next_url = htmx.current_url_abs_path or "/"
                return HttpResponseClientRedirect(f"{settings.LOGIN_URL}?{urlencode({'next': next_url})}")
            return redirect_to_login(request.get_full_path())
        if not request.user.has_perm(REVIEW_PERMISSION):
            raise PermissionDenied("Only reviewers may use the console.")
        # Signed in (checked above) and through HtmxMiddleware: what a ConsoleRequest is.
        return view(cast(ConsoleRequest, request), *args, **kwargs)

    return wrapper


def get_call_for_reviewer(request: ConsoleRequest, pk: uuid.UUID | str) -> ToolCall:
    """Return the call a reviewer asked for, with what every console page shows of it; 404 if none.

    Views never fetch a call any other way, so the rule of who sees which call lives here.
    Every reviewer sees every call (the decision duties are checked when deciding).
    """
    if not request.user.has_perm(REVIEW_PERMISSION):
        raise PermissionDenied("Only reviewers may use the console.")
    call = ToolCall.objects.select_related("agent__owner", "tool__base_tier").filter(pk=pk).first()
    if call is None:
        raise Http404("No such call.")
    return call
