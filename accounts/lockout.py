"""Login throttling for the console and admin: the lockout page, its audit events, the unlock.

django-axes counts failed logins by account and by address (config/settings.py) and
refuses a login once either reaches the limit. This module says so on the login page,
writes the lockout and an admin's unlock to the audit log, and is imported by nothing
but settings and admin (it imports only `audit`).
"""

from __future__ import annotations

from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from audit.chain import record, record_alone
from audit.models import ActorKind

TOO_MANY_REQUESTS = 429


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict[str, object] | None = None
) -> HttpResponse:
    """Return the login page again, with a fresh form and the notice that logins are refused for now.

    The same page for the console and the admin, and the same words whether or not the
    account exists: the lockout reveals nothing about which accounts there are.
    """
    context = {
        "form": AuthenticationForm(request),
        "next": request.POST.get("next") or request.GET.get("next", ""),
        "locked_out": True,
        "cool_off_minutes": cool_off_minutes(),
    }
    return render(request, "registration/login.html", context, status=TOO_MANY_REQUESTS)


def cool_off_minutes() -> int:
    """Return how long a lockout lasts, in whole minutes."""
    return int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)


def audit_lockout(
    sender: object, request: HttpRequest, username: str | None, ip_address: str | None, **_: object
) -> None:
    """Write one audit event when a failed login locks an account or an address.

    Axes also signals every refused attempt during a lockout. Those are not counted
    (AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT is off) and leave the request's
    failure count unset, so only the failure that reached the limit is written: an
    attacker's thousand tries cost the audit chain one event, not a thousand.
    """
    failures = getattr(request, "axes_failures_since_start", None)
    if failures is None:
        return
    record_alone(
        "login.locked_out",
        actor=(ActorKind.SYSTEM, "gatehouse"),
        data={
            "username": (username or "")[:150],
            "ip_address": ip_address,
            "path": request.path[:200],
            "failures": failures,
            "cool_off_minutes": cool_off_minutes(),
        },
    )


@transaction.atomic
def unlock(attempts: QuerySet[AccessAttempt], *, by: str) -> int:
    """Forget the given failed-login records, which lifts the lockouts they make; audit who did it.

    Returns how many records were deleted (0 writes no event).
    """
    rows = list(
        attempts.select_for_update().order_by("pk").values("pk", "username", "ip_address", "failures_since_start")
    )
    if not rows:
        return 0
    ids = [row.pop("pk") for row in rows]  # the event names whose records they were, not their ids
    AccessAttempt.objects.filter(pk__in=ids).delete()
    record("login.unlocked", actor=(ActorKind.ADMIN, by), data={"attempts": rows})
    return len(rows)
