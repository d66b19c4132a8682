from django.apps import AppConfig


class VaultConfig(AppConfig):
    """Keys and secrets: the signing keys credentials and checkpoints are signed with, and secrets kept encrypted."""

    name = "vault"
