"""Failed-login records in admin: an admin unlocks an account or address by deleting them, audited."""

from __future__ import annotations

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.lockout import unlock
from accounts.models import GroupMapping, SsoIdentity

# Axes registers its own admin for these records; this one is the same plus audited deletes.
admin.site.unregister(AccessAttempt)


@admin.register(AccessAttempt)
class AuditedAccessAttemptAdmin(AccessAttemptAdmin):
    actions = ["unlock_selected", "cleanup_expired_attempts"]

    @admin.action(description="Unlock: forget the selected failed logins", permissions=["delete"])
    def unlock_selected(self, request: HttpRequest, queryset: QuerySet[AccessAttempt]) -> None:
        count = unlock(queryset, by=request.user.get_username())
        self.message_user(request, f"Unlocked: {count} failed-login record(s) forgotten.")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AccessAttempt]) -> None:
        unlock(queryset, by=request.user.get_username())

    def delete_model(self, request: HttpRequest, obj: AccessAttempt) -> None:
        unlock(AccessAttempt.objects.filter(pk=obj.pk), by=request.user.get_username())


@admin.register(GroupMapping)
class GroupMappingAdmin(admin.ModelAdmin[GroupMapping]):
    """Which provider groups let people in, and as what: applied at each person's next sign-in."""

    list_display = ["idp_group", "group"]
    list_filter = ["group"]
    search_fields = ["idp_group"]


@admin.register(SsoIdentity)
class SsoIdentityAdmin(admin.ModelAdmin[SsoIdentity]):
    """The provider subjects behind console accounts (read-only: sign-ins write them)."""

    list_display = ["user", "subject", "issuer", "last_groups"]
    search_fields = ["user__username", "subject"]
    readonly_fields = ["user", "issuer", "subject", "last_groups"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
