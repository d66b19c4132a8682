from __future__ import annotations

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    """Reaching reviewers where they are: email, Slack, outgoing webhooks; decisions from the message."""

    name = "notifications"

    def ready(self) -> None:
        """Route every recorded audit event, in the transaction that records it, into the outbox."""
        from audit.signals import event_recorded
        from notifications.receivers import on_event_recorded

        event_recorded.connect(on_event_recorded, dispatch_uid="notifications.route_event")
