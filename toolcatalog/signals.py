"""`policy_changed`: the catalog telling whoever holds calls that the rules they were judged by changed.

The catalog cannot import the apps that store calls (imports point
audit ← toolcatalog ← agents ← approvals), so it announces the change and
`approvals` listens: every pending call of the tool is judged again ("no rug pulls").
"""

from __future__ import annotations

from django.db import transaction
from django.dispatch import Signal

# Sent after the change commits, with keyword arguments:
#   tool_id  — the tool whose schema, executor or rules changed; None: every tool (a tier changed)
#   agent_id — only this agent's calls (its grants or status changed); None: every agent
policy_changed = Signal()


def announce_policy_change(sender: type, *, tool_id: int | None = None, agent_id: int | None = None) -> None:
    """Send `policy_changed` once the current transaction commits (at once outside a transaction).

    After commit, so listeners read the new policy, and a rolled-back change is
    never announced. `robust`: a failing listener is logged, and cannot turn a
    change that already committed into an error page.
    """
    transaction.on_commit(
        lambda: policy_changed.send(sender=sender, tool_id=tool_id, agent_id=agent_id),
        robust=True,
    )
