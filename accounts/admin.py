"""Failed-login records in admin: an admin unlocks an account or address by deleting them, audited."""

from __future__ import annotations

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.lockout import unlock

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
