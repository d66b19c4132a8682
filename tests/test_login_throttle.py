"""Login throttling on the console and the admin: by account and by address, audited, unlocked in admin."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from audit.models import ActorKind, Event
from tests.admin_client import FAST_HASHER, PASSWORD, AdminBrowser, form_fields
from tests.mcp_server import LiveAsgi

pytestmark = pytest.mark.django_db

CONSOLE_LOGIN = "/accounts/login/"
ADMIN_LOGIN = "/admin/login/?next=/admin/"
ATTACKER = "203.0.113.7"
ELSEWHERE = "198.51.100.2"
LIMIT = 5  # the default GATEHOUSE_LOGIN_FAILURE_LIMIT


@pytest.fixture(autouse=True)
def accounts(settings: Any) -> None:
    """A staff account `root` (admin and console) and two reviewers, all with PASSWORD."""
    settings.PASSWORD_HASHERS = FAST_HASHER.options["PASSWORD_HASHERS"]
    User = get_user_model()
    User.objects.create_user("root", "root@example.com", PASSWORD, is_staff=True, is_superuser=True)
    for name in ("alice", "bob"):
        User.objects.create_user(name, f"{name}@example.com", PASSWORD)


def log_in(path: str, username: str, password: str, address: str = ATTACKER, client: Client | None = None) -> Any:
    """POST the login form from `address` as a browser does (CSRF enforced); return the response."""
    client = client or Client(enforce_csrf_checks=True)
    if "csrftoken" not in client.cookies:
        client.get(path, REMOTE_ADDR=address)
    data = {"username": username, "password": password, "csrfmiddlewaretoken": client.cookies["csrftoken"].value}
    return client.post(path, data, REMOTE_ADDR=address)


def logged_in(client: Client) -> bool:
    """Return whether the client's session belongs to a signed-in user."""
    return "_auth_user_id" in client.session


@pytest.mark.parametrize("path", [CONSOLE_LOGIN, ADMIN_LOGIN])
def test_150_wrong_passwords_then_the_right_one_does_not_log_in(path: str) -> None:
    client = Client(enforce_csrf_checks=True)
    statuses = [log_in(path, "root", f"guess-{n}", client=client).status_code for n in range(150)]

    response = log_in(path, "root", PASSWORD, client=client)

    assert statuses[: LIMIT - 1] == [200] * (LIMIT - 1)  # the form again, with its error
    assert set(statuses[LIMIT - 1 :]) == {429}
    assert response.status_code == 429
    assert not logged_in(client)


def test_the_lockout_is_the_login_page_with_a_clear_message() -> None:
    for n in range(LIMIT):
        response = log_in(CONSOLE_LOGIN, "alice", f"guess-{n}")

    page = response.content.decode()
    assert response.status_code == 429
    assert "registration/login.html" in [template.name for template in response.templates]
    assert "Too many failed logins for this account or from this address." in page
    assert "Logins are refused for 15 minutes; an admin can unlock sooner." in page
    assert set(form_fields(page)) >= {"username", "password", "csrfmiddlewaretoken"}


def test_fewer_failures_than_the_limit_still_let_the_right_password_in() -> None:
    client = Client(enforce_csrf_checks=True)
    for n in range(LIMIT - 1):
        log_in(CONSOLE_LOGIN, "alice", f"guess-{n}", client=client)

    response = log_in(CONSOLE_LOGIN, "alice", PASSWORD, client=client)

    assert response.status_code == 302
    assert logged_in(client)


def test_a_locked_address_refuses_other_accounts_and_a_locked_account_refuses_other_addresses() -> None:
    for n in range(LIMIT):
        log_in(CONSOLE_LOGIN, "alice", f"guess-{n}", address=ATTACKER)

    assert log_in(CONSOLE_LOGIN, "bob", PASSWORD, address=ATTACKER).status_code == 429  # the address is locked
    assert log_in(CONSOLE_LOGIN, "alice", PASSWORD, address=ELSEWHERE).status_code == 429  # so is the account
    assert log_in(CONSOLE_LOGIN, "bob", PASSWORD, address=ELSEWHERE).status_code == 302  # neither is bob's


def test_a_lockout_is_audited_once_with_the_account_and_the_address() -> None:
    for n in range(150):
        log_in(ADMIN_LOGIN, "alice", f"guess-{n}")

    events = list(Event.objects.filter(action="login.locked_out"))

    assert len(events) == 1
    assert events[0].actor_kind == ActorKind.SYSTEM
    assert events[0].data == {
        "username": "alice",
        "ip_address": ATTACKER,
        "path": "/admin/login/",
        "failures": LIMIT,
        "cool_off_minutes": 15,
    }


def test_an_admin_unlock_lets_the_user_in_and_is_audited() -> None:
    for n in range(LIMIT):
        log_in(CONSOLE_LOGIN, "alice", f"guess-{n}")
    assert log_in(CONSOLE_LOGIN, "alice", PASSWORD).status_code == 429
    admin = AdminBrowser("admin")  # logs in from the test client's own address, which is not locked

    assert "Access attempts" in admin.get("/admin/").content.decode()
    changelist = admin.get("/admin/axes/accessattempt/?locked_out=yes")
    assert "alice" in changelist.content.decode()
    selected = [str(pk) for pk in changelist.context["cl"].result_list.values_list("pk", flat=True)]
    unlocked = admin.client.post(
        "/admin/axes/accessattempt/",
        {"action": "unlock_selected", "_selected_action": selected, "csrfmiddlewaretoken": admin.csrf_token()},
    )

    assert unlocked.status_code == 302
    client = Client(enforce_csrf_checks=True)
    assert log_in(CONSOLE_LOGIN, "alice", PASSWORD, client=client).status_code == 302
    assert logged_in(client)
    event = Event.objects.get(action="login.unlocked")
    assert (event.actor_kind, event.actor_name) == (ActorKind.ADMIN, "admin")
    assert event.data == {"attempts": [{"username": "alice", "ip_address": ATTACKER, "failures_since_start": LIMIT}]}


def test_the_lockout_holds_under_the_asgi_server_too(live_asgi: LiveAsgi) -> None:
    """uvicorn runs the middleware chain async: Axes' async path must refuse and show the page as well."""
    with httpx.Client(base_url=live_asgi.url) as browser:
        browser.get(CONSOLE_LOGIN)

        def post(password: str) -> httpx.Response:
            token = browser.cookies["csrftoken"]
            return browser.post(
                CONSOLE_LOGIN, data={"username": "bob", "password": password, "csrfmiddlewaretoken": token}
            )

        statuses = [post(f"guess-{n}").status_code for n in range(LIMIT)]
        response = post(PASSWORD)

    assert statuses == [200] * (LIMIT - 1) + [429]
    assert response.status_code == 429
    assert "Too many failed logins for this account or from this address." in response.text
    assert "sessionid" not in browser.cookies
