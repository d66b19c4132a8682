"""Signed checkpoints of the chain's head, exported outside the database.

A checkpoint says "event #N had hash H", signed with the deployment's secret. Kept
elsewhere (a file shipped to write-once storage), it reveals a log whose tail was
cut off, which the chain alone cannot: a shortened chain still verifies.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.core import signing
from django.utils import timezone

from audit.models import Event
from audit.typealiases import JSONObject

SALT = "gatehouse.audit.checkpoint"


def make_checkpoint() -> str | None:
    """Return a signed checkpoint of the current head, or None if the log is empty."""
    head = Event.objects.order_by("-seq").values_list("seq", "hash").first()
    if head is None:
        return None
    payload = {"seq": head[0], "hash": head[1], "at": timezone.now().isoformat()}
    return signing.dumps(payload, salt=SALT, compress=False)


def read_checkpoint(token: str) -> JSONObject:
    """Return a checkpoint's content; raise signing.BadSignature if it was not signed by us."""
    content: JSONObject = signing.loads(token, salt=SALT)
    return content


def checkpoint_problems(lines: Iterable[str]) -> list[str]:
    """Return what the checkpoints reveal about the stored chain (empty if consistent)."""
    problems = []
    last_seq = Event.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    for number, line in enumerate((line.strip() for line in lines), start=1):
        if not line:
            continue
        try:
            checkpoint = read_checkpoint(line)
        except signing.BadSignature:
            problems.append(f"checkpoint {number} has a bad signature")
            continue
        seq = checkpoint["seq"]
        if seq > last_seq:
            problems.append(
                f"checkpoint {number} saw event #{seq}, but the log ends at #{last_seq}: its tail was cut off"
            )
            continue
        stored = Event.objects.filter(seq=seq).values_list("hash", flat=True).first()
        if stored != checkpoint["hash"]:
            problems.append(f"checkpoint {number}: event #{seq} no longer has the hash it had")
    return problems
