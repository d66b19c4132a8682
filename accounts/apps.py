from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"

    def ready(self) -> None:
        """Audit each login lockout django-axes declares."""
        from axes.signals import user_locked_out

        from accounts.lockout import audit_lockout

        user_locked_out.connect(audit_lockout, dispatch_uid="accounts.audit_lockout")
