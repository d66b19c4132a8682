"""Notification URLs: the email link's confirmation page, Slack's interactivity endpoint, a reviewer's preferences."""

from __future__ import annotations

from django.urls import path

from notifications import views

app_name = "notifications"

urlpatterns = [
    path("decide/<str:token>/", views.decide, name="decide"),
    path("slack/<int:channel_id>/interactions/", views.slack_interactions, name="slack_interactions"),
    path("slack/link/<str:token>/", views.slack_link, name="slack_link"),
    path("preferences/", views.preferences, name="preferences"),
]
