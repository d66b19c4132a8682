"""The console's list of MCP clients a person let in, and revoking one; the resource's metadata document."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from oauth2_provider.models import AccessToken, RefreshToken
from oauth2_provider.views import OAuthProtectedResourceMetadataView

from audit.chain import record
from audit.models import ActorKind
from oauth.consent import mcp_resource
from oauth.models import ClientAgent


class McpResourceMetadata(OAuthProtectedResourceMetadataView):  # type: ignore[misc]
    """RFC 9728 metadata for `/mcp`, at the path form and at the root (both name the same resource)."""

    def get_resource(self, request: HttpRequest) -> str:
        return mcp_resource(request)

    def get_authorization_servers(self, request: HttpRequest) -> list[str]:
        # This site is its own authorization server; its RFC 8414 issuer is the origin.
        return [request.build_absolute_uri("/").rstrip("/")]


@login_required
def clients(request: HttpRequest) -> HttpResponse:
    """List the MCP clients acting as one of this person's agents."""
    assert isinstance(request.user, User)  # login_required
    rows = ClientAgent.objects.filter(user=request.user).select_related("application", "agent")
    return render(request, "oauth/clients.html", {"clients": rows})


@require_POST
@login_required
def revoke(request: HttpRequest, pk: int) -> HttpResponse:
    """Revoke every token of one client for this person, and forget which agent it acted as."""
    assert isinstance(request.user, User)  # login_required
    binding = get_object_or_404(ClientAgent, pk=pk, user=request.user)
    revoke_client(binding, request.user)
    return redirect("oauth:clients")


@transaction.atomic
def revoke_client(binding: ClientAgent, user: User) -> None:
    """Delete the client's access and refresh tokens for `user` and the binding; audit it."""
    tokens = {"application": binding.application, "user": user}
    for refresh in RefreshToken.objects.filter(**tokens, revoked__isnull=True):
        refresh.revoke()  # the toolkit's own revoke: its access token goes with it
    AccessToken.objects.filter(**tokens).delete()
    record(
        "oauth.revoked",
        actor=(ActorKind.REVIEWER, user.get_username()),
        agent_name=binding.agent.name,
        data={"client_id": binding.application.client_id, "client_name": binding.application.name[:200]},
    )
    binding.delete()
