"""Decision links: what a message was rendered for, signed, so a decision from it is bound like the console's.

A link carries the call id, the arguments hash and the tool version; the decision
counts only if the call still has those (approvals.decisions.Seen). Signing keeps
anyone from forging a link to other arguments; who decides is the signed-in reviewer,
never the link.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core import signing

from approvals.decisions import Seen
from approvals.models import ToolCall

SALT = "notifications.decision-link"
# A link outlives no approval window worth having; past this, open the call in the console.
MAX_AGE_SECONDS = 14 * 24 * 3600


@dataclass(frozen=True)
class Bound:
    """What a decision from a message is bound to."""

    call_id: str
    arguments_hash: str
    tool_version: int | None

    @property
    def seen(self) -> Seen:
        return Seen(arguments_hash=self.arguments_hash, tool_version=self.tool_version)

    def as_value(self) -> dict[str, object]:
        return {"c": self.call_id, "h": self.arguments_hash, "v": self.tool_version}

    @classmethod
    def from_value(cls, value: object) -> Bound:
        """Return the binding a signed value or a Slack button carries; ValueError if malformed."""
        if not isinstance(value, dict) or not isinstance(value.get("c"), str) or not isinstance(value.get("h"), str):
            raise ValueError("not a decision binding")
        version = value.get("v")
        if version is not None and not isinstance(version, int):
            raise ValueError("not a decision binding")
        return cls(call_id=value["c"], arguments_hash=value["h"], tool_version=version)


def bound_to(call: ToolCall) -> Bound:
    return Bound(call_id=str(call.pk), arguments_hash=call.arguments_hash, tool_version=call.tool_version)


def token_for(call: ToolCall) -> str:
    """Return the signed token of an email link for the call as it stands."""
    return signing.dumps(bound_to(call).as_value(), salt=SALT, compress=True)


def read_token(token: str) -> Bound:
    """Return what a link's token binds; signing.BadSignature (or ValueError) if forged, altered or too old."""
    return Bound.from_value(signing.loads(token, salt=SALT, max_age=MAX_AGE_SECONDS))
