from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from oauth2_provider.views import OAuthServerMetadataView

from approvals import health
from approvals.api import api
from approvals.metrics import metrics
from oauth.views import McpResourceMetadata
from vault.views import jwks

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    # Probes: live never consults a dependency; ready checks the database and the broker (/healthz is ready too).
    path("healthz/live", health.live, name="healthz-live"),
    path("healthz/ready", health.ready, name="healthz-ready"),
    path("healthz", health.ready, name="healthz"),
    path("metrics", metrics, name="metrics"),  # Prometheus, with GATEHOUSE_METRICS_TOKEN
    path(".well-known/jwks.json", jwks, name="jwks"),
    # OAuth for MCP clients: RFC 8414 and RFC 9728 metadata at the root, the endpoints under /oauth/.
    path(".well-known/oauth-authorization-server", OAuthServerMetadataView.as_view(), name="oauth-server-metadata"),
    path(".well-known/oauth-protected-resource", McpResourceMetadata.as_view()),
    path(".well-known/oauth-protected-resource/mcp", McpResourceMetadata.as_view(), name="oauth-resource-metadata"),
    path("oauth/", include("oauth.urls", namespace="oauth2_provider")),
    path("connected-clients/", include("oauth.console_urls")),
    path("accounts/", include("accounts.urls")),  # login, logout, SSO: before Django's own
    path("accounts/", include("django.contrib.auth.urls")),
    path("audit/", include("audit.urls")),
    path("notifications/", include("notifications.urls")),
    path("", include("approvals.urls")),
]

if settings.GATEHOUSE_DEMO:  # the demo's downstream services, reached by its tools' HTTP executors
    urlpatterns.append(path("demo-services/", include("demo.urls")))
