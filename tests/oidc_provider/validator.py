"""The provider's claims: e-mail, username, and the person's groups in a `groups` claim (as Keycloak or Okta send)."""

from __future__ import annotations

from typing import Any

from oauth2_provider.oauth2_validators import OAuth2Validator


class GroupsClaimValidator(OAuth2Validator):  # type: ignore[misc]
    oidc_claim_scope = None  # every claim below goes out whatever scopes were asked for

    def get_additional_claims(self, request: Any) -> dict[str, Any]:
        user = request.user
        return {
            "email": user.email,
            "preferred_username": user.username,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }
