from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"

    def ready(self) -> None:
        """Listen for policy changes (pending calls are judged again) and deactivations (their calls are withdrawn)."""
        from django.db.models.signals import post_save

        from agents.models import Agent
        from approvals.receivers import on_agent_saved, on_policy_changed
        from toolcatalog.signals import policy_changed

        policy_changed.connect(on_policy_changed, dispatch_uid="approvals.reevaluate_pending")
        post_save.connect(on_agent_saved, sender=Agent, dispatch_uid="approvals.withdraw_on_deactivation")
