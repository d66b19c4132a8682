"""Races decided by the database: approval against expiry, many approvals against one call."""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals import lifecycle
from approvals.decisions import DecisionRefused
from approvals.models import Decision, Status, ToolCall
from approvals.proposals import Proposal, propose
from audit.chain import first_break
from audit.models import Event

pytestmark = pytest.mark.django_db(transaction=True)


def make_reviewer(username: str) -> User:
    user = User.objects.create_user(username)
    group, _ = Group.objects.get_or_create(name="Reviewers")
    group.permissions.add(Permission.objects.get(codename="review_toolcall"))
    user.groups.add(group)
    return user


def pending_refund(agent, n: int) -> ToolCall:
    outcome = propose(
        agent,
        Proposal(
            tool="emitir_estorno",
            arguments={"pedido_id": "PED-00000001", "valor_centavos": 30000, "motivo": "erro_cobranca"},
            idempotency_key=f"race-{n}",
        ),
    )
    return outcome.call


def sleep_until(moment) -> None:
    time.sleep(max(0.0, (moment - timezone.now()).total_seconds()))


def in_parallel(*actions) -> None:
    barrier = threading.Barrier(len(actions))

    def run(action) -> None:
        barrier.wait()
        try:
            action()
        except DecisionRefused:
            pass
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(action,)) for action in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)


def test_approval_racing_expiry_ends_in_exactly_one_state_200_times(make_agent) -> None:
    agent, _ = make_agent("support-agent", {"emitir_estorno": 3})
    reviewer = make_reviewer("alice")
    outcomes = {"approved": 0, "expired": 0}
    for n in range(200):
        call = pending_refund(agent, n)
        # The window closes 20 ms from now; the sweeper fires exactly then, the reviewer
        # clicks within a few milliseconds either side of it.
        deadline = timezone.now() + timedelta(milliseconds=20)
        ToolCall.objects.filter(pk=call.pk).update(expires_at=deadline)
        call.refresh_from_db()
        click_at = deadline + timedelta(milliseconds=random.uniform(-4, 2))
        in_parallel(
            lambda c=call, at=click_at: (sleep_until(at), lifecycle.approve(c, reviewer)),
            lambda c=call, at=deadline: (sleep_until(at), lifecycle.expire(ToolCall.objects.get(pk=c.pk))),
        )
        # The sweeper comes by later: a call nobody approved in time expires now, once.
        time.sleep(max(0.0, (call.expires_at - timezone.now()).total_seconds()))
        lifecycle.expire(ToolCall.objects.get(pk=call.pk))
        final = ToolCall.objects.get(pk=call.pk)
        actions = list(
            Event.objects.filter(call_id=call.pk, action__in=["call.approved", "call.expired"]).values_list(
                "action", flat=True
            )
        )
        assert final.status in {Status.APPROVED, Status.EXPIRED}
        assert actions == [f"call.{final.status}"]
        outcomes[final.status] += 1
    assert sum(outcomes.values()) == 200
    print("approval vs expiry outcomes:", outcomes)
    assert first_break() is None


def test_fifty_concurrent_approvals_make_one_decision(make_agent) -> None:
    agent, _ = make_agent("support-agent", {"emitir_estorno": 3})
    reviewers = [make_reviewer(f"reviewer{n}") for n in range(50)]
    call = pending_refund(agent, 0)
    in_parallel(*[lambda r=r: lifecycle.approve(ToolCall.objects.get(pk=call.pk), r) for r in reviewers])
    assert ToolCall.objects.get(pk=call.pk).status == Status.APPROVED
    assert Event.objects.filter(call_id=call.pk, action="call.approved").count() == 1
    assert Decision.objects.filter(call=call, kind="approve").count() == 1


def test_one_reviewer_clicking_approve_fifty_times_counts_once(make_agent) -> None:
    agent, _ = make_agent("support-agent", {"emitir_estorno": 3})
    alice = make_reviewer("alice")
    outcome = propose(
        agent,
        Proposal(
            tool="emitir_estorno",
            arguments={"pedido_id": "PED-00000001", "valor_centavos": 800000, "motivo": "erro_cobranca"},
            idempotency_key="four-eyes",
        ),
    )
    call = outcome.call
    in_parallel(*[lambda: lifecycle.approve(ToolCall.objects.get(pk=call.pk), alice) for _ in range(50)])
    call.refresh_from_db()
    assert call.status == Status.PENDING_APPROVAL
    assert call.approval_count() == 1


def test_an_approval_is_one_transaction_that_locks_the_call_once(make_agent) -> None:
    agent, _ = make_agent("support-agent", {"emitir_estorno": 3})
    call = pending_refund(agent, 0)
    alice = make_reviewer("alice")

    with CaptureQueriesContext(connection) as queries:
        assert lifecycle.approve(call, alice) is True

    statements = [query["sql"] for query in queries]
    assert sum("FOR UPDATE" in sql for sql in statements) == 1
    assert not any("SAVEPOINT" in sql for sql in statements)  # nothing nested inside the one transaction
    assert call.status == Status.APPROVED
