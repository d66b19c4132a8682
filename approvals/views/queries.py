"""The queue's query string as one form: filters, free-text search and page, each value validated.

An invalid value is not applied and the page says why (400); a parameter the form
does not know is ignored. Search is ORM-only, so it runs on PostgreSQL and SQLite.
"""

from __future__ import annotations

from functools import reduce
from operator import or_
from typing import TypeVar
from urllib.parse import urlencode

from django import forms
from django.db.models import Model, Q, QuerySet

from agents.models import Agent
from approvals.forms import QueueFilterForm
from approvals.models import ToolCall
from audit.search import call_id_lookups, json_contains
from audit.typealiases import DjangoValue
from toolcatalog.models import Tool

# Past any real backlog (50 a page), and far below what a database offset overflows at.
MAX_PAGE = 100_000
SEARCH_MAX_LENGTH = 200
# The parameters that narrow the queue (the page only moves through it).
FILTERS = ("tool", "agent", "tier", "q")
Named = TypeVar("Named", bound=Model)


class NamedChoiceField(forms.ModelChoiceField[Named]):
    """A row chosen by name; a name with NUL in it is no choice (PostgreSQL cannot even compare it)."""

    def to_python(self, value: DjangoValue) -> DjangoValue:
        if isinstance(value, str) and "\x00" in value:
            raise forms.ValidationError(self.error_messages["invalid_choice"], code="invalid_choice")
        return super().to_python(value)


class QueueQueryForm(QueueFilterForm):
    """The queue's filters, its search box and its page number."""

    tool = NamedChoiceField(
        queryset=Tool.objects.order_by("name"), to_field_name="name", required=False, empty_label="All tools"
    )
    agent = NamedChoiceField(
        queryset=Agent.objects.order_by("name"), to_field_name="name", required=False, empty_label="All agents"
    )
    q = forms.CharField(
        required=False,
        max_length=SEARCH_MAX_LENGTH,
        label="Search",
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "PED-00000001, agent, call id…"}),
    )
    page = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE, widget=forms.HiddenInput)

    def page_number(self) -> int:
        """Return the valid page asked for, else the first."""
        self.is_valid()
        return getattr(self, "cleaned_data", {}).get("page") or 1

    def search_text(self) -> str:
        """Return the valid search text ('' for none)."""
        self.is_valid()
        return getattr(self, "cleaned_data", {}).get("q") or ""

    def filter_query(self) -> str:
        """Return the valid filters and search as a query string (no page): what the next poll and pages keep."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        return urlencode({name: self.data[name] for name in FILTERS if data.get(name) not in (None, "")})


def matching(calls: QuerySet[ToolCall], text: str) -> QuerySet[ToolCall]:
    """Return the calls whose agent, tool, conversation, arguments or id contain `text` (any case)."""
    if not text:
        return calls
    wanted = [Q(agent__name__icontains=text), Q(tool__name__icontains=text), Q(conversation_id__icontains=text)]
    wanted += [json_contains("arguments", text), *call_id_lookups("id", text)]
    return calls.filter(reduce(or_, wanted))
