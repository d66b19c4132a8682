from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from approvals.api import api
from approvals.health import healthz
from vault.views import jwks

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("healthz", healthz, name="healthz"),
    path(".well-known/jwks.json", jwks, name="jwks"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("audit/", include("audit.urls")),
    path("notifications/", include("notifications.urls")),
    path("", include("approvals.urls")),
]

if settings.GATEHOUSE_DEMO:  # the demo's downstream services, reached by its tools' HTTP executors
    urlpatterns.append(path("demo-services/", include("demo.urls")))
