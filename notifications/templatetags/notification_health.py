"""`{% channel_alerts %}`: the notification channels that are failing, for the console's overview."""

from __future__ import annotations

from django import template
from django.db.models import Count, Q

from audit.typealiases import DjangoValue
from notifications.models import Channel, DeliveryStatus

register = template.Library()


@register.inclusion_tag("notifications/_channel_alerts.html")
def channel_alerts() -> dict[str, DjangoValue]:
    """Return the channels with deliveries that gave up or wait to be retried after an error (one query)."""
    failing = Q(deliveries__status=DeliveryStatus.FAILED)
    retrying = Q(deliveries__status=DeliveryStatus.PENDING, deliveries__attempts__gt=0)
    counted = Channel.objects.annotate(
        failed=Count("deliveries", filter=failing), retrying=Count("deliveries", filter=retrying)
    )
    channels = counted.filter(Q(failed__gt=0) | Q(retrying__gt=0)).order_by("name")
    return {"channels": list(channels)}
