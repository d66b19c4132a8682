"""The authorization server's endpoints under /oauth/ (namespace `oauth2_provider`, as the toolkit reverses them)."""

from django.urls import path
from oauth2_provider import views as toolkit

from oauth.consent import ConsentView
from oauth.registration import register

app_name = "oauth2_provider"

urlpatterns = [
    path("authorize/", ConsentView.as_view(), name="authorize"),
    path("token/", toolkit.TokenView.as_view(), name="token"),
    path("revoke/", toolkit.RevokeTokenView.as_view(), name="revoke-token"),
    path("register/", register, name="dcr-register"),
    # RFC 7592: a client reads, updates or deletes its own registration with the token registration gave it.
    path(
        "register/<str:client_id>/",
        toolkit.DynamicClientRegistrationManagementView.as_view(),
        name="dcr-register-management",
    ),
]
