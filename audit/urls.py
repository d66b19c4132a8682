"""The audit log browser's URLs."""

from __future__ import annotations

from django.urls import path

from audit import views

app_name = "audit"

urlpatterns = [
    path("", views.event_log, name="log"),
    path("chain/", views.chain, name="chain"),
    path("export.csv", views.export, {"fmt": "csv"}, name="export_csv"),
    path("export.jsonl", views.export, {"fmt": "jsonl"}, name="export_jsonl"),
]
