"""A scripted demo agent: keeps proposing a realistic mix of calls through the REST API.

It stands in for an LLM-driven agent (no model involved: the point of Gatehouse is
that everything after the proposal is deterministic). Each round is one short
"conversation": look an order up and refund a little (runs by itself) or a lot
(waits for a reviewer), search seats and hold some (and sometimes release them),
send a wrong `motivo` and fix it from the structured error, retry with the same
key, ask for 40 seats and be refused by the schema.

Run by `make demo`; reads the agents' tokens from $GATEHOUSE_VAR_DIR/demo-tokens.json.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

WAIT = 10  # seconds each proposal long-polls for its outcome


def say(text: str) -> None:
    print(text, flush=True)


def brl(centavos: int) -> str:
    return f"R$ {centavos / 100:,.2f}".replace(",", "_").replace(".", ",").replace("_", ".")


class Conversation:
    """One agent's conversation: keys derive from (conversation, step, call), as seed 004 says."""

    def __init__(self, client: httpx.Client, agent: str, token: str) -> None:
        self.client = client
        self.agent = agent
        self.headers = {"Authorization": f"Bearer {token}"}
        self.id = f"demo-{uuid.uuid4().hex[:10]}"
        self.step = 0

    def propose(
        self, tool: str, arguments: dict[str, Any], *, step: int | None = None, why: str = ""
    ) -> httpx.Response:
        """Propose a call (a new step unless `step` repeats one); return the response."""
        if step is None:
            self.step += 1
        body = {
            "tool": tool,
            "arguments": arguments,
            "conversation_id": self.id,
            "step": self.step if step is None else step,
            "call_index": 0,
            "justification": why,
        }
        return self.client.post(f"/api/v1/tool-calls?wait={WAIT}", json=body, headers=self.headers)

    def report(self, what: str, response: httpx.Response) -> dict[str, Any]:
        """Print one line about a response; return its body."""
        body = response.json()
        outcome = body.get("status") or body.get("error")
        extra = " (replayed)" if response.headers.get("Idempotent-Replayed") == "true" else ""
        say(f"{self.agent:<17} {what} → {outcome}{extra}")
        return body


def order_status(conv: Conversation, order: str) -> dict[str, Any] | None:
    body = conv.report(f"get_order_status {order}", conv.propose("get_order_status", {"order_id": order}))
    return body.get("result") if body.get("status") == "succeeded" else None


def refund(conv: Conversation, low: int, high: int, orders: range) -> None:
    """Look an order up, then refund an amount in [low, high] of what is left to refund."""
    order = f"PED-{random.choice(orders):08d}"
    status = order_status(conv, order)
    if not status or status["refundable_centavos"] < low:
        return
    amount = random.randint(low, min(high, status["refundable_centavos"]))
    arguments = {"pedido_id": order, "valor_centavos": amount, "motivo": random.choice(MOTIVOS)}
    conv.report(f"emitir_estorno {brl(amount)} of {order}", conv.propose("emitir_estorno", arguments, why=WHY))


def small_refund(conv: Conversation) -> None:
    refund(conv, 500, 20000, range(1, 51))


def large_refund(conv: Conversation) -> None:
    refund(conv, 20001, 500000, range(5, 51, 5))  # orders from R$ 499,90 up


def critical_refund(conv: Conversation) -> None:
    refund(conv, 500001, 1000000, range(10, 51, 10))  # the R$ 15.000,00 orders


def wrong_enum_then_fix(conv: Conversation) -> None:
    """Send a motivo the schema does not accept, then correct it from the structured error."""
    arguments = {
        "pedido_id": f"PED-{random.randint(1, 50):08d}",
        "valor_centavos": 990,
        "motivo": "cliente_insatisfeito",
    }
    error = conv.report("emitir_estorno motivo=cliente_insatisfeito", conv.propose("emitir_estorno", arguments))
    accepted = next((e.get("accepted_values") for e in error.get("errors", []) if e.get("field") == "motivo"), None)
    if accepted:
        fixed = {**arguments, "motivo": "cancelamento_cliente" if "cancelamento_cliente" in accepted else accepted[0]}
        conv.report(f"emitir_estorno motivo={fixed['motivo']} (fixed)", conv.propose("emitir_estorno", fixed))


