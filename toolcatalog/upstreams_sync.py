"""Sync: an upstream's tools/list becomes catalog tools, in one transaction, every change audited.

Each upstream tool becomes (or updates) the catalog tool `<prefix>_<tool>`
(characters outside [A-Za-z0-9_-] become `_`, at most 64 characters) with the
upstream's description, input schema and annotations, run by the `mcp` executor.

- Base tier from the annotations: readOnlyHint → 0; a write with destructiveHint
  false → 1; destructive or unannotated → 2. A tier an admin chose differently, the
  tool's rules, and an admin's enabled switch survive later syncs.
- A changed schema, description or annotations is a new tool version (`Tool.save`),
  so pending and approved calls are judged again (approvals.receivers, execution).
- A tool gone upstream is disabled, never deleted: its calls stay readable.
- A tool whose input schema is not valid JSON Schema, or whose name collides, is
  skipped with the reason; the rest is synced.
- The upstream is asked first, outside any transaction; then everything is written
  in one transaction, so a failure leaves the catalog as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import mcp.types as types
from django.db import transaction
from django.utils import timezone

from audit.chain import record
from audit.models import ActorKind
from audit.typealiases import JSONObject
from toolcatalog.models import ExecutorKind, RiskTier, Tool
from toolcatalog.schemacheck import input_schema_problems
from toolcatalog.upstreams import SyncStatus, Transport, Upstream, UpstreamTool, UpstreamValue, ValueKind
from toolcatalog.upstreams_client import Endpoint, UpstreamError, list_tools

SYNC_ACTOR = (ActorKind.SYSTEM, "upstream-sync")
MAX_NAME = 64
# The parts of an upstream tool a catalog tool mirrors: a change in any is a new version.
MIRRORED = ("title", "description", "inputSchema", "outputSchema", "annotations")


@dataclass
class SyncReport:
    """What one sync did, by catalog tool name."""

    upstream: str
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    enabled: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)

    def as_json(self) -> JSONObject:
        return {
            "upstream": self.upstream,
            "added": self.added,
            "changed": self.changed,
            "disabled": self.disabled,
            "enabled": self.enabled,
            "skipped": self.skipped,
        }

    @property
    def changes(self) -> int:
        return len(self.added) + len(self.changed) + len(self.disabled) + len(self.enabled)


def catalog_name(prefix: str, remote: str) -> str:
    """Return the catalog name of upstream tool `remote`: `<prefix>_<tool>`, sanitised, at most 64 characters."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{prefix}_{remote}")[:MAX_NAME]


def definition(tool: types.Tool) -> JSONObject:
    """Return what the catalog mirrors of an upstream tool, in MCP's JSON spelling."""
    dumped = tool.model_dump(by_alias=True, exclude_none=True, mode="json")
    return {key: dumped[key] for key in MIRRORED if key in dumped}


def tier_of(annotations: JSONObject) -> int:
    """Return the base tier the annotations give: a read 0, a non-destructive write 1, anything else 2."""
    if annotations.get("readOnlyHint") is True:
        return 0
    if annotations.get("destructiveHint") is False:
        return 1
    return 2


def sync(upstream: Upstream, actor: tuple[str, str] = SYNC_ACTOR) -> SyncReport:
    """Sync one upstream's tools into the catalog; raise UpstreamError (recorded on the upstream) on failure."""
    if not upstream.enabled:
        raise UpstreamError("disabled", f"upstream {upstream.name} is disabled")
    try:
        remote = list_tools(Endpoint.of(upstream))  # outside any transaction: no lock held while waiting
    except UpstreamError as error:
        record_failure(upstream, error, actor)
        raise
    with transaction.atomic():
        locked = Upstream.objects.select_for_update().get(pk=upstream.pk)
        report = Plan(locked, actor).apply(remote)
    upstream.refresh_from_db()
    return report


def record_failure(upstream: Upstream, error: UpstreamError, actor: tuple[str, str]) -> None:
    """Mark the upstream's sync failed; audit it when that is news (a periodic retry does not repeat it)."""
    message = str(error)
    with transaction.atomic():
        news = Upstream.objects.filter(pk=upstream.pk).exclude(sync_status=SyncStatus.FAILED, sync_message=message)
        if news.update(sync_status=SyncStatus.FAILED, sync_message=message):
            record(
                "upstream.sync_failed",
                actor=actor,
                data={"upstream": upstream.name, "error": error.code, "message": message},
            )
    upstream.refresh_from_db()


