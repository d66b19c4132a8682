"""Load through a real HTTP server: many agents, many proposals, nothing lost, no 5xx."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from approvals.models import Status, ToolCall
from audit.chain import first_break
from audit.models import Event
from audit.sequencer import seal_all
from tests.conftest import refund

pytestmark = pytest.mark.django_db(transaction=True)

AGENTS = 20
PER_AGENT = 100


def propose_many(base_url: str, token: str, agent_index: int) -> list[int]:
    """Send PER_AGENT distinct proposals (every tenth one invalid); return the statuses."""
    statuses = []
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        for n in range(PER_AGENT):
            motivo = "motivo_errado" if n % 10 == 9 else "erro_cobranca"
            body = refund(20001 + n, motivo=motivo, idempotency_key=f"load-{agent_index}-{n}")
            statuses.append(client.post("/api/v1/tool-calls", json=body).status_code)
    return statuses


def test_two_thousand_proposals_from_twenty_agents_lose_nothing(live_server, make_agent) -> None:
    tokens = [make_agent(f"load-agent-{i}", {"emitir_estorno": 3})[1] for i in range(AGENTS)]
    with ThreadPoolExecutor(max_workers=AGENTS) as pool:
        results = list(
            pool.map(lambda args: propose_many(live_server.url, *args), zip(tokens, range(AGENTS), strict=True))
        )
    statuses = [status for agent_statuses in results for status in agent_statuses]
    assert len(statuses) == AGENTS * PER_AGENT
    assert not [status for status in statuses if status >= 500]
    assert statuses.count(202) == AGENTS * PER_AGENT * 9 // 10
    assert statuses.count(422) == AGENTS * PER_AGENT // 10
    assert ToolCall.objects.filter(status=Status.PENDING_APPROVAL).count() == statuses.count(202)
    assert ToolCall.objects.filter(status=Status.REFUSED).count() == statuses.count(422)
    assert Event.objects.filter(action__in=["call.proposed", "call.refused"]).count() == len(statuses)
    assert seal_all() >= len(statuses)
    assert first_break() is None
