"""bench.settings and bench.urls: the product's settings and URLs, plus the bare stack it is measured against."""

from __future__ import annotations

from django.conf import settings
from django.urls import resolve

from config import settings as product_settings


def test_bench_settings_are_the_products_plus_the_bare_app() -> None:
    installed = settings.INSTALLED_APPS

    assert installed == [*product_settings.INSTALLED_APPS, "bench.bare"]
    assert "bench.bare" not in product_settings.INSTALLED_APPS


def test_bench_urls_mount_the_bare_endpoints_beside_the_products() -> None:
    assert resolve("/bench/insert").url_name == "bench-bare-insert"
    assert resolve("/bench/governed-and-wait").url_name == "bench-bare-governed-and-wait"
    assert resolve("/healthz").url_name == "healthz"
    assert resolve("/calls/00000000-0000-0000-0000-000000000001/").url_name == "call"
