"""The admin: channels with write-only secrets and their routes, a "send test event" action, the delivery log."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest

from notifications import outbox
from notifications.models import Channel, Delivery, DeliveryStatus, Route, SlackIdentity
from toolcatalog.adminkit import AuditedModelAdmin

# Failing now: the last delivery's attempts are spent, or it is being retried after an error.
FAILING = (DeliveryStatus.FAILED,)


class RouteInline(admin.TabularInline[Route, Channel]):
    model = Route
    extra = 0
    fields = ("enabled", "events", "min_tier", "tools", "agents", "email_to")


@admin.register(Channel)
class ChannelAdmin(AuditedModelAdmin[Channel]):
    list_display = ("name", "kind", "enabled", "target", "health")
    list_filter = ("kind", "enabled")
    search_fields = ("name",)
    inlines = [RouteInline]
    actions = ["send_test_event"]
    # The secrets never enter the audit log (nor any page: their form field is write-only).
    audit_exclude = ("secret", "signing_secret")
    fields = ("name", "kind", "enabled", "email_to", "slack_channel", "api_url", "url", "secret", "signing_secret")
    # An address typed without a scheme is taken as https (Django 6's default, said now).
    formfield_overrides = {**AuditedModelAdmin.formfield_overrides, models.URLField: {"assume_scheme": "https"}}

    @admin.display(description="Health")
    def health(self, channel: Channel) -> str:
        """Return how the channel's deliveries stand: failing, retrying, or OK."""
        return channel_health(channel)

    @admin.action(description="Send test event")
    def send_test_event(self, request: HttpRequest, queryset: QuerySet[Channel]) -> None:
        for channel in queryset:
            delivery = outbox.add_test_event(channel)
            self.message_user(request, f"Test event {delivery.pk} queued for {channel.name}.", messages.SUCCESS)


def channel_health(channel: Channel) -> str:
    """Return "failing (N)" when deliveries gave up, "retrying (N)" when some wait after an error, else "ok"."""
    failed = channel.deliveries.filter(status=DeliveryStatus.FAILED).count()
    if failed:
        return f"failing ({failed})"
    retrying = channel.deliveries.filter(status=DeliveryStatus.PENDING, attempts__gt=0).count()
    return f"retrying ({retrying})" if retrying else "ok"


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin[Delivery]):
    """The delivery log: read-only; a delivery is the system's record of what it sent."""

    list_display = ("created_at", "event_type", "channel", "status", "attempts", "last_error_short", "call_id")
    list_filter = ("status", "event_type", "channel")
    search_fields = ("=id", "=call_id", "event_key")
    readonly_fields = [field.name for field in Delivery._meta.fields]

    @admin.display(description="Last error")
    def last_error_short(self, delivery: Delivery) -> str:
        return delivery.last_error[:120]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Delivery | None = None) -> bool:
        return False


@admin.register(SlackIdentity)
class SlackIdentityAdmin(admin.ModelAdmin[SlackIdentity]):
    """Which Gatehouse user each Slack user decides as; deleting one makes that Slack user map again."""

    list_display = ("slack_user_id", "team_id", "user", "created_at")
    search_fields = ("slack_user_id", "user__username")
    readonly_fields = ("slack_user_id", "team_id", "user", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