class Plan:
    """One sync's writes, inside its transaction."""

    def __init__(self, upstream: Upstream, actor: tuple[str, str]) -> None:
        self.upstream = upstream
        self.actor = actor
        self.report = SyncReport(upstream=upstream.name)
        self.links = {link.remote_name: link for link in upstream.tools.select_related("tool__base_tier")}
        self.tiers = {tier.level: tier for tier in RiskTier.objects.all()}

    def apply(self, remote: list[types.Tool]) -> SyncReport:
        names: dict[str, str] = {}
        for tool in sorted(remote, key=lambda t: t.name):
            reason = self.refusal(tool, names)
            if reason:
                self.report.skipped.append({"tool": tool.name, "reason": reason})
                continue
            names[catalog_name(self.upstream.tool_prefix, tool.name)] = tool.name
            self.upsert(tool)
        listed = {tool.name for tool in remote}
        for remote_name, link in sorted(self.links.items()):
            if remote_name not in listed and not link.gone:
                self.disable(link)
        self.finish()
        return self.report

    def refusal(self, tool: types.Tool, names: dict[str, str]) -> str:
        """Return why `tool` cannot be synced ('' if it can): an invalid schema, or a name taken."""
        problems = input_schema_problems(tool.input_schema)
        if problems:
            return "its input schema is not valid JSON Schema: " + "; ".join(problems[:3])
        name = catalog_name(self.upstream.tool_prefix, tool.name)
        if name in names:
            return f"its catalog name {name} collides with upstream tool {names[name]!r}"
        owner = Tool.objects.filter(name=name)
        link = self.links.get(tool.name)
        if link is not None:
            owner = owner.exclude(pk=link.tool_id)
        if owner.exists():
            return f"its catalog name {name} is taken by another tool in the catalog (set a different --prefix)"
        return ""

    def tier(self, level: int) -> RiskTier:
        if level not in self.tiers:
            raise UpstreamError(
                "no_tiers", f"risk tier {level} does not exist: create tiers 0 to 2 first (seed_demo does)"
            )
        return self.tiers[level]

    def upsert(self, tool: types.Tool) -> None:
        link = self.links.get(tool.name)
        if link is None:
            self.add(tool)
        else:
            self.update(link, tool)

    def add(self, remote: types.Tool) -> None:
        spec = definition(remote)
        level = tier_of(spec.get("annotations", {}))
        tool = Tool(
            name=catalog_name(self.upstream.tool_prefix, remote.name),
            base_tier=self.tier(level),
            executor_kind=ExecutorKind.MCP,
            executor_ref=f"{self.upstream.name}/{remote.name}",
            audience=f"mcp:{self.upstream.name}",
        )
        mirror(tool, spec)
        tool.save()
        UpstreamTool.objects.create(
            upstream=self.upstream, tool=tool, remote_name=remote.name, definition=spec, synced_tier=level
        )
        self.report.added.append(tool.name)
        self.audit("upstream.tool_added", tool, {"remote": remote.name, "tier": level, "definition": spec})

    def update(self, link: UpstreamTool, remote: types.Tool) -> None:
        tool, spec = link.tool, definition(remote)
        changed = sorted(key for key in MIRRORED if spec.get(key) != link.definition.get(key))
        back = link.gone and link.disabled_by_sync
        if not changed and not back:
            if link.gone:
                UpstreamTool.objects.filter(pk=link.pk).update(gone=False)
            return
        level = tier_of(spec.get("annotations", {}))
        tier_before = tool.base_tier.level
        if tier_before == link.synced_tier and level != link.synced_tier:  # the admin left the tier as synced
            tool.base_tier = self.tier(level)
        mirror(tool, spec)
        tool.enabled = tool.enabled or back
        version_before = tool.version
        tool.save()
        UpstreamTool.objects.filter(pk=link.pk).update(
            definition=spec, synced_tier=level, gone=False, disabled_by_sync=False
        )
        data = {"remote": remote.name, "changed": changed, "version_before": version_before, "version": tool.version}
        if changed:
            self.report.changed.append(tool.name)
            self.audit(
                "upstream.tool_changed", tool, {**data, "tier_before": tier_before, "tier": tool.base_tier.level}
            )
        if back:
            self.report.enabled.append(tool.name)
            self.audit("upstream.tool_enabled", tool, {**data, "reason": "listed by its upstream again"})

    def disable(self, link: UpstreamTool) -> None:
        """The upstream no longer lists the tool: disable it (an admin's own disabling is left as it is)."""
        tool = link.tool
        by_sync = tool.enabled
        if by_sync:
            tool.enabled = False
            tool.save()
        UpstreamTool.objects.filter(pk=link.pk).update(gone=True, disabled_by_sync=by_sync)
        self.report.disabled.append(tool.name)
        self.audit(
            "upstream.tool_disabled", tool, {"remote": link.remote_name, "reason": "no longer listed by its upstream"}
        )

    def finish(self) -> None:
        """Record the sync on the upstream; audit the skipped tools when they differ from the last sync's."""
        skipped = "; ".join(f"{s['tool']}: {s['reason']}" for s in self.report.skipped)
        status = SyncStatus.PARTIAL if skipped else SyncStatus.OK
        if self.report.changes or skipped != self.upstream.sync_message or status != self.upstream.sync_status:
            record("upstream.synced", actor=self.actor, data={"upstream": self.upstream.name, **self.report.as_json()})
        Upstream.objects.filter(pk=self.upstream.pk).update(
            sync_status=status, synced_at=timezone.now(), sync_message=skipped
        )

    def audit(self, action: str, tool: Tool, data: JSONObject) -> None:
        record(action, actor=self.actor, tool_name=tool.name, data={"upstream": self.upstream.name, **data})


