"""`make demo`'s agent: the reference loop, over MCP, playing a realistic mix forever.

Each round is one short conversation by one demo agent, a scripted model driving
`AgentLoop` through `/mcp`: seed 004's seat task (sometimes with a payment step
that fails, so the hold is compensated), refunds that run by themselves or wait
for a reviewer, a wrong `motivo` fixed from the structured error, a restarted
conversation that replays instead of refunding twice, 40 seats refused by the
schema, a visitor who can only search, holds of four seats at the box office's
own MCP server (the upstream `boxoffice`) that wait for a reviewer, and now and
then a model that never finishes and is stopped by its step budget.

Reads the agents' tokens from $GATEHOUSE_VAR_DIR/demo-tokens.json; talks to
$GATEHOUSE_DEMO_URL/mcp.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

from agentloop import scenarios
from agentloop.loop import Budgets, RunResult, run_task
from agentloop.models import ScriptedModel

Round = Callable[[random.Random], list[ScriptedModel]]  # one model per run; runs share a conversation


def seats(rng: random.Random) -> list[ScriptedModel]:
    return [scenarios.payment_fails_model() if rng.random() < 0.3 else scenarios.seats_model()]


def small_refund(rng: random.Random) -> list[ScriptedModel]:
    return [scenarios.refund_model(500, 20000, range(1, 51), rng)]


def large_refund(rng: random.Random) -> list[ScriptedModel]:
    return [scenarios.refund_model(20001, 500000, range(5, 51, 5), rng)]  # orders from R$ 499,90 up


def critical_refund(rng: random.Random) -> list[ScriptedModel]:
    return [scenarios.refund_model(500001, 1000000, range(10, 51, 10), rng)]  # the R$ 15.000,00 orders


def restarted_refund(rng: random.Random) -> list[ScriptedModel]:
    """The same conversation run twice (a crashed process, restarted): the second run replays."""
    seed = rng.random()
    return [scenarios.refund_model(500, 1500, range(1, 51), random.Random(seed)) for _ in range(2)]


# (agent, round, weight)
ROUNDS: list[tuple[str, Round, int]] = [
    ("support-agent", small_refund, 5),
    ("support-agent", large_refund, 2),
    ("support-agent", critical_refund, 1),
    ("support-agent", lambda rng: [scenarios.wrong_motivo_then_fix_model(rng)], 1),
    ("support-agent", restarted_refund, 1),
    ("box-office-agent", seats, 4),
    ("box-office-agent", lambda rng: [scenarios.oversized_hold_model()], 1),
    ("box-office-agent", lambda rng: [scenarios.never_finishes_model()], 1),
    ("visitor", lambda rng: [scenarios.visitor_search_model()], 2),
    ("box-office-upstream", lambda rng: [scenarios.upstream_hold_model()], 2),
]
BUDGETS = Budgets(max_steps=4, max_seconds=60)
TASKS = {
    "box-office-agent": scenarios.SEATS_TASK,
    "visitor": "Show me two seats for Sunday under R$ 200.",
    "box-office-upstream": scenarios.UPSTREAM_TASK,
}


def say(text: str) -> None:
    print(text, flush=True)


def report(agent: str, run: RunResult) -> None:
    """Print one line per call and one for the run."""
    for call in [*run.calls, *run.compensations]:
        replayed = " (replayed)" if call.summary.startswith("Replayed:") else ""
        compensation = " [compensation]" if call in run.compensations else ""
        say(
            f"{agent:<17} {call.tool} → {call.status if call.status != 'error' else call.data.get('error')}"
            f"{replayed}{compensation}"
        )
    reason = f" ({run.stop_reason})" if run.stop_reason else ""
    say(f"{agent:<17} run {run.status}{reason}: {run.steps} step(s), {run.tokens} tokens — {run.answer[:120]}")


async def play(url: str, tokens: dict[str, str], rng: random.Random) -> None:
    """Play one weighted round."""
    agent, make_round, _ = rng.choices(ROUNDS, weights=[weight for _, _, weight in ROUNDS])[0]
    conversation = f"demo-{uuid.uuid4().hex[:10]}"
    task = TASKS.get(agent, "Help the customer with their order and refund if it qualifies.")
    for model in make_round(rng):
        run = await run_task(model, url, tokens[agent], task, conversation_id=conversation, budgets=BUDGETS)
        report(agent, run)


async def wait_for_web(base_url: str, timeout: float = 90) -> None:
    """Return once the web process answers; raise if it never does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with httpx.AsyncClient(base_url=base_url) as http:
        while True:
            try:
                await http.get("/healthz")
                return
            except httpx.TransportError:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.5)


async def main() -> None:
    """Play rounds forever, one every couple of seconds."""
    var_dir = Path(os.environ.get("GATEHOUSE_VAR_DIR", "var"))
    tokens = json.loads((var_dir / "demo-tokens.json").read_text())
    base_url = os.environ.get("GATEHOUSE_DEMO_URL", "http://127.0.0.1:8000")
    await wait_for_web(base_url)
    say(f"demo agent loop talking MCP to {base_url}/mcp")
    rng = random.Random()
    while True:
        try:
            await play(f"{base_url}/mcp", tokens, rng)
        except Exception as exc:  # noqa: BLE001 — the demo keeps going; the line says what broke
            detail = getattr(exc, "error", None)
            say(f"demo round failed: {exc!r}{f' {detail!r}' if detail else ''}")
        await asyncio.sleep(rng.uniform(1.5, 3.5))


if __name__ == "__main__":
    asyncio.run(main())
