"""Who may sign in through the identity provider: its groups mapped to Gatehouse's, and the people it vouched for."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models


class GroupMapping(models.Model):
    """One identity-provider group that grants one Gatehouse group (Reviewers, Seniors …) at every SSO sign-in.

    A person whose provider groups match no mapping cannot sign in: the provider
    knowing someone is not the same as Gatehouse trusting them to approve.
    """

    idp_group = models.CharField(
        max_length=255, help_text="The group's name (or id, for Entra ID) exactly as the provider's claim carries it."
    )
    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="idp_mappings")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["idp_group", "group"], name="unique_group_mapping")]
        ordering = ["idp_group", "group__name"]

    def __str__(self) -> str:
        return f"{self.idp_group} → {self.group.name}"


class SsoIdentity(models.Model):
    """The provider's subject a console account belongs to: sign-ins find people by it, never by e-mail alone."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    last_groups = models.JSONField(default=list, help_text="The provider's groups at the last sign-in.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="unique_sso_subject")]
        verbose_name_plural = "SSO identities"

    def __str__(self) -> str:
        return f"{self.subject} @ {self.issuer}"