def mirror(tool: Tool, spec: JSONObject) -> None:
    """Copy what the upstream says of a tool onto its catalog tool (annotations missing take MCP's defaults)."""
    annotations = spec.get("annotations", {})
    tool.title = str(spec.get("title") or annotations.get("title") or "")[:200]
    tool.description = str(spec.get("description") or "")
    tool.input_schema = spec["inputSchema"]
    tool.output_schema = spec.get("outputSchema")
    tool.read_only_hint = annotations.get("readOnlyHint") is True
    tool.destructive_hint = annotations.get("destructiveHint") is not False
    tool.idempotent_hint = annotations.get("idempotentHint") is True
    tool.open_world_hint = annotations.get("openWorldHint") is not False


def sync_all(actor: tuple[str, str] = SYNC_ACTOR) -> dict[str, str]:
    """Sync every enabled upstream (the periodic task); return each one's outcome in a word or line."""
    outcomes: dict[str, str] = {}
    for upstream in Upstream.objects.filter(enabled=True):
        try:
            report = sync(upstream, actor)
        except UpstreamError as error:
            outcomes[upstream.name] = f"failed: {error}"
        else:
            outcomes[upstream.name] = f"{report.changes} change(s), {len(report.skipped)} skipped"
    return outcomes


def add_upstream(
    name: str,
    *,
    url: str = "",
    headers: dict[str, str] | None = None,
    command: str = "",
    env: dict[str, str] | None = None,
    prefix: str = "",
    actor: tuple[str, str] = SYNC_ACTOR,
) -> Upstream:
    """Register an upstream (HTTP when `url`, else stdio); audited with header and variable names, never values."""
    transport = Transport.STREAMABLE_HTTP if url else Transport.STDIO
    upstream = Upstream(name=name, prefix=prefix, transport=transport, url=url, command=command)
    upstream.full_clean()
    values = [(ValueKind.HEADER, k, v) for k, v in (headers or {}).items()]
    values += [(ValueKind.ENV, k, v) for k, v in (env or {}).items()]
    with transaction.atomic():
        upstream.save()
        for kind, key, value in values:
            UpstreamValue(upstream=upstream, kind=kind, name=key, value=value).full_clean(exclude=["upstream"])
            UpstreamValue.objects.create(upstream=upstream, kind=kind, name=key, value=value)
        record("upstream.added", actor=actor, data=describe(upstream))
    return upstream


def describe(upstream: Upstream) -> JSONObject:
    """Return an upstream as pages, commands and audit events show it: names of headers and variables only."""
    values = list(upstream.values.values_list("kind", "name"))  # never the (encrypted) values themselves
    return {
        "name": upstream.name,
        "prefix": upstream.tool_prefix,
        "transport": upstream.transport,
        "where": upstream.where(),
        "headers": [name for kind, name in values if kind == ValueKind.HEADER],
        "env": [name for kind, name in values if kind == ValueKind.ENV],
        "enabled": upstream.enabled,
        "sync_status": upstream.sync_status,
        "synced_at": upstream.synced_at.isoformat() if upstream.synced_at else None,
        "sync_message": upstream.sync_message,
        "tools": sorted(upstream.tools.filter(gone=False).values_list("tool__name", flat=True)),
    }
