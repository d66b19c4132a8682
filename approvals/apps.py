from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"

    def ready(self) -> None:
        """Listen for policy changes (pending calls are judged again) and feed policy what-if."""
        from approvals.receivers import on_policy_changed
        from approvals.replay import stored_calls
        from toolcatalog.signals import policy_changed
        from toolcatalog.whatif import register_call_source

        policy_changed.connect(on_policy_changed, dispatch_uid="approvals.reevaluate_pending")
        register_call_source(stored_calls)
