"""Mounted at /bench/ by bench.urls (the benchmark's stack only)."""

from __future__ import annotations

from django.urls import path

from bench.bare import views

urlpatterns = [
    path("insert", views.insert, name="bench-bare-insert"),
    path("insert-and-wait", views.insert_and_wait, name="bench-bare-insert-and-wait"),
    path("governed-and-wait", views.governed_and_wait, name="bench-bare-governed-and-wait"),
]
