"""Standing approvals: approve calls like this one, a bounded number of times, for a bounded time, revocably."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from approvals.models import StandingApproval, ToolCall
from approvals.states import Status
from audit.chain import first_break
from audit.models import Event
from tests.browser import Console, page_text
from tests.browser import propose_refund as propose
from tests.conftest import AgentApi, AgentFactory, refund
from tests.processes import CeleryWorker
from tests.test_budgets import WebProcess, propose_at_once
from tests.test_cumulative_limits import add_limit
from toolcatalog.models import RiskTier, Tool

pytestmark = pytest.mark.django_db
# The demo order of R$ 15.000: room for both refunds.
BIG_ORDER = "PED-00000010"
REPETITIONS = 5

UP_TO_R600 = {"type": "object", "properties": {"valor_centavos": {"maximum": 60000}}, "required": ["valor_centavos"]}


def approve_like_this(
    reviewer: Console, call: ToolCall, condition: dict[str, Any] = UP_TO_R600, uses: int = 3, minutes: int = 60
) -> str:
    """Approve `call` from its page with "Also approve calls like this" ticked; return the page's text."""
    call.refresh_from_db()
    form = {
        "arguments_hash": call.arguments_hash,
        "tool_version": call.tool_version,
        "like_this": "1",
        "like_this_condition": json.dumps(condition),
        "like_this_uses": uses,
        "like_this_minutes": minutes,
    }
    return page_text(reviewer.post(f"/calls/{call.pk}/approve/", form, follow=True))


def held_then_granted(support: AgentApi, console: Callable[[str], Console], **terms: Any) -> StandingApproval:
    """A R$ 500 refund held at tier 2, approved by alice with a standing approval; return it."""
    call = propose(support, 50000, "first", pedido=BIG_ORDER)
    assert call.status == Status.PENDING_APPROVAL
    text = approve_like_this(console("alice"), call, **terms)
    assert "Approved. The call runs now." in text, text
    return StandingApproval.objects.get()


def test_the_next_matching_call_runs_on_its_own_and_cites_the_standing_approval(
    celery_worker: CeleryWorker, demo_services: str, support: AgentApi, console: Callable[[str], Console]
) -> None:
    granted = held_then_granted(support, console)
    response = support.propose(refund(40000, idempotency_key="second", pedido=BIG_ORDER), wait=20)
    body = response.json()
    assert response.status_code == 201, body
    assert body["status"] == "succeeded", celery_worker.log()
    cited = body["risk_reasons"][-1]
    assert (cited["kind"], cited["standing_approval"]) == ("standing", str(granted.pk))
    assert "Approved by the standing approval of alice (use 1 of 3" in cited["summary"]
    used = Event.objects.get(action="standing.used", call_id=body["id"])
    assert used.data["standing_approval"] == str(granted.pk) and used.data["uses"] == 1
    proposed = Event.objects.get(action="call.proposed", call_id=body["id"])
    assert proposed.data["status"] == "approved" and proposed.data["risk_reasons"][-1]["kind"] == "standing"
    granted.refresh_from_db()
    assert granted.uses == 1
    assert first_break() is None


def test_a_call_outside_the_condition_is_held(support: AgentApi, console: Callable[[str], Console]) -> None:
    held_then_granted(support, console)
    outside = support.propose(refund(70000, idempotency_key="big")).json()
    assert (outside["status"], outside["risk_tier"]) == ("pending_approval", 2)
    assert StandingApproval.objects.get().uses == 0


def test_the_use_count_stops_it(support: AgentApi, console: Callable[[str], Console]) -> None:
    held_then_granted(support, console, uses=2)
    statuses = [support.propose(refund(30000, idempotency_key=f"u{n}")).json()["status"] for n in range(3)]
    assert statuses == ["approved", "approved", "pending_approval"]
    assert StandingApproval.objects.get().uses == 2


def test_expiry_stops_it(support: AgentApi, console: Callable[[str], Console]) -> None:
    held_then_granted(support, console)
    StandingApproval.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert support.propose(refund(30000, idempotency_key="late")).json()["status"] == "pending_approval"


def test_revocation_in_the_console_stops_it_at_once(support: AgentApi, console: Callable[[str], Console]) -> None:
    granted = held_then_granted(support, console)
    bob = console("bob")
    listing = page_text(bob.get("/standing/"))
    assert "emitir_estorno" in listing and "0 of 3" in listing and "active" in listing
    assert "Revoked" in page_text(bob.post(f"/standing/{granted.pk}/revoke/", follow=True))
    assert support.propose(refund(30000, idempotency_key="after")).json()["status"] == "pending_approval"
    assert Event.objects.filter(action="standing.revoked", actor_name="bob").count() == 1


def test_a_change_of_the_tools_policy_ends_its_cover(support: AgentApi, console: Callable[[str], Console]) -> None:
    held_then_granted(support, console)
    add_limit("unrelated", over=10**9)  # any change: the standing approval was given under the older version
    assert support.propose(refund(30000, idempotency_key="v2")).json()["status"] == "pending_approval"


