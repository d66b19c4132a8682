"""The console's overview and audit log: figures, filters, streamed exports, the chain's verdict."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import CircuitBreaker
from audit.chain import record_alone
from audit.models import Event
from audit.sequencer import seal_all
from tests.browser import Console, page_text
from tests.browser import propose_refund as propose
from tests.conftest import AgentApi, refund

pytestmark = pytest.mark.django_db


# Overview


def test_the_overview_shows_pending_decisions_per_tool_replays_and_breakers(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    approved = propose(support, 30000, "k-o1")
    rejected = propose(support, 30000, "k-o2")
    propose(support, 30000, "k-o3")
    alice = console("alice")
    alice.approve(approved)
    alice.post(f"/calls/{rejected.pk}/reject/", {"reason": "no"})
    support.propose(refund(30000, idempotency_key="k-o3"))  # a retry: absorbed by idempotency
    html = page_text(alice.get("/overview/"))
    assert "pending now" in html and "median time to decision" in html
    assert "emitir_estorno" in html
    replays = Event.objects.filter(action="call.replayed").count()
    assert replays == 1
    assert 'stat-value">1</span><span class="stat-label">duplicates absorbed' in html


# Audit log


def tamper(sql: str, params: list[object]) -> None:
    """Change an event behind the append-only guard, as someone with the database's keys could."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE audit_event DISABLE TRIGGER audit_event_no_update_delete")
        cursor.execute(sql, params)
        cursor.execute("ALTER TABLE audit_event ENABLE TRIGGER audit_event_no_update_delete")


AUDIT_PAGES = ("/audit/", "/audit/chain/", "/audit/export.csv", "/audit/export.jsonl")
AUDIT_LINK = 'href="/audit/"'


def user_with(username: str, *codenames: str) -> User:
    """Return a new user holding exactly the permissions named (by codename), directly."""
    user = User.objects.create_user(username)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def test_the_reviewer_permission_alone_opens_no_audit_page_and_the_nav_does_not_offer_it() -> None:
    reviewer = Console(user_with("rita", "review_toolcall"))

    for path in AUDIT_PAGES:
        assert reviewer.get(path).status_code == 403, path
    queue = reviewer.get("/")
    assert queue.status_code == 200
    assert AUDIT_LINK not in queue.content.decode()


def test_the_audit_permission_opens_the_audit_pages_and_the_nav_offers_only_them() -> None:
    auditor = Console(user_with("otto", "browse_auditlog"))

    for path in AUDIT_PAGES:
        assert auditor.get(path).status_code == 200, path
    page = auditor.get("/audit/").content.decode()
    assert AUDIT_LINK in page and 'href="/activity/"' not in page
    assert auditor.get("/").status_code == 403


def test_a_reviewer_who_may_also_browse_the_audit_log_is_offered_it_in_the_nav() -> None:
    both = Console(user_with("bea", "review_toolcall", "browse_auditlog"))

    assert both.get("/audit/").status_code == 200
    assert AUDIT_LINK in both.get("/").content.decode()


def migrate_audit_to(target: str) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([("audit", target)])


def test_the_migration_grants_the_audit_permission_to_every_existing_reviewer_group_and_user() -> None:
    # As before the upgrade: the audit permission does not exist yet (post_migrate creates it after migrations).
    Permission.objects.filter(codename="browse_auditlog").delete()
    migrate_audit_to("0003_fewer_indexes")
    review = Permission.objects.get(codename="review_toolcall", content_type__app_label="approvals")
    reviewers = Group.objects.create(name="Refund desk")
    reviewers.permissions.add(review)
    others = Group.objects.create(name="Finance")
    member, direct, neither = (
        User.objects.create_user("gina"),
        User.objects.create_user("dirk"),
        User.objects.create_user("nel"),
    )
    member.groups.add(reviewers)
    direct.user_permissions.add(review)
    neither.groups.add(others)

    migrate_audit_to("0004_browse_auditlog_permission")

    browse = Permission.objects.get(codename="browse_auditlog", content_type__app_label="audit")
    assert list(browse.group_set.all()) == [reviewers]
    assert list(browse.user_set.all()) == [direct]
    assert [User.objects.get(pk=user.pk).has_perm("audit.browse_auditlog") for user in (member, direct, neither)] == [
        True,
        True,
        False,
    ]


