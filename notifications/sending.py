"""One attempt at a delivery, on the worker: claimed, sent outside any transaction, its outcome recorded."""

from __future__ import annotations

import logging
from collections.abc import Callable

from approvals.models import ToolCall
from approvals.states import Status
from audit.typealiases import JSONObject
from notifications import outbox
from notifications.channels import ChannelError, mail, slack, webhooks
from notifications.models import Delivery, EventType, Kind

log = logging.getLogger(__name__)

Sender = Callable[[Delivery, ToolCall | None], JSONObject]
SENDERS: dict[str, Sender] = {Kind.EMAIL: mail.send, Kind.SLACK: slack.send, Kind.WEBHOOK: webhooks.send}
# Messages that ask a person for a decision: pointless once the call no longer waits. A webhook
# consumer gets every event still: it keeps a record, and the event did happen.
ASKING = frozenset({EventType.PENDING, EventType.REMINDER, EventType.ESCALATED})
TO_PEOPLE = frozenset({Kind.EMAIL, Kind.SLACK})


def attempt(delivery: Delivery) -> str:
    """Send a claimed delivery and record what happened; return the outcome ("delivered", "retry", …)."""
    call = _call_of(delivery)
    if _no_longer_asks(delivery, call):
        outbox.skipped(delivery, "the call no longer waits for a decision")
        return "skipped"
    try:
        # Outside any transaction: a slow channel holds no lock and no connection in a transaction.
        external = SENDERS[delivery.channel.kind](delivery, call)
    except ChannelError as exc:
        retry_at = outbox.failed_attempt(delivery, str(exc))
        log.warning("delivery %s to %s failed (%s); retry at %s", delivery.pk, delivery.channel.name, exc, retry_at)
        return "retry" if retry_at else "failed"
    outbox.delivered(delivery, external)
    return "delivered"


def _no_longer_asks(delivery: Delivery, call: ToolCall | None) -> bool:
    """Return whether the delivery asks a person to decide a call that no longer waits."""
    asking = delivery.event_type in ASKING and delivery.channel.kind in TO_PEOPLE
    return asking and (call is None or call.status != Status.PENDING_APPROVAL)


def _call_of(delivery: Delivery) -> ToolCall | None:
    if delivery.call_id is None:
        return None
    return ToolCall.objects.select_related("agent", "tool").filter(pk=delivery.call_id).first()


def send_now(delivery_id: str) -> str:
    """Claim and send one delivery in this process (the worker's task, and `channel test`); return the outcome."""
    delivery = outbox.claim(delivery_id)
    if delivery is None:
        return "taken"  # delivered, or another worker has it
    return attempt(delivery)
