"""Building blocks every Gatehouse admin page uses: audited saves and readable JSON.

`AuditedModelAdmin` writes one audit event per add, change and delete made in
admin, with the actor and the object before and after, inside the transaction
that makes the change (Django's change and delete views are atomic).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TypeVar

from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.db import models, transaction
from django.db.models import Model, QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from audit.chain import record
from audit.models import ActorKind
from audit.typealiases import JSONObject, JSONValue
from toolcatalog.forms import PrettyJSONField


def pretty_json(value: JSONValue) -> SafeString:
    """Return `value` as indented JSON in a monospace block (for read-only fields)."""
    return format_html('<pre class="gh-json">{}</pre>', json.dumps(value, ensure_ascii=False, indent=2, default=str))


def admin_actor(request: HttpRequest) -> tuple[str, str]:
    """Return the audit actor of an admin request."""
    return (ActorKind.ADMIN, request.user.get_username())


def snapshot_fields(obj: Model, exclude: Iterable[str] = ()) -> JSONObject:
    """Return the object's stored fields as plain values; a relation is shown as its str()."""
    data: JSONObject = {}
    for f in obj._meta.concrete_fields:
        if f.name in exclude:
            continue
        data[f.name] = _related_str(obj, f) if f.is_relation else f.value_from_object(obj)
    for f in obj._meta.many_to_many:
        if f.name not in exclude:
            data[f.name] = sorted(str(item) for item in getattr(obj, f.name).all())
    return data


def _related_str(obj: Model, f: models.Field[object, object]) -> str | None:
    related = getattr(obj, f.name)
    return str(related) if related is not None else None


AuditedModel = TypeVar("AuditedModel", bound=Model)


class AuditedModelAdmin(admin.ModelAdmin[AuditedModel]):
    """A ModelAdmin whose every add, change and delete is an audit event with before and after."""

    audit_exclude: tuple[str, ...] = ()
    formfield_overrides = {models.JSONField: {"form_class": PrettyJSONField}}

    def audit_snapshot(self, obj: AuditedModel) -> JSONObject:
        """Return what an audit event shows of `obj`: its fields, plus related rows admins edit inline."""
        return snapshot_fields(obj, self.audit_exclude) | self.audit_related(obj)

    def audit_related(self, obj: AuditedModel) -> JSONObject:
        """Return inline-edited rows worth showing with the object (override per model)."""
        return {}

    def audit_names(self, obj: AuditedModel) -> dict[str, str]:
        """Return the audit event's agent_name / tool_name, so the log can be filtered by them."""
        return {}

    def _stored(self, pk: object) -> AuditedModel:
        fks = [f.name for f in self.model._meta.concrete_fields if f.many_to_one]
        return self.model._default_manager.select_related(*fks).get(pk=pk)

    def _befores(self, request: HttpRequest) -> dict[object, JSONObject]:
        """Return the stored state of each object this request changes, kept on it from save_model to log_change."""
        befores: dict[object, JSONObject] = request.__dict__.setdefault("_audit_before", {})
        return befores

    def remember_before(self, request: HttpRequest, obj: AuditedModel) -> None:
        """Remember the stored state of `obj` (the form already changed it in memory, not in the database)."""
        self._befores(request)[obj.pk] = self.audit_snapshot(self._stored(obj.pk))

    def save_model(self, request: HttpRequest, obj: AuditedModel, form: ModelForm[AuditedModel], change: bool) -> None:
        """Save, remembering the stored state first."""
        if change:
            self.remember_before(request, obj)
        super().save_model(request, obj, form, change)

    def log_addition(self, request: HttpRequest, obj: AuditedModel, message: JSONValue) -> LogEntry:
        """Log the addition, and audit it (after inlines are saved, so they are in `after`)."""
        entry = super().log_addition(request, obj, message)
        self.audit(request, "added", obj, before=None, message=message)
        return entry

    def log_change(self, request: HttpRequest, obj: AuditedModel, message: JSONValue) -> LogEntry:
        """Log the change, and audit it with the state before and after."""
        entry = super().log_change(request, obj, message)
        self.audit(request, "changed", obj, before=self._befores(request).pop(obj.pk, None), message=message)
        return entry

    def delete_model(self, request: HttpRequest, obj: AuditedModel) -> None:
        """Delete through the model (so its own delete() runs), and audit what was deleted."""
        before = self.audit_snapshot(obj)
        pk, names, text = obj.pk, self.audit_names(obj), str(obj)
        super().delete_model(request, obj)
        self.audit_event(request, "deleted", pk, text, names, before=before, after=None, message="")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AuditedModel]) -> None:
        """Delete one by one, in one transaction: each object is audited and its delete() runs."""
        with transaction.atomic():
            for obj in queryset:
                self.delete_model(request, obj)

    def audit(
        self, request: HttpRequest, verb: str, obj: AuditedModel, *, before: JSONObject | None, message: JSONValue
    ) -> None:
        """Write the audit event of an add or change of `obj`, reading its state as stored now."""
        stored = self._stored(obj.pk)
        after = self.audit_snapshot(stored)
        self.audit_event(
            request, verb, obj.pk, str(stored), self.audit_names(stored), before=before, after=after, message=message
        )

    def audit_event(
        self,
        request: HttpRequest,
        verb: str,
        pk: object,
        text: str,
        names: dict[str, str],
        *,
        before: JSONObject | None,
        after: JSONObject | None,
        message: JSONValue,
    ) -> None:
        """Write one audit event about `pk` (inside the admin's transaction: the event commits with the change)."""
        keys = set(before or {}) | set(after or {})
        changed = sorted(k for k in keys if (before or {}).get(k) != (after or {}).get(k))
        if verb == "changed" and not changed:
            return  # saved without a change: nothing happened worth an event
        record(
            f"admin.{self.model._meta.model_name}.{verb}",
            actor=admin_actor(request),
            data={
                "model": self.model._meta.label,
                "object_id": str(pk),
                "object": text,
                "changed": changed,
                "before": before,
                "after": after,
                "message": message,
            },
            agent_name=names.get("agent_name", ""),
            tool_name=names.get("tool_name", ""),
        )
