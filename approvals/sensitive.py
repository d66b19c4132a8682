"""A call's sensitive argument values: encrypted in the vault from proposal until the call is settled.

The call's row keeps its arguments redacted (toolcatalog.sensitive: each sensitive value
replaced by its keyed hash), so hashes, approvals and audit events bind the exact values
without holding them. The values themselves sit in one vault.Secret per call, written in
the transaction that stores the call (or a reviewer's edit of it) and deleted in the one
that settles it. Only the executor's context, the policy's re-checks and a reviewer's
"keep this value" see them; what a downstream answers is scrubbed of them before it is
stored, audited or shown.
"""

from __future__ import annotations

import json

from approvals.models import ToolCall
from audit.canonical import canonical_json
from audit.typealiases import JSONObject, JSONValue
from toolcatalog import sensitive
from toolcatalog.models import Tool
from vault.models import Secret
from vault.secrets import MASK

# Shorter strings are not scrubbed from a downstream's answers: "12" would mask every amount holding it.
MIN_SCRUBBED_LENGTH = 4


def secret_name(call_id: object) -> str:
    """Return the name of the vault row holding a call's sensitive values."""
    return f"call-arguments:{call_id}"


def split(tool: Tool, arguments: JSONObject) -> tuple[JSONObject, JSONObject]:
    """Return (the arguments as a call stores them, the sensitive values to keep apart)."""
    if not sensitive.has_sensitive(tool):
        return arguments, {}
    return sensitive.redact(tool.input_schema, arguments)


def redacted(tool: Tool, arguments: JSONObject) -> JSONObject:
    """Return the arguments as a call stores and hashes them (sensitive values as their keyed hashes)."""
    return split(tool, arguments)[0]


def keep(call: ToolCall, values: JSONObject) -> None:
    """Store (or replace) a call's sensitive values, encrypted; inside the transaction that stores the call."""
    if not values:
        Secret.objects.filter(name=secret_name(call.pk)).delete()
        return
    Secret.objects.update_or_create(
        name=secret_name(call.pk),
        defaults={"purpose": f"sensitive arguments of call {call.pk}", "value": canonical_json(values)},
    )


def kept_values(call: ToolCall) -> JSONObject:
    """Return the call's sensitive values ({} once erased, or when it has none)."""
    if not sensitive.has_sensitive(call.tool):
        return {}
    secret = Secret.objects.filter(name=secret_name(call.pk)).first()
    values: JSONObject = json.loads(secret.value) if secret is not None else {}
    return values


def real_arguments(call: ToolCall) -> JSONObject:
    """Return the arguments the executor receives: the stored ones with the sensitive values put back."""
    values = kept_values(call)
    return sensitive.reveal(call.arguments, values) if values else call.arguments


def erase(call: ToolCall) -> None:
    """Delete the call's sensitive values (it is settled: nothing will run it again)."""
    if sensitive.has_sensitive(call.tool):
        Secret.objects.filter(name=secret_name(call.pk)).delete()


def scrubber(call: ToolCall) -> list[str]:
    """Return the call's sensitive strings a downstream might echo (long enough to scrub safely)."""
    strings = [value for value in kept_values(call).values() if isinstance(value, str)]
    return [value for value in strings if len(value) >= MIN_SCRUBBED_LENGTH]


def scrubbed(call: ToolCall, value: JSONValue) -> JSONValue:
    """Return `value` (a result, an error, an observation) with the call's sensitive values masked."""
    return sensitive.scrub(value, scrubber(call))


def edited(call: ToolCall, typed: JSONObject) -> JSONObject:
    """Return a reviewer's edit as real arguments: a sensitive value left masked (or blank) keeps the current one.

    The edit form never shows a sensitive value; it shows `•••• (set)`. Leaving that (or,
    for a top-level property, leaving the field blank) means "keep it"; typing replaces it.
    """
    real: JSONValue = typed
    current = real_arguments(call)
    for path in sensitive.sensitive_paths(call.tool.input_schema, call.arguments):
        now = sensitive.value_at(typed, path)
        left_blank = len(path) == 1 and (now is sensitive.MISSING or now in ("", None))
        kept = sensitive.value_at(current, path)
        if (now == MASK or left_blank) and kept is not sensitive.MISSING:
            real = sensitive.with_value(real, path, kept)
    return dict(real)
