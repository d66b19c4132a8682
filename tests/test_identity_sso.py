"""Reviewer SSO against a real OpenID Connect provider process, driven through Debian's Chromium.

The provider (tests/oidc_provider: django-oauth-toolkit's OIDC support) runs as its own
process with its own users and groups; Gatehouse knows it only by its issuer URL.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from playwright.sync_api import Page, expect

from accounts.models import GroupMapping, SsoIdentity
from audit.models import Event
from tests.browser import REVIEWER_PASSWORD
from tests.identity_peers import IDP_PASSWORD, Provider, oidc_provider, sso_settings  # noqa: F401 — a fixture

pytestmark = [pytest.mark.browser]


@pytest.fixture
def sso(settings: Any, oidc_provider: Provider, people: dict[str, User]) -> Provider:  # noqa: F811
    """SSO on, the provider's approver groups mapped to Reviewers and Seniors."""
    sso_settings(settings, oidc_provider)
    GroupMapping.objects.create(idp_group="gatehouse-approvers", group=Group.objects.get(name="Reviewers"))
    GroupMapping.objects.create(idp_group="gatehouse-seniors", group=Group.objects.get(name="Senior reviewers"))
    return oidc_provider


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    """A fresh browser context's page (pytest-playwright's own `page` needs its session-wide Playwright)."""
    context = browser.new_context()
    yield context.new_page()
    context.close()


def sign_in_through_provider(page: Page, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.get_by_role("button", name="Sign in with single sign-on").click()
    page.get_by_label("IdP username").fill(username)
    page.get_by_label("IdP password").fill(IDP_PASSWORD)
    page.get_by_role("button", name="Sign in at the provider").click()


def test_a_mapped_person_signs_in_through_the_provider_and_gets_the_mapped_groups(
    sso: Provider, page: Page, live_server: Any
) -> None:
    sign_in_through_provider(page, live_server.url, "carla")

    page.wait_for_url(f"{live_server.url}/")
    expect(page.locator(".account .who")).to_have_text("carla@example.com")
    carla = User.objects.get(username="carla@example.com")
    assert sorted(carla.groups.values_list("name", flat=True)) == ["Reviewers"]
    assert carla.has_usable_password() is False
    identity = SsoIdentity.objects.get(user=carla)
    assert identity.issuer == sso.issuer
    assert identity.last_groups == ["gatehouse-approvers"]
    event = Event.objects.get(action="login.sso")
    assert (event.actor_kind, event.actor_name) == ("reviewer", "carla@example.com")
    assert event.data["groups"] == ["Reviewers"]


def test_groups_are_mapped_again_at_every_sign_in(sso: Provider, browser: Any, live_server: Any) -> None:
    first = browser.new_context().new_page()
    sign_in_through_provider(first, live_server.url, "erin")
    first.wait_for_url(f"{live_server.url}/")
    erin = User.objects.get(username="erin@example.com")
    assert sorted(erin.groups.values_list("name", flat=True)) == ["Reviewers", "Senior reviewers"]

    GroupMapping.objects.filter(idp_group="gatehouse-seniors").delete()
    second = browser.new_context().new_page()
    sign_in_through_provider(second, live_server.url, "erin")
    second.wait_for_url(f"{live_server.url}/")

    assert sorted(erin.groups.values_list("name", flat=True)) == ["Reviewers"]
    assert User.objects.filter(username="erin@example.com").count() == 1


def test_a_person_whose_groups_map_to_nothing_is_refused_and_the_refusal_audited(
    sso: Provider, page: Page, live_server: Any
) -> None:
    sign_in_through_provider(page, live_server.url, "dave")

    page.wait_for_url(f"{live_server.url}/accounts/login/?sso=refused")
    expect(page.get_by_role("alert")).to_contain_text("in no group that may use Gatehouse")
    assert not User.objects.filter(username="dave@example.com").exists()
    refusal = Event.objects.get(action="login.sso_refused")
    assert refusal.data["reason"] == "no mapped group"
    assert refusal.data["idp_groups"] == ["sales"]
    assert page.goto(f"{live_server.url}/").url.startswith(f"{live_server.url}/accounts/login/")


def test_sso_never_takes_over_an_account_created_otherwise(sso: Provider, page: Page, live_server: Any) -> None:
    User.objects.create_user("carla@example.com", password="a local password")

    sign_in_through_provider(page, live_server.url, "carla")

    page.wait_for_url(f"{live_server.url}/accounts/login/?sso=refused")
    assert not SsoIdentity.objects.exists()
    assert Event.objects.get(action="login.sso_refused").data["reason"] == "the username belongs to another account"


def test_sign_out_ends_the_provider_session_too(sso: Provider, page: Page, live_server: Any) -> None:
    sign_in_through_provider(page, live_server.url, "carla")
    page.wait_for_url(f"{live_server.url}/")

    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{live_server.url}/accounts/login/")
    page.get_by_role("button", name="Sign in with single sign-on").click()

    # Had the provider's session survived, it would have sent the browser straight back signed in.
    expect(page.get_by_label("IdP username")).to_be_visible()


def test_password_login_off_refuses_passwords_but_not_the_break_glass_superuser(
    settings: Any, people: dict[str, User]
) -> None:
    settings.GATEHOUSE_PASSWORD_LOGIN = False
    form = {"username": "alice", "password": REVIEWER_PASSWORD}

    refused = Client().post("/accounts/login/", form)
    admin = Client()
    accepted = admin.post("/accounts/login/", {"username": "admin", "password": REVIEWER_PASSWORD})

    assert refused.status_code == 200  # the form again, with its error
    assert "_auth_user_id" not in refused.wsgi_request.session
    assert (accepted.status_code, accepted.url) == (302, "/")
    assert admin.get("/").status_code == 200


def test_password_login_on_still_signs_reviewers_in(people: dict[str, User]) -> None:
    response = Client().post("/accounts/login/", {"username": "alice", "password": REVIEWER_PASSWORD})

    assert (response.status_code, response.url) == (302, "/")


def test_the_login_page_offers_sso_only_when_a_provider_is_configured(settings: Any) -> None:
    assert b"single sign-on" not in Client().get("/accounts/login/").content

    settings.GATEHOUSE_OIDC_ISSUER, settings.OIDC_RP_CLIENT_ID = "https://idp.example", "gatehouse"

    assert b"Sign in with single sign-on" in Client().get("/accounts/login/").content


def test_password_logins_do_not_need_the_provider(settings: Any, people: dict[str, User]) -> None:
    settings.GATEHOUSE_OIDC_ISSUER, settings.OIDC_RP_CLIENT_ID = "http://127.0.0.1:9/nobody-listens", "gatehouse"

    response = Client().post("/accounts/login/", {"username": "alice", "password": REVIEWER_PASSWORD})

    assert (response.status_code, response.url) == (302, "/")
