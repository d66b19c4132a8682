from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from approvals.api import api
from approvals.health import healthz

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("healthz", healthz, name="healthz"),
    path("demo-services/", include("demo.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("audit/", include("audit.urls")),
    path("", include("approvals.urls")),
]

if settings.GATEHOUSE_BENCH_BARE:  # `make bench` only: the bare endpoint Gatehouse is measured against
    urlpatterns.insert(0, path("bench/", include("bench.bare.urls")))
