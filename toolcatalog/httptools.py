"""An `http` tool's request in admin: its endpoint and headers, edited inline on the tool's page.

A header's secret value is write-only (vault.forms): never rendered, kept when left
blank, masked in the tool's audit events (a keyed hash says whether it changed).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from audit.typealiases import DjangoValue, JSONObject, JSONValue
from toolcatalog.executors.httpapi import RESERVED_HEADERS, body_template_problems, parse_statuses
from toolcatalog.forms import PrettyJSONField
from toolcatalog.models import HttpBody, HttpEndpoint, HttpHeader, HttpMethod, Tool
from vault.hashing import keyed_hash
from vault.secrets import MASK


class HttpEndpointForm(forms.ModelForm[HttpEndpoint]):
    """An `http` tool's request: its body template may name only the schema's properties."""

    class Meta:
        model = HttpEndpoint
        fields = ["method", "body", "body_template", "result_pointer", "permanent_statuses", "timeout_seconds"]
        field_classes = {"body_template": PrettyJSONField}

    def clean_result_pointer(self) -> str:
        pointer: str = self.cleaned_data.get("result_pointer") or ""
        if pointer and not pointer.startswith("/"):
            raise ValidationError("A JSON pointer starts with / (e.g. /data/id), or is empty for the whole answer.")
        return pointer

    def clean_permanent_statuses(self) -> str:
        text: str = self.cleaned_data.get("permanent_statuses") or ""
        try:
            parse_statuses(text)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
        return text

    def clean(self) -> dict[str, DjangoValue]:
        """Return the cleaned data; a template body needs a template that names only the schema's properties."""
        super().clean()
        data = self.cleaned_data
        body, template = data.get("body"), data.get("body_template")
        if body == HttpBody.TEMPLATE and template is None:
            self.add_error("body_template", "Give the body template, or send the arguments.")
        if body == HttpBody.TEMPLATE and template is not None:
            for problem in body_template_problems(template, _properties(data.get("tool"))):
                self.add_error("body_template", problem)
        if data.get("method") == HttpMethod.GET and body != HttpBody.NONE:
            self.add_error("body", "A GET request sends no body: choose “No body” (arguments go in the URL's query).")
        return data


def _properties(tool: Tool | None) -> list[str]:
    """Return the property names of the tool's input schema (the inline's parent: as the tool form has it now)."""
    schema = tool.input_schema if isinstance(tool, Tool) else None
    return list((schema.get("properties") or {}) if isinstance(schema, dict) else {})


class HttpHeaderForm(forms.ModelForm[HttpHeader]):
    """A header: a plain value, or a write-only secret (never both); names the executor sets are refused."""

    class Meta:
        model = HttpHeader
        fields = ["name", "value", "secret"]

    def clean_name(self) -> str:
        name: str = self.cleaned_data.get("name") or ""
        if name.lower() in RESERVED_HEADERS:
            raise ValidationError(f"Gatehouse sets {name} itself.")
        return name

    def clean(self) -> dict[str, DjangoValue]:
        """Return the cleaned data: exactly one of value and secret, neither spanning lines."""
        super().clean()
        data = self.cleaned_data
        value, secret = data.get("value") or "", data.get("secret") or ""
        if value and secret:
            self.add_error("secret", "Give a plain value or a secret, not both.")
        if not value and not secret and not self.instance.secret:
            self.add_error("value", "Give a value, or a secret value.")
        if any(character in text for text in (value, secret) for character in "\r\n\0"):
            self.add_error("secret" if secret else "value", "A header value is one line.")
        return data

    def save(self, commit: bool = True) -> HttpHeader:
        """Save; a plain value typed over a stored secret replaces it (blank secret would otherwise keep it)."""
        if self.cleaned_data.get("value"):
            self.instance.secret = ""
        return super().save(commit)


class HttpEndpointInline(admin.StackedInline[HttpEndpoint, Tool]):
    model = HttpEndpoint
    form = HttpEndpointForm
    extra = 0
    max_num = 1
    verbose_name = "HTTP request (executor kind http)"
    verbose_name_plural = "HTTP request (executor kind http; none: POST the arguments, the whole answer is the result)"


class HttpHeaderInline(admin.TabularInline[HttpHeader, Tool]):
    model = HttpHeader
    form = HttpHeaderForm
    extra = 0
    verbose_name = "HTTP header"
    verbose_name_plural = "HTTP headers (executor kind http; a secret value is write-only)"


# Shown on a new tool's page and on `http` tools' pages (toolcatalog.admin.ToolAdmin.get_inlines).
HTTP_INLINES = (HttpEndpointInline, HttpHeaderInline)


def http_snapshot(tool: Tool) -> JSONObject:
    """Return what a tool's audit event shows of its HTTP request: secrets masked, with a keyed hash to compare."""
    endpoint = HttpEndpoint.objects.filter(tool=tool).first()
    headers: list[JSONValue] = [_header_snapshot(header) for header in tool.http_headers.order_by("name")]
    if endpoint is None and not headers:
        return {}
    request: JSONValue = None
    if endpoint is not None:
        request = {
            "method": endpoint.method,
            "body": endpoint.body,
            "body_template": endpoint.body_template,
            "result_pointer": endpoint.result_pointer,
            "permanent_statuses": endpoint.permanent_statuses,
            "timeout_seconds": endpoint.timeout_seconds,
        }
    return {"http_request": request, "http_headers": headers}


def _header_snapshot(header: HttpHeader) -> JSONObject:
    if not header.secret:
        return {"name": header.name, "value": header.value}
    # The keyed hash shows a changed secret as a change, and reveals nothing of it.
    return {"name": header.name, "secret": f"{MASK} hmac-sha256:{keyed_hash(header.secret.encode())[:16]}"}
