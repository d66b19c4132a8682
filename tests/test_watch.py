"""`?wait` is told when a call changes (Redis), and still notices without Redis."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection

from approvals import lifecycle, notices, watch
from approvals.models import ToolCall
from tests.conftest import refund

pytestmark = pytest.mark.django_db(transaction=True)

# Far beyond the join timeout below: a waiter that returns in time was told, not polling.
NEVER = 60.0


def pending_call(agent_api: Any, key: str) -> ToolCall:
    response = agent_api().propose(refund(35000, idempotency_key=key))
    assert response.status_code == 202, response.content
    return ToolCall.objects.get(pk=response.json()["id"])


def wait_in_thread(call_id: Any, until_changed_from: str | None) -> tuple[threading.Thread, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    def run() -> None:
        try:
            call = ToolCall.objects.get(pk=call_id)
            seen.append(watch.wait_for(call, NEVER, until_changed_from=until_changed_from))
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, seen


def wait_subscribed(call_id: Any, until_changed_from: str | None) -> tuple[threading.Thread, list[dict[str, Any]]]:
    """`wait_in_thread`, returning once the waiter is subscribed (or after 2 s)."""
    thread, seen = wait_in_thread(call_id, until_changed_from)
    for _ in range(200):
        if subscribed(call_id):
            break
        thread.join(0.01)
    return thread, seen


def reviewer() -> Any:
    user = get_user_model().objects.create_user("rita")
    user.user_permissions.add(Permission.objects.get(codename="review_toolcall"))
    return get_user_model().objects.get(pk=user.pk)  # fresh: permissions are cached per instance


def subscribed(call_id: Any) -> bool:
    client = redis.Redis.from_url(django_settings.GATEHOUSE_REDIS_URL)
    return dict(client.pubsub_numsub(notices.channel(call_id))).get(notices.channel(call_id).encode(), 0) > 0


def test_a_waiting_request_is_told_when_a_reviewer_decides(
    agent_api: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert settings.GATEHOUSE_REDIS_URL  # the suite runs with Redis; a missing one is a failure, not a skip
    monkeypatch.setattr(watch, "SAFETY_POLL", NEVER)
    call = pending_call(agent_api, "watch-told")
    thread, seen = wait_subscribed(call.pk, until_changed_from="pending_approval")

    assert lifecycle.reject(call, reviewer(), "Not this customer.")
    thread.join(10)

    assert not thread.is_alive()
    assert seen[0]["status"] == "rejected"


def test_without_redis_a_waiting_request_polls_and_still_sees_the_change(agent_api: Any, settings: Any) -> None:
    settings.GATEHOUSE_REDIS_URL = ""  # the embedded demo: no Redis
    call = pending_call(agent_api, "watch-polled")
    thread, seen = wait_in_thread(call.pk, until_changed_from="pending_approval")

    assert lifecycle.reject(call, reviewer(), "Not this customer.")
    thread.join(10)

    assert not thread.is_alive()
    assert seen[0]["status"] == "rejected"


def test_a_kept_subscriber_ignores_what_an_earlier_wait_left_behind(
    agent_api: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "SAFETY_POLL", NEVER)
    earlier = pending_call(agent_api, "watch-earlier")
    call = pending_call(agent_api, "watch-later")
    url = settings.GATEHOUSE_REDIS_URL
    kept = notices.client(url).pubsub()
    watch._subscribe(kept, notices.channel(earlier.pk))
    for status in ("rejected", "expired"):  # published to the earlier wait, never read by it
        notices.announce(earlier.pk, status)
    watch._give_back(url, kept, notices.channel(earlier.pk))
    monkeypatch.setitem(watch._idle, url, [kept])

    thread, seen = wait_subscribed(call.pk, until_changed_from="pending_approval")
    thread.join(0.3)

    assert thread.is_alive()  # the earlier call's notice did not end this wait
    assert lifecycle.reject(call, reviewer(), "Not this customer.")
    thread.join(10)
    assert not thread.is_alive()
    assert seen[0]["status"] == "rejected"
    assert watch._idle[url] == [kept]  # the same subscriber, kept again for the next wait
