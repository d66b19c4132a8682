"""Scripted scenarios: what a model would do, as code, so the loop runs with no LLM.

Each script step reads the previous step's tool results (as a model would) and
decides the next turn. The seat scenarios follow seed 004's task, "find two
seats under R$ 300 for Saturday and hold them", on the demo box office.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from agentloop.jsontypes import JSONObject
from agentloop.loop import ABANDON_TOOL
from agentloop.models import Message, ModelTurn, ScriptedModel, ScriptStep, tool, tool_results

SATURDAY, SUNDAY = "show-sabado", "show-domingo"
SEATS_TASK = (
    "Find two seats under R$ 300 for Saturday and hold them. "
    f"Events: {SATURDAY} (Saturday), {SUNDAY} (Sunday); if Saturday has nothing, try Sunday."
)
MAX_PRICE_BRL = 299.99


def search_both_days(messages: Sequence[Message]) -> ModelTurn:
    """Step 1: search Saturday and Sunday at once (independent calls: one round trip, not two)."""
    return ModelTurn(
        text="Searching Saturday, and Sunday as the fallback, in parallel.",
        tool_calls=(
            tool("search_seats", {"event_id": SATURDAY, "quantity": 2, "max_price_brl": MAX_PRICE_BRL}, "c-sat"),
            tool("search_seats", {"event_id": SUNDAY, "quantity": 2, "max_price_brl": MAX_PRICE_BRL}, "c-sun"),
        ),
    )


def cheapest_option(results: list[JSONObject]) -> tuple[str, JSONObject] | None:
    """Return (event, option) for Saturday's cheapest pair, else Sunday's, else None."""
    for body in results:  # Saturday's result comes first: prefer it
        result: JSONObject = (body.get("result") if body.get("status") == "succeeded" else None) or {}
        options = result.get("options") or []
        if options:
            return result["event_id"], options[0]
    return None


def hold_cheapest(messages: Sequence[Message]) -> ModelTurn:
    """Step 2: hold the cheapest adjacent pair found (or give up if there is none)."""
    choice = cheapest_option(tool_results(messages))
    if choice is None:
        return ModelTurn(tool_calls=(tool(ABANDON_TOOL, {"reason": "No two seats under R$ 300 on either day."}),))
    event_id, option = choice
    return ModelTurn(
        text=f"Holding {', '.join(option['seat_ids'])} ({option['section']}, R$ {option['price_brl']:.2f} each).",
        tool_calls=(tool("hold_seats", {"event_id": event_id, "seat_ids": option["seat_ids"]}, "c-hold"),),
    )


def report_hold(messages: Sequence[Message]) -> ModelTurn:
    """Step 3: tell the user what is held, or give up when the hold failed."""
    (body,) = tool_results(messages)
    if body.get("status") != "succeeded":
        return ModelTurn(tool_calls=(tool(ABANDON_TOOL, {"reason": f"The hold failed: {body}"}),))
    hold = body["result"]
    return ModelTurn(
        text=f"Held seats {', '.join(hold['seat_ids'])} for Saturday (hold {hold['hold_id']}, "
        f"R$ {hold['total_brl']:.2f} in total) until {hold['expires_at']}. Pay before then to keep them."
    )


def charge_card(messages: Sequence[Message]) -> ModelTurn:
    """The payment step: this agent has no payment tool, so Gatehouse refuses it (as data)."""
    (body,) = tool_results(messages)
    hold_id = (body.get("result") or {}).get("hold_id", "")
    return ModelTurn(
        text="Charging the fan's card for the held seats.",
        tool_calls=(tool("charge_card", {"hold_id": hold_id, "amount_brl": 300}, "c-pay"),),
    )


def give_up_after_payment(messages: Sequence[Message]) -> ModelTurn:
    """After the payment failed: abandon, so the loop releases the hold (the saga's compensation)."""
    (body,) = tool_results(messages)
    return ModelTurn(tool_calls=(tool(ABANDON_TOOL, {"reason": f"Payment failed: {body.get('error')}"}),))


def seats_model() -> ScriptedModel:
    """Seed 004's task end to end: search (parallel), hold, answer."""
    return ScriptedModel([search_both_days, hold_cheapest, report_hold])


def payment_fails_model() -> ScriptedModel:
    """Search, hold, then a payment step that fails: the run abandons and the hold is released."""
    return ScriptedModel([search_both_days, hold_cheapest, charge_card, give_up_after_payment])


def never_finishes_model() -> ScriptedModel:
    """Compares seats forever (seed 004's failure mode): only the step budget stops it."""
    return ScriptedModel([search_both_days], repeat_last=True)


# The rest of `make demo`'s realistic mix (from the scripted REST agent this loop replaced).

MOTIVOS = ["produto_defeituoso", "atraso_entrega", "cancelamento_cliente", "erro_cobranca"]


def lookup_order(order_id: str) -> ScriptStep:
    """A step that looks an order up before refunding it."""
    return lambda messages: ModelTurn(
        text=f"Checking {order_id} before refunding.",
        tool_calls=(tool("get_order_status", {"order_id": order_id}, "c-order"),),
    )


def refund_from_status(low: int, high: int, rng: random.Random) -> ScriptStep:
    """A step that refunds an amount in [low, high] of what the order can still refund."""

    def step(messages: Sequence[Message]) -> ModelTurn:
        (body,) = tool_results(messages)
        order = body.get("result") or {}
        refundable = int(order.get("refundable_centavos") or 0)
        if refundable < low:
            return ModelTurn(text=f"Nothing to refund: {order.get('order_id', 'the order')} has {refundable} left.")
        arguments = {
            "pedido_id": order["order_id"],
            "valor_centavos": rng.randint(low, min(high, refundable)),
            "motivo": rng.choice(MOTIVOS),
        }
        why = "The customer asked for a refund in the chat and the order qualifies."
        return ModelTurn(text=why, tool_calls=(tool("emitir_estorno", arguments, "c-refund"),))

    return step


def report_last(messages: Sequence[Message]) -> ModelTurn:
    """A closing step: say what the last call came to (a pending refund is an answer too)."""
    (body,) = tool_results(messages)
    status = body.get("status") or body.get("error")
    if status == "pending_approval":
        return ModelTurn(text=f"A reviewer must approve this refund first (call {body['id']}); I will follow it up.")
    return ModelTurn(text=f"The call ended as {status}.")


def refund_model(low: int, high: int, orders: Sequence[int], rng: random.Random) -> ScriptedModel:
    """Look an order up, refund part of it (small: runs at once; large: waits for a reviewer), report."""
    order_id = f"PED-{rng.choice(orders):08d}"
    return ScriptedModel([lookup_order(order_id), refund_from_status(low, high, rng), report_last])


def wrong_motivo_then_fix_model(rng: random.Random) -> ScriptedModel:
    """Send a motivo the schema refuses, then fix it from the structured error (errors are data)."""
    arguments = {"pedido_id": f"PED-{rng.randint(1, 50):08d}", "valor_centavos": 990, "motivo": "cliente_insatisfeito"}

    def fix(messages: Sequence[Message]) -> ModelTurn:
        (error,) = tool_results(messages)
        accepted = next((e["accepted_values"] for e in error.get("errors", []) if e.get("field") == "motivo"), None)
        if not accepted:
            return ModelTurn(text=f"Unexpected answer: {error}")
        fixed = {**arguments, "motivo": "cancelamento_cliente" if "cancelamento_cliente" in accepted else accepted[0]}
        return ModelTurn(text="Fixing motivo from the accepted values.", tool_calls=(tool("emitir_estorno", fixed),))

    first = ModelTurn(text="Refunding R$ 9,90.", tool_calls=(tool("emitir_estorno", arguments),))
    return ScriptedModel([lambda messages: first, fix, report_last])


def oversized_hold_model() -> ScriptedModel:
    """Ask to hold 40 seats: the schema (at most 6) refuses before anything runs; explain the limit."""
    seats = [f"F{n}" for n in range(1, 15)] + [f"G{n}" for n in range(1, 15)] + [f"E{n}" for n in range(1, 13)]
    ask = ModelTurn(tool_calls=(tool("hold_seats", {"event_id": SATURDAY, "seat_ids": seats}),))

    def explain(messages: Sequence[Message]) -> ModelTurn:
        (error,) = tool_results(messages)
        problem = (error.get("errors") or [{}])[0].get("problem", error.get("message", ""))
        return ModelTurn(text=f"I can hold at most 6 seats at a time (seat_ids {problem}).")

    return ScriptedModel([lambda messages: ask, explain])


def visitor_search_model() -> ScriptedModel:
    """An anonymous visitor only searches (it cannot even see hold_seats)."""
    search = ModelTurn(
        tool_calls=(tool("search_seats", {"event_id": SUNDAY, "quantity": 2, "max_price_brl": 200}, "c-search"),)
    )
    return ScriptedModel([lambda messages: search, report_last])


UPSTREAM_TASK = f"Find four seats together for Sunday ({SUNDAY}) at the box office's own system and hold them."


def upstream_hold_model() -> ScriptedModel:
    """Seats from the box office's own MCP server (through Gatehouse): four together, so the hold waits for a person."""
    search = ModelTurn(tool_calls=(tool("boxoffice_search_seats", {"event_id": SUNDAY, "quantity": 4}, "c-up-search"),))

    def hold_first(messages: Sequence[Message]) -> ModelTurn:
        (body,) = tool_results(messages)
        result = (body.get("result") or {}).get("structuredContent") or {}
        options = result.get("options") or []
        if not options:
            return ModelTurn(text=f"No four seats together on Sunday ({body.get('status') or body.get('error')}).")
        seats = {"event_id": SUNDAY, "seat_ids": options[0]["seat_ids"]}
        return ModelTurn(tool_calls=(tool("boxoffice_hold_seats", seats, "c-up-hold"),))

    def report(messages: Sequence[Message]) -> ModelTurn:
        (body,) = tool_results(messages)
        if body.get("status") == "pending_approval":
            return ModelTurn(text=f"A hold of four seats waits for a reviewer (call {body['id']}).")
        return ModelTurn(text=f"The hold ended as {body.get('status') or body.get('error')}.")

    return ScriptedModel([lambda messages: search, hold_first, report])
