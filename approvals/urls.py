"""The reviewer console's URLs (the queue is the site's front page)."""

from __future__ import annotations

from django.urls import path

from approvals.views import batch, calls, decisions, overview, queue, standing

app_name = "approvals"

urlpatterns = [
    path("", queue.queue, name="queue"),
    path("activity/", queue.activity, name="activity"),
    path("pending-count/", queue.pending_badge, name="pending_badge"),
    path("batch/", batch.batch, name="batch"),
    path("overview/", overview.overview, name="overview"),
    path("breakers/<int:pk>/reset/", overview.reset_breaker, name="reset_breaker"),
    path("calls/<uuid:pk>/", calls.call_detail, name="call"),
    path("calls/<uuid:pk>/live/", calls.call_live, name="call_live"),
    path("calls/<uuid:pk>/preview/", calls.call_preview, name="call_preview"),
    path("calls/<uuid:pk>/approve/", decisions.approve, name="approve"),
    path("calls/<uuid:pk>/reject/", decisions.reject, name="reject"),
    path("calls/<uuid:pk>/edit/", decisions.edit, name="edit"),
    path("standing/", standing.standing_list, name="standing"),
    path("standing/<uuid:pk>/revoke/", standing.revoke, name="standing_revoke"),
    path("standing/<uuid:pk>/approve/", standing.endorse, name="standing_approve"),
]
