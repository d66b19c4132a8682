from django.apps import AppConfig


class OauthConfig(AppConfig):
    name = "oauth"
    verbose_name = "OAuth for MCP clients"