def test_a_replay_takes_no_use(support: AgentApi, console: Callable[[str], Console]) -> None:
    held_then_granted(support, console)
    for _ in range(3):
        support.propose(refund(30000, idempotency_key="same"))
    assert StandingApproval.objects.get().uses == 1


def test_cumulative_limits_still_hold_calls_a_standing_approval_would_cover(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    add_limit(over=100_000)
    held_then_granted(support, console, uses=10)  # its R$ 500 is in the window
    assert support.propose(refund(40000, idempotency_key="in")).json()["status"] == "approved"
    over = support.propose(refund(40000, idempotency_key="over")).json()
    assert (over["status"], over["risk_reasons"][-1]["kind"]) == ("pending_approval", "cumulative")


def test_the_condition_must_match_the_call_and_the_time_fit_the_tiers_window(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 50000, "first")
    narrow = {"properties": {"valor_centavos": {"maximum": 100}}}
    assert "does not match this call's own arguments" in approve_like_this(console("alice"), call, narrow)
    assert "lasts at most 4:00:00" in approve_like_this(console("alice"), call, minutes=5 * 60)
    call.refresh_from_db()
    # A refused standing approval refuses the approval with it: nothing was recorded.
    assert call.status == Status.PENDING_APPROVAL and not call.decisions.exists()
    assert not StandingApproval.objects.exists()


def test_tier_3_allows_none_unless_the_tier_says_so(support: AgentApi, console: Callable[[str], Console]) -> None:
    call = propose(support, 800000, "big")
    page = page_text(console("alice").get(f"/calls/{call.pk}/"))
    assert "Also approve calls like this" not in page
    assert "allows no standing approvals" in approve_like_this(console("alice"), call, {})
    assert not StandingApproval.objects.exists()


def test_a_four_eyes_standing_approval_needs_two_reviewers(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    RiskTier.objects.filter(level=3).update(allows_standing_approvals=True)
    call = propose(support, 800000, "big")
    alice, bob = console("alice"), console("bob")
    up_to_r9000 = {"properties": {"valor_centavos": {"maximum": 900000}}}
    assert "Your approval is recorded (1 of 2)" in approve_like_this(alice, call, up_to_r9000)
    granted = StandingApproval.objects.get()
    assert (granted.risk_tier, granted.approvals_required, granted.activated_at) == (3, 2, None)
    # One reviewer's standing approval covers nothing at a four-eyes tier.
    assert support.propose(refund(700000, idempotency_key="w1")).json()["status"] == "pending_approval"
    again = page_text(alice.post(f"/standing/{granted.pk}/approve/", follow=True))
    assert "You approved this standing approval already" in again
    assert "it is active now" in page_text(bob.post(f"/standing/{granted.pk}/approve/", follow=True))
    ran = support.propose(refund(700000, idempotency_key="w2")).json()
    assert ran["status"] == "approved"
    assert "standing approval of alice, bob" in ran["risk_reasons"][-1]["summary"]


def test_the_approval_form_offers_calls_like_this_prefilled_from_the_call(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 50000, "first")
    page = console("alice").get(f"/calls/{call.pk}/").content.decode()
    assert "Also approve calls like this" in page
    assert "&quot;maximum&quot;: 50000" in page and "&quot;const&quot;: &quot;produto_defeituoso&quot;" in page
    assert "idempotency_key" not in page.split('id="like-this-condition"')[1].split("</textarea>")[0]


@pytest.fixture(scope="module")
def two_web_processes(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two web server processes of their own on the test database; yield their base URLs."""
    servers = [WebProcess(tmp_path_factory.mktemp(f"standing-web-{n}"), "1") for n in range(2)]
    try:
        yield [server.start().url for server in servers]
    finally:
        for server in servers:
            server.stop()


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_matching_proposals_take_exactly_the_allowed_uses(
    two_web_processes: list[str], make_agent: AgentFactory
) -> None:
    tool = Tool.objects.get(name="emitir_estorno")
    for repetition in range(REPETITIONS):
        agent, token = make_agent(f"racer-{repetition}", {"emitir_estorno": 3})
        now = timezone.now()
        granted = StandingApproval.objects.create(
            agent=agent,
            tool=tool,
            tool_version=tool.version,
            risk_tier=2,
            condition=UP_TO_R600,
            max_uses=3,
            created_by_name="alice",
            activated_at=now,
            expires_at=now + timedelta(hours=1),
        )
        bodies = [refund(30000, idempotency_key=f"r{repetition}-{n}") for n in range(20)]
        results = propose_at_once(two_web_processes, token, bodies)
        assert sorted(status for status, _ in results) == [201] * 3 + [202] * 17, (repetition, results)
        # The module's worker may have started on them already: what matters is that no more than three left the queue.
        assert ToolCall.objects.filter(agent=agent).exclude(status=Status.PENDING_APPROVAL).count() == 3
        granted.refresh_from_db()
        assert granted.uses == 3
        assert Event.objects.filter(action="standing.used", agent_name=agent.name).count() == 3
    assert first_break() is None