def test_the_audit_log_filters_by_agent_tool_action_call_and_dates(
    support: AgentApi, agent_api: Callable[..., AgentApi], console: Callable[[str], Console]
) -> None:
    call = propose(support, 30000, "k-log1")
    propose(agent_api("other-agent", {"emitir_estorno": 3}), 30000, "k-log2")
    alice = console("alice")
    alice.post(f"/calls/{call.pk}/reject/", {"reason": "nope"})
    rows = page_text(alice.get("/audit/?agent=other-agent", htmx=True))
    assert "other-agent" in rows and "call.rejected" not in rows
    rows = page_text(alice.get("/audit/?action=call.rejected", htmx=True))
    assert str(call.pk)[:8] in rows and rows.count('<td class="num muted">') == 1
    rows = page_text(alice.get(f"/audit/?call={call.pk}", htmx=True))
    assert "call.proposed" in rows and "call.rejected" in rows and "other-agent" not in rows
    today = timezone.now().date()
    assert "call.proposed" in page_text(alice.get(f"/audit/?date_from={today}&date_to={today}", htmx=True))
    assert "No events match" in page_text(alice.get(f"/audit/?date_to={today - timedelta(days=1)}", htmx=True))


def test_the_audit_log_pages_by_sequence_with_a_constant_number_of_queries(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    alice = console("alice")
    propose(support, 30000, "k-page-0")
    with CaptureQueriesContext(connection) as few:
        alice.get("/audit/")
    for index in range(150):
        record_alone("test.filler", actor=("system", "test"), data={"n": index})
    seal_all()
    with CaptureQueriesContext(connection) as many:
        first = page_text(alice.get("/audit/"))
    assert len(many) == len(few)
    assert "Older →" in first
    newest = Event.objects.order_by("-seq").first()
    older = page_text(alice.get(f"/audit/?before={newest.seq - 99}"))
    assert f'<td class="num muted">{newest.seq - 100}</td>' in older


def test_audit_exports_stream_csv_and_json_lines_with_the_filters(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    call = propose(support, 30000, "k-export")
    alice = console("alice")
    alice.post(f"/calls/{call.pk}/reject/", {"reason": "=HYPERLINK(1)"})
    seal_all()
    response = alice.get(f"/audit/export.jsonl?call={call.pk}")
    assert response.streaming and response["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert [line["action"] for line in lines] == ["call.proposed", "call.rejected"]
    assert lines[1]["data"]["reason"] == "=HYPERLINK(1)"  # exact: hashes can be recomputed from it
    response = alice.get(f"/audit/export.csv?call={call.pk}")
    assert response.streaming and response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [row["action"] for row in rows] == ["call.proposed", "call.rejected"]
    assert rows[0]["hash"] == lines[0]["hash"]


def test_the_audit_page_says_whether_the_hash_chain_verifies(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    propose(support, 30000, "k-chain")
    seal_all()
    alice = console("alice")
    assert "Hash chain verifies" in page_text(alice.get("/audit/chain/?fresh=1", htmx=True))
    tamper("UPDATE audit_event SET data = %s WHERE seq = 1", ['{"forged": true}'])
    broken = page_text(alice.get("/audit/chain/?fresh=1", htmx=True))
    assert "Hash chain broken at event #1" in broken


def test_an_open_circuit_breaker_shows_on_the_overview_and_a_reviewer_resets_it(
    support: AgentApi, console: Callable[[str], Console]
) -> None:
    for attempt in range(5):
        support.propose(refund(motivo="porque_sim", idempotency_key=f"k-loop-{attempt}"))
    breaker = CircuitBreaker.objects.get()
    assert breaker.opened_at is not None
    alice = console("alice")
    html = page_text(alice.get("/overview/"))
    assert "invalid_arguments" in html and f"/breakers/{breaker.pk}/reset/" in html
    response = alice.post(f"/breakers/{breaker.pk}/reset/", follow=True)
    assert "Circuit breaker of support-agent / emitir_estorno reset." in page_text(response)
    breaker.refresh_from_db()
    assert breaker.opened_at is None
    assert Event.objects.filter(action="circuit.reset", actor_name="alice").exists()