def retry_same_key(conv: Conversation) -> None:
    """A network blip makes the agent send the same step again: the same call comes back."""
    arguments = {"pedido_id": f"PED-{random.randint(1, 50):08d}", "valor_centavos": 1500, "motivo": "atraso_entrega"}
    conv.report("emitir_estorno R$ 15,00", conv.propose("emitir_estorno", arguments, why=WHY))
    conv.report("emitir_estorno R$ 15,00 (retry, same step)", conv.propose("emitir_estorno", arguments, step=conv.step))


def search_and_hold(conv: Conversation) -> None:
    """Seed 004: two seats under R$ 300 for Saturday; hold the cheapest, sometimes release it."""
    search = {"event_id": "show-sabado", "quantity": 2, "max_price_brl": 300}
    found = conv.report("search_seats show-sabado 2 ≤ R$ 300", conv.propose("search_seats", search))
    options = (found.get("result") or {}).get("options") or []
    if not options:
        return
    seats = options[0]["seat_ids"]
    held = conv.report(
        f"hold_seats {seats}", conv.propose("hold_seats", {"event_id": "show-sabado", "seat_ids": seats})
    )
    hold_id = (held.get("result") or {}).get("hold_id")
    if hold_id and random.random() < 0.5:  # the fan changed their mind: compensate
        conv.report(f"release_hold {hold_id}", conv.propose("release_hold", {"hold_id": hold_id}))


def oversized_hold(conv: Conversation) -> None:
    """Ask for 40 seats: the schema (at most 6) refuses before anything runs."""
    seats = [f"F{n}" for n in range(1, 15)] + [f"G{n}" for n in range(1, 15)] + [f"E{n}" for n in range(1, 13)]
    body = conv.report("hold_seats ×40", conv.propose("hold_seats", {"event_id": "show-sabado", "seat_ids": seats}))
    say(f"{'':<17}   {body.get('errors', [{}])[0].get('problem', '')}")


def visitor_search(conv: Conversation) -> None:
    search = {"event_id": "show-domingo", "quantity": 2, "max_price_brl": 200}
    conv.report("search_seats show-domingo 2 ≤ R$ 200", conv.propose("search_seats", search))


MOTIVOS = ["produto_defeituoso", "atraso_entrega", "cancelamento_cliente", "erro_cobranca"]
WHY = "The customer asked for a refund in the chat and the order qualifies."
Scenario = Callable[[Conversation], None]
# (agent, scenario, weight)
SCENARIOS: list[tuple[str, Scenario, int]] = [
    ("support-agent", small_refund, 6),
    ("support-agent", large_refund, 2),
    ("support-agent", critical_refund, 1),
    ("support-agent", wrong_enum_then_fix, 1),
    ("support-agent", retry_same_key, 1),
    ("box-office-agent", search_and_hold, 4),
    ("box-office-agent", oversized_hold, 1),
    ("visitor", visitor_search, 2),
]


def wait_for_web(client: httpx.Client, timeout: float = 90) -> None:
    """Return once the web process answers; exit if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client.get("/healthz")
            return
        except httpx.TransportError:
            time.sleep(0.5)
    sys.exit("the web process never answered")


def main() -> None:
    """Propose forever, one short conversation every couple of seconds."""
    var_dir = Path(os.environ.get("GATEHOUSE_VAR_DIR", "var"))
    tokens = json.loads((var_dir / "demo-tokens.json").read_text())
    url = os.environ.get("GATEHOUSE_DEMO_URL", "http://127.0.0.1:8000")
    with httpx.Client(base_url=url, timeout=WAIT + 20) as client:
        wait_for_web(client)
        say(f"demo agent proposing to {url}")
        weights = [weight for _, _, weight in SCENARIOS]
        while True:
            agent, scenario, _ = random.choices(SCENARIOS, weights=weights)[0]
            try:
                scenario(Conversation(client, agent, tokens[agent]))
            except (httpx.HTTPError, ValueError) as exc:
                say(f"{agent:<17} {scenario.__name__}: {exc!r}")
            time.sleep(random.uniform(1.5, 3.5))


if __name__ == "__main__":
    main()
