"""The catalog in admin: schemas and rule conditions are checked on save, every change is a version and an event."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from django.utils.html import escape

from audit.models import Event
from tests.admin_client import AdminBrowser
from tests.processes import http_server
from toolcatalog.models import RiskRule, RiskTier, Tool
from toolcatalog.schema import compile_validator


@pytest.fixture
def admin_browser(db: None) -> AdminBrowser:
    return AdminBrowser()


@pytest.fixture
def schema_server() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server offering a schema; returns its URL and the paths it was asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = json.dumps({"type": "string"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/schema+json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with http_server(Handler) as url:
        yield f"{url}/schema.json", asked


def tool_url(tool: Tool) -> str:
    return f"/admin/toolcatalog/tool/{tool.pk}/change/"


def refund_schema_with(**changes: Any) -> dict[str, Any]:
    from demo.catalog import TOOLS

    schema = json.loads(json.dumps(TOOLS[0]["input_schema"]))
    schema["properties"].update(changes)
    return schema


BAD_SCHEMAS = {
    "unknown type": (refund_schema_with(motivo={"type": "strng"}), "unknown type 'strng'"),
    "invalid regex": (refund_schema_with(pedido_id={"type": "string", "pattern": "^PED-[0-9{8}$"}), "invalid regular"),
    "remote $ref": (refund_schema_with(motivo={"$ref": "https://schemas.example.com/motivo.json"}), "remote reference"),
    "dangling local $ref": (refund_schema_with(motivo={"$ref": "#/$defs/motivo"}), "points to nothing"),
    "unchecked format": (refund_schema_with(motivo={"type": "string", "format": "date-time"}), "is not checked"),
    "not an object schema": ({"type": "array"}, '"type": "object"'),
}


@pytest.mark.parametrize("case", list(BAD_SCHEMAS))
def test_a_bad_input_schema_is_refused_with_a_field_error(
    admin_browser: AdminBrowser, catalog: dict[str, Tool], case: str
) -> None:
    schema, expected = BAD_SCHEMAS[case]
    tool = catalog["emitir_estorno"]
    response = admin_browser.submit(tool_url(tool), {"input_schema": json.dumps(schema)}, "tool_form")
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["input_schema"]
    assert expected in " ".join(errors["input_schema"])
    assert escape(expected) in response.content.decode()  # shown beside the field
    stored = Tool.objects.get(pk=tool.pk)
    assert stored.version == tool.version and stored.input_schema == tool.input_schema


def test_a_good_input_schema_is_accepted_as_a_new_version_with_an_audit_event(
    admin_browser: AdminBrowser, catalog: dict[str, Tool]
) -> None:
    tool = catalog["emitir_estorno"]
    schema = refund_schema_with(
        nota={"type": "string", "maxLength": 200, "pattern": "^[^<>]*$"},
        contato={"type": "string", "format": "email"},
    )
    schema["$defs"] = {"money": {"type": "integer", "minimum": 1}}
    schema["properties"]["valor_centavos"] = {"$ref": "#/$defs/money", "maximum": 5000000}
    response = admin_browser.submit(tool_url(tool), {"input_schema": json.dumps(schema)}, "tool_form")
    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = Tool.objects.get(pk=tool.pk)
    assert stored.input_schema == schema
    assert stored.version == tool.version + 1
    event = Event.objects.get(action="admin.tool.changed")
    assert (event.actor_kind, event.actor_name, event.tool_name) == ("admin", "root", "emitir_estorno")
    assert event.data["changed"] == ["input_schema", "updated_at", "version"]
    assert event.data["before"]["input_schema"] == tool.input_schema
    assert event.data["after"]["input_schema"] == schema
    assert (event.data["before"]["version"], event.data["after"]["version"]) == (tool.version, tool.version + 1)


def test_a_remote_ref_is_refused_without_fetching_it(
    admin_browser: AdminBrowser, catalog: dict[str, Tool], schema_server: tuple[str, list[str]]
) -> None:
    url, asked = schema_server
    tool = catalog["emitir_estorno"]
    schema = refund_schema_with(motivo={"$ref": url})
    response = admin_browser.submit(tool_url(tool), {"input_schema": json.dumps(schema)}, "tool_form")
    assert "remote reference" in " ".join(response.context["adminform"].form.errors["input_schema"])
    # Even a schema that reached the database some other way never fetches at validation time.
    validator = compile_validator(schema)
    with pytest.raises(Exception, match="Unresolvable"):
        validator.is_valid({"motivo": "x"})
    assert asked == []


def test_output_schema_is_checked_too(admin_browser: AdminBrowser, catalog: dict[str, Tool]) -> None:
    tool = catalog["emitir_estorno"]
    response = admin_browser.submit(tool_url(tool), {"output_schema": '{"type": "nope"}'}, "tool_form")
    assert "unknown type 'nope'" in " ".join(response.context["adminform"].form.errors["output_schema"])
    response = admin_browser.submit(tool_url(tool), {"output_schema": '{"type": "object"}'}, "tool_form")
    assert response.status_code == 302
    assert Tool.objects.get(pk=tool.pk).output_schema == {"type": "object"}


BAD_CONDITIONS = {
    "unknown type": ({"properties": {"valor_centavos": {"type": "int"}}}, "unknown type 'int'"),
    "invalid regex": ({"properties": {"pedido_id": {"pattern": "(PED"}}}, "invalid regular expression"),
    "remote $ref": ({"$ref": "https://example.com/big-refund.json"}, "remote reference"),
}


@pytest.mark.parametrize("case", list(BAD_CONDITIONS))
def test_a_bad_rule_condition_is_refused_with_a_field_error(
    admin_browser: AdminBrowser, catalog: dict[str, Tool], case: str
) -> None:
    condition, expected = BAD_CONDITIONS[case]
    tool = catalog["emitir_estorno"]
    response = admin_browser.submit(tool_url(tool), {"rules-0-condition": json.dumps(condition)}, "tool_form")
    assert response.status_code == 200
    formset = response.context["inline_admin_formsets"][0].formset
    assert expected in " ".join(formset.forms[0].errors["condition"])
    assert Tool.objects.get(pk=tool.pk).version == tool.version


def test_rule_changes_inline_are_one_audited_change_and_a_new_version(
    admin_browser: AdminBrowser, catalog: dict[str, Tool], django_capture_on_commit_callbacks: Any
) -> None:
    tool = catalog["emitir_estorno"]
    rules = {rule.name: rule for rule in tool.rules.all()}
    assert list(rules) == ["above-autonomy", "large-refund"]
    changes = {
        "rules-0-condition": json.dumps({"properties": {"valor_centavos": {"minimum": 50001}}}),  # above-autonomy
        "rules-TOTAL_FORMS": 3,
        "rules-2-name": "billing-errors",
        "rules-2-condition": json.dumps({"properties": {"motivo": {"const": "erro_cobranca"}}, "required": ["motivo"]}),
        "rules-2-tier": RiskTier.objects.get(level=2).pk,
        "rules-2-enabled": "on",
        "rules-1-DELETE": "on",  # large-refund
    }
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = admin_browser.submit(tool_url(tool), changes, "tool_form")
    assert response.status_code == 302
    assert sorted(RiskRule.objects.filter(tool=tool).values_list("name", flat=True)) == [
        "above-autonomy",
        "billing-errors",
    ]
    stored = Tool.objects.get(pk=tool.pk)
    assert stored.version > tool.version  # one bump per rule saved or deleted, all in this one transaction
    announced = [c for c in callbacks if getattr(c, "__qualname__", "").startswith("announce_policy_change")]
    assert len(announced) == stored.version - tool.version  # each announced after commit
    (event,) = Event.objects.filter(action="admin.tool.changed")
    assert event.data["changed"] == ["rules", "version"]
    assert [r["name"] for r in event.data["before"]["rules"]] == ["above-autonomy", "large-refund"]
    assert [(r["name"], r["tier"]) for r in event.data["after"]["rules"]] == [
        ("above-autonomy", 2),
        ("billing-errors", 2),
    ]
    assert event.data["after"]["version"] == stored.version


def test_saving_an_unchanged_tool_is_not_a_new_version(admin_browser: AdminBrowser, catalog: dict[str, Tool]) -> None:
    tool = catalog["emitir_estorno"]
    response = admin_browser.submit(tool_url(tool), {}, "tool_form")
    assert response.status_code == 302
    assert Tool.objects.get(pk=tool.pk).version == tool.version
    assert not Event.objects.filter(action__startswith="admin.").exists()


def test_executor_and_annotations_are_editable_and_checked(
    admin_browser: AdminBrowser, catalog: dict[str, Tool]
) -> None:
    tool = catalog["search_seats"]
    response = admin_browser.submit(
        tool_url(tool), {"executor_kind": "python", "executor_ref": "demo.nowhere.Executor"}, "tool_form"
    )
    assert "Cannot import" in " ".join(response.context["adminform"].form.errors["executor_ref"])
    response = admin_browser.submit(tool_url(tool), {"resource_argument": "seat"}, "tool_form")
    assert "not a property" in " ".join(response.context["adminform"].form.errors["resource_argument"])
    response = admin_browser.submit(
        tool_url(tool),
        {"executor_ref": "/demo-services/tools/search_seats_v2", "title": "Find seats"},
        "tool_form",
        drop=("idempotent_hint",),
    )
    assert response.status_code == 302
    stored = Tool.objects.get(pk=tool.pk)
    assert (stored.executor_ref, stored.idempotent_hint, stored.title) == (
        "/demo-services/tools/search_seats_v2",
        False,
        "Find seats",
    )
    assert stored.version == tool.version + 1
    event = Event.objects.get(action="admin.tool.changed")
    assert event.data["changed"] == ["executor_ref", "idempotent_hint", "title", "updated_at", "version"]


def test_a_tier_that_requires_approval_needs_an_approver(admin_browser: AdminBrowser, catalog: dict[str, Tool]) -> None:
    tier = RiskTier.objects.get(level=2)
    url = f"/admin/toolcatalog/risktier/{tier.pk}/change/"
    response = admin_browser.submit(url, {"approvals_required": 0}, "risktier_form")
    assert "at least 1 approval" in " ".join(response.context["adminform"].form.errors["approvals_required"])
    response = admin_browser.submit(url, {"approvals_required": 2, "approval_window": "02:00:00"}, "risktier_form")
    assert response.status_code == 302
    event = Event.objects.get(action="admin.risktier.changed")
    assert event.data["changed"] == ["approval_window", "approvals_required"]
    assert (event.data["before"]["approvals_required"], event.data["after"]["approvals_required"]) == (1, 2)


@pytest.mark.parametrize(
    "url",
    [
        "/admin/toolcatalog/tool/",
        "/admin/toolcatalog/tool/?q=estorno&enabled__exact=1",
        "/admin/toolcatalog/risktier/",
        "/admin/agents/agent/",
        "/admin/approvals/toolcall/",
        "/admin/approvals/decision/",
        "/admin/audit/event/",
    ],
)
def test_list_pages_work_in_a_bounded_number_of_queries(
    admin_browser: AdminBrowser, catalog: dict[str, Tool], url: str, django_assert_max_num_queries: Any
) -> None:
    with django_assert_max_num_queries(12):
        response = admin_browser.get(url)
    assert response.status_code == 200


def test_json_fields_are_pretty_printed_with_help(admin_browser: AdminBrowser, catalog: dict[str, Tool]) -> None:
    page = admin_browser.get(tool_url(catalog["emitir_estorno"])).content.decode()
    assert 'class="gh-json"' in page
    assert escape('\n  "type": "object",\n') in page  # indented, one key a line
    assert '{"valor_centavos": {"minimum": 20001}}' in page  # the rule condition example
    assert "four-eyes" in page  # the tiers explained


def test_every_catalog_page_renders(admin_browser: AdminBrowser, catalog: dict[str, Tool]) -> None:
    tool = catalog["emitir_estorno"]
    for url in (
        "/admin/",
        "/admin/toolcatalog/tool/add/",
        "/admin/toolcatalog/risktier/add/",
        f"/admin/toolcatalog/risktier/{RiskTier.objects.get(level=3).pk}/change/",
        f"/admin/toolcatalog/tool/{tool.pk}/try/",
        f"/admin/toolcatalog/tool/{tool.pk}/whatif/",
        "/admin/agents/agent/add/",
        "/admin/agents/circuitbreaker/",
        "/admin/auth/user/",
    ):
        assert admin_browser.get(url).status_code == 200, url
    assert admin_browser.get("/admin/toolcatalog/tool/999999/whatif/").status_code == 404


def test_a_new_tool_with_rules_is_created_and_audited(admin_browser: AdminBrowser, catalog: dict[str, Tool]) -> None:
    tier0, tier2 = RiskTier.objects.get(level=0).pk, RiskTier.objects.get(level=2).pk
    fields = {
        "name": "cancel_order",
        "description": "Cancel an order.",
        "input_schema": json.dumps(
            {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
        ),
        "base_tier": tier0,
        "executor_kind": "gatehouse_protocol",
        "executor_ref": "/demo-services/tools/cancel_order",
        "resource_argument": "order_id",
        "rules-TOTAL_FORMS": 1,
        "rules-0-name": "always",
        "rules-0-condition": "{}",
        "rules-0-tier": tier2,
        "rules-0-enabled": "on",
    }
    response = admin_browser.submit("/admin/toolcatalog/tool/add/", fields, "tool_form")
    assert response.status_code == 302, response.context["adminform"].form.errors
    tool = Tool.objects.get(name="cancel_order")
    assert list(tool.rules.values_list("name", flat=True)) == ["always"]
    event = Event.objects.get(action="admin.tool.added")
    assert event.data["before"] is None and event.data["after"]["rules"][0]["tier"] == 2
