"""The audit pages get their own permission; everyone who could open them keeps it.

Until now the audit pages asked for approvals' reviewer permission, so every group
and user holding `approvals.review_toolcall` is granted `audit.browse_auditlog`.
"""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

REVIEW = {"content_type__app_label": "approvals", "codename": "review_toolcall"}


def grant_to_reviewers(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Grant the audit permission to every group and user that holds the reviewer permission."""
    permission_model = apps.get_model("auth", "Permission")
    reviewer_permissions = permission_model.objects.filter(**REVIEW)
    groups = apps.get_model("auth", "Group").objects.filter(permissions__in=reviewer_permissions).distinct()
    users = apps.get_model("auth", "User").objects.filter(user_permissions__in=reviewer_permissions).distinct()
    if not groups.exists() and not users.exists():
        return  # a fresh database: post_migrate creates the permission, seed_demo or an admin grants it
    # Permissions are created after all migrations (post_migrate), so this one may not exist yet.
    content_type, _ = apps.get_model("contenttypes", "ContentType").objects.get_or_create(
        app_label="audit", model="event"
    )
    browse, _ = permission_model.objects.get_or_create(
        content_type=content_type, codename="browse_auditlog", defaults={"name": "Can browse the audit log"}
    )
    for group in groups:
        group.permissions.add(browse)
    for user in users:
        user.user_permissions.add(browse)


class Migration(migrations.Migration):
    # Only auth's and contenttypes' tables are read and written; the reviewer permission is looked up by its
    # natural key, so audit (imported by every app, importing none) takes no dependency on approvals' migrations:
    # the permission's row exists only in databases that have already run them all (post_migrate creates it).
    dependencies = [
        ("audit", "0003_fewer_indexes"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="event",
            options={"ordering": ["-seq"], "permissions": [("browse_auditlog", "Can browse the audit log")]},
        ),
        # Revoking on the way back is not needed: the permission is simply unused by the older code.
        migrations.RunPython(grant_to_reviewers, migrations.RunPython.noop),
    ]
