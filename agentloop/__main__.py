"""Run the reference agent loop against Gatehouse: `python -m agentloop --help`.

Scripted scenarios need no LLM; `--llm` uses any OpenAI-compatible endpoint
(GATEHOUSE_LLM_URL, GATEHOUSE_LLM_MODEL, GATEHOUSE_LLM_API_KEY).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from agentloop.loop import Budgets, RunResult, run_task
from agentloop.models import Model, OpenAICompatibleModel
from agentloop.scenarios import SEATS_TASK, never_finishes_model, payment_fails_model, seats_model

SCENARIOS: dict[str, Callable[[], Model]] = {
    "seats": seats_model,
    "payment-fails": payment_fails_model,
    "never-finishes": never_finishes_model,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m agentloop", description=__doc__)
    parser.add_argument("--url", default=os.environ.get("GATEHOUSE_MCP_URL", "http://127.0.0.1:8000/mcp"))
    parser.add_argument("--token", default=os.environ.get("GATEHOUSE_AGENT_TOKEN", ""), help="the agent's token")
    parser.add_argument("--tokens-file", default="var/demo-tokens.json", help="seed_demo's tokens (without --token)")
    parser.add_argument("--agent", default="box-office-agent", help="which agent of --tokens-file")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="seats")
    parser.add_argument("--llm", action="store_true", help="use GATEHOUSE_LLM_* instead of a script")
    parser.add_argument("--task", default=SEATS_TASK, help="the task given to an --llm model")
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=40_000)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--json", action="store_true", help="print the run as JSON")
    return parser.parse_args(argv)


def token_from(args: argparse.Namespace) -> str:
    """Return the agent token from --token, else from seed_demo's tokens file."""
    if args.token:
        return str(args.token)
    path = Path(args.tokens_file)
    if not path.exists():
        sys.exit(f"No --token and no {path}: run `python manage.py seed_demo` or pass --token.")
    token: str = json.loads(path.read_text())[args.agent]
    return token


def summary(run: RunResult) -> str:
    """Return one line describing a run."""
    calls = ", ".join(f"{call.tool}:{call.status}" for call in run.calls) or "no calls"
    undone = ", ".join(f"{call.tool}:{call.status}" for call in run.compensations)
    line = (
        f"[{run.conversation_id[:8]}] {run.status}"
        f"{' (' + run.stop_reason + ')' if run.stop_reason else ''} after {run.steps} step(s), "
        f"{run.tokens} tokens, {run.seconds:.1f} s — {calls}"
    )
    if undone:
        line += f" — compensated: {undone}"
    return line + (f"\n  answer: {run.answer}" if run.answer else "")


def as_json(run: RunResult) -> dict[str, object]:
    """Return a run as plain data (without the message history)."""
    fields = ("conversation_id", "status", "answer", "stop_reason", "steps", "tokens", "seconds")
    return {
        **{name: getattr(run, name) for name in fields},
        "calls": [call.data for call in run.calls],
        "compensations": [call.data for call in run.compensations],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    model = OpenAICompatibleModel.from_env() if args.llm else SCENARIOS[args.scenario]()
    task = args.task if args.llm else SEATS_TASK
    budgets = Budgets(max_steps=args.max_steps, max_tokens=args.max_tokens, max_seconds=args.max_seconds)
    run = asyncio.run(run_task(model, args.url, token_from(args), task, budgets=budgets))
    if args.json:
        print(json.dumps(as_json(run), ensure_ascii=False))
    else:
        print(summary(run))
    return 0 if run.status == "completed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
