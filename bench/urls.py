"""The product's URLs, with the bare endpoints (bench.bare) at /bench/."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path

from config.urls import urlpatterns as product_urlpatterns

urlpatterns: list[URLPattern | URLResolver] = [path("bench/", include("bench.bare.urls")), *product_urlpatterns]
