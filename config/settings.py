"""Gatehouse settings: one file, every deployment difference read from the environment.

The embedded default (no variables set) is SQLite plus the embedded broker (message files
written atomically, config.embedded_broker), so `make demo` needs no server. Production
and tests point DATABASE_URL and CELERY_BROKER_URL at PostgreSQL and Redis.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import csp.constants as csp
import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

# Django's generic classes as the type checker reads them (ModelAdmin[Tool], ModelForm[Tool]) work at run time too.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("GATEHOUSE_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    """Return the boolean value of an environment variable; refuse what it can't parse."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1 or 0)")


def env_list(name: str, default: list[str]) -> list[str]:
    """Return a comma-separated environment variable as a list of non-empty items."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_int(name: str, default: int) -> int:
    """Return an integer environment variable; refuse what it can't parse."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None


DEBUG = env_bool("DEBUG", False)
HTTPS = env_bool("GATEHOUSE_HTTPS", False)

SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "dev-only-insecure-secret-key-for-local-use-never-in-production-0123456789"  # noqa: S105

# Fernet keys for secrets kept encrypted at rest, newest first (vault.secrets checks them at start-up).
GATEHOUSE_SECRETS_KEYS = env_list("GATEHOUSE_SECRETS_KEYS", [])
# Ed25519 signing keys (a PKCS#8 PEM file, or a directory of them: the newest signs) for scoped credentials and
# audit checkpoints; vault.signing checks them at start-up. The issuer (`iss`) credentials name: this site.
GATEHOUSE_SIGNING_KEYS = os.environ.get("GATEHOUSE_SIGNING_KEYS", "")
GATEHOUSE_ISSUER = os.environ.get("GATEHOUSE_ISSUER", "gatehouse")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "csp",
    "ninja",
    "axes",
    "vault",
    "audit",
    "accounts",
    "toolcatalog",
    "agents",
    "oauth2_provider",
    "oauth",
    "approvals",
    "notifications",
]
# The demo downstream (its models, /demo-services/, fault injection, seed_demo) exists
# only where asked for: `make demo` and the tests set GATEHOUSE_DEMO=1. It comes before
# the product's apps so its seed_demo wins over the product's stand-in, which says how
# to turn the demo on.
GATEHOUSE_DEMO = env_bool("GATEHOUSE_DEMO", False)
if GATEHOUSE_DEMO:
    INSTALLED_APPS.insert(INSTALLED_APPS.index("audit"), "demo")

# Under ASGI, Django runs the middleware above the innermost sync-only one in a
# single worker thread; every async-capable one below it costs thread hops on every
# request. So the sync-only ones come last.
MIDDLEWARE = [
    # Outermost: an API error answered by any middleware below it (a Host header Django
    # refuses, a CSRF failure) still reaches the agent as the API's JSON body.
    "approvals.middleware.ApiJsonErrorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "approvals.middleware.ApiBodyLimitMiddleware",
    "approvals.middleware.DatabaseUnavailableMiddleware",
    # Last, as django-axes asks: it turns a login it refused into the lockout page. It is
    # async-capable and sits where the async handler already is, so it adds no thread hop.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Database: persistent connections matter a lot for throughput. PostgreSQL uses
# psycopg's pool, which also works under ASGI where every request runs in a fresh
# thread (CONN_MAX_AGE alone would reconnect per request there).
if "DATABASE_URL" not in os.environ:
    VAR_DIR.mkdir(parents=True, exist_ok=True)  # the embedded default must work from a fresh clone
DATABASES = {
    "default": dj_database_url.parse(os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'gatehouse.sqlite3'}"))
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["OPTIONS"] = {
        "pool": {
            "min_size": env_int("GATEHOUSE_DB_POOL_MIN", 2),
            "max_size": env_int("GATEHOUSE_DB_POOL_MAX", 20),
            "timeout": 10,
        },
        # Parameters travel apart from the SQL, so psycopg prepares a statement once
        # it has run a few times on a connection: the proposal's queries are short,
        # and PostgreSQL would otherwise plan each of them again on every request.
        "server_side_binding": True,
        "prepare_threshold": 2,
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE transactions serialise writers up front, so two processes never
    # deadlock upgrading a read lock (the audit chain reads its head, then writes).
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = True

# Login throttling (console and admin), by django-axes: FAILURE_LIMIT failed logins for one
# account, or from one address, refuse further logins for it for COOLOFF minutes (an admin
# can unlock sooner: Admin → Axes → Access attempts). Axes' backend must come first.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "accounts.backends.PasswordBackend",  # Django's, off for all but superusers when GATEHOUSE_PASSWORD_LOGIN=0
    "accounts.oidc.OidcBackend",  # SSO (below); answers only the provider's callback
]
AXES_FAILURE_LIMIT = env_int("GATEHOUSE_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("GATEHOUSE_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # either one reaching the limit locks
# Attempts refused during a lockout are not counted, so a lockout ends COOLOFF after it began
# and a persistent attacker cannot keep an account locked for ever by trying on.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# A success must not wipe the count: it would wipe the address's count too, so an attacker
# with one account of their own could keep guessing at others between their own logins.
AXES_RESET_ON_SUCCESS = False
AXES_LOCKOUT_CALLABLE = "accounts.lockout.lockout_response"

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# Reviewer SSO through an OpenID Connect provider (accounts/oidc.py, docs/identity.md): on when an issuer and a
# client id are set. Endpoints come from the issuer's discovery document. Provider groups (in the claim named
# below) map to Gatehouse groups through Admin → Accounts → Group mappings; nobody maps, nobody signs in.
GATEHOUSE_OIDC_ISSUER = os.environ.get("GATEHOUSE_OIDC_ISSUER", "")
OIDC_RP_CLIENT_ID = os.environ.get("GATEHOUSE_OIDC_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = os.environ.get("GATEHOUSE_OIDC_CLIENT_SECRET", "")
OIDC_RP_SCOPES = os.environ.get("GATEHOUSE_OIDC_SCOPES", "openid email profile")
OIDC_RP_SIGN_ALGO = os.environ.get("GATEHOUSE_OIDC_SIGN_ALGO", "RS256")
GATEHOUSE_OIDC_GROUPS_CLAIM = os.environ.get("GATEHOUSE_OIDC_GROUPS_CLAIM", "groups")
OIDC_USE_PKCE = True
OIDC_STORE_ID_TOKEN = True  # sign-out names the session to end at the provider with it
OIDC_TIMEOUT = env_int("GATEHOUSE_OIDC_TIMEOUT_SECONDS", 10)
LOGIN_REDIRECT_URL_FAILURE = "/accounts/login/?sso=refused"
# 0: the password form signs in the break-glass superuser(s) only; everyone else uses SSO.
GATEHOUSE_PASSWORD_LOGIN = env_bool("GATEHOUSE_PASSWORD_LOGIN", True)

# OAuth 2.1 for /mcp (oauth/, docs/identity.md): Gatehouse is the authorization server (django-oauth-toolkit)
# and the protected resource. Authorization code with PKCE S256 only, public clients registered dynamically,
# tokens for the /mcp resource only, short-lived and refreshed (each refresh token used once).
OAUTH2_PROVIDER_APPLICATION_MODEL = "oauth2_provider.Application"  # named, so migrations can depend on it
OAUTH2_PROVIDER = {
    "SCOPES": {"mcp": "Propose tool calls through Gatehouse as the agent you choose"},
    "DEFAULT_SCOPES": ["mcp"],
    "PKCE_REQUIRED": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,  # `plain` refused, not advertised
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,  # the Authorization header only, never the query
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,  # RFC 9207: the code comes back naming its issuer
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,  # tokens kept hashed at rest
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none"],
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 60,
    "ACCESS_TOKEN_EXPIRE_SECONDS": env_int("GATEHOUSE_OAUTH_ACCESS_TOKEN_SECONDS", 600),
    "REFRESH_TOKEN_EXPIRE_SECONDS": env_int("GATEHOUSE_OAUTH_REFRESH_TOKEN_SECONDS", 30 * 24 * 3600),
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "REQUEST_APPROVAL_PROMPT": "force",  # the person sees the consent page every time
    "DCR_ENABLED": True,
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("oauth2_provider.dcr.AllowAllDCRPermission",),
    # Client ID Metadata Documents: a client_id that is an https URL is fetched (SSRF-hardened) and held to the
    # same rules as a registration. GATEHOUSE_OAUTH_CIMD=0 turns it off.
    "CIMD_ENABLED": env_bool("GATEHOUSE_OAUTH_CIMD", True),
    "CIMD_METADATA_FETCHER": "oauth.cimd.CheckedMetadataFetcher",
    "OAUTH2_PROTECTED_RESOURCE_NAME": "Gatehouse MCP endpoint",
}
# Native MCP hosts (VS Code, SDKs) receive codes on http://127.0.0.1:PORT (RFC 8252 §7.3), so the toolkit's
# warning about http redirect URIs is silenced: oauth/registration.py accepts http on loopback addresses only.
SILENCED_SYSTEM_CHECKS = ["oauth2_provider.W008"]

# Agent API limits. Bodies above 1 MiB get 413 before anything parses them.
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024
GATEHOUSE_MAX_JSON_DEPTH = 64
GATEHOUSE_MAX_WAIT_SECONDS = env_int("GATEHOUSE_MAX_WAIT_SECONDS", 30)
# Per-agent requests per minute across all web processes (0 = no limit). Counted in Redis
# (the broker's, unless GATEHOUSE_REDIS_URL says otherwise); without one, not counted (agents.ratelimit).
GATEHOUSE_RATE_LIMIT_PER_MINUTE = env_int("GATEHOUSE_RATE_LIMIT_PER_MINUTE", 1200)
GATEHOUSE_REDIS_URL = os.environ.get(
    "GATEHOUSE_REDIS_URL",
    _broker if (_broker := os.environ.get("CELERY_BROKER_URL", "")).startswith(("redis", "sentinel://")) else "",
)
# Redis Sentinel (sentinel://host:26379;sentinel://host2:26379 as the broker's or Gatehouse's Redis URL):
# the name of the master the sentinels watch.
GATEHOUSE_REDIS_SENTINEL_MASTER = os.environ.get("GATEHOUSE_REDIS_SENTINEL_MASTER", "")
if not GATEHOUSE_REDIS_SENTINEL_MASTER and any(
    url.startswith("sentinel://") for url in (GATEHOUSE_REDIS_URL, os.environ.get("CELERY_BROKER_URL", ""))
):
    raise ImproperlyConfigured("a sentinel:// Redis URL needs GATEHOUSE_REDIS_SENTINEL_MASTER (the master's name)")
# Per-agent budget, whatever a proposal's envelope says: calls accepted per fixed window of
# GATEHOUSE_AGENT_BUDGET_WINDOW_SECONDS (0 calls = no limit; an agent's max_calls_per_window overrides it).
GATEHOUSE_AGENT_BUDGET_CALLS = env_int("GATEHOUSE_AGENT_BUDGET_CALLS", 1000)
GATEHOUSE_AGENT_BUDGET_WINDOW_SECONDS = env_int("GATEHOUSE_AGENT_BUDGET_WINDOW_SECONDS", 3600)
if GATEHOUSE_AGENT_BUDGET_WINDOW_SECONDS < 1:
    raise ImproperlyConfigured("GATEHOUSE_AGENT_BUDGET_WINDOW_SECONDS must be at least 1")
# On PostgreSQL, the few hand-written statements (audit/store.py, approvals/store.py, approvals/tally.py); off,
# their portable twins (the ORM) run there as they do on SQLite. The same data either way: the bench compares them.
GATEHOUSE_POSTGRESQL_STORE = env_bool("GATEHOUSE_POSTGRESQL_STORE", True)
# Circuit breaker per agent and tool: it opens after THRESHOLD consecutive refusals of one kind,
# or after ANY_KIND_THRESHOLD consecutive refusals of any kinds (a loop alternating between kinds; 0: off).
GATEHOUSE_BREAKER_THRESHOLD = env_int("GATEHOUSE_BREAKER_THRESHOLD", 5)
GATEHOUSE_BREAKER_ANY_KIND_THRESHOLD = env_int("GATEHOUSE_BREAKER_ANY_KIND_THRESHOLD", 10)
GATEHOUSE_DEMO_SERVICES_URL = os.environ.get("GATEHOUSE_DEMO_SERVICES_URL", "http://127.0.0.1:8000")
# MCP endpoint (/mcp): browser origins allowed besides this site's own hosts and
# CSRF_TRUSTED_ORIGINS ("scheme://host:*" allows any port); how long tools/call
# waits for an auto-approved call to finish; how often open list_changed streams
# re-read the catalog.
GATEHOUSE_MCP_ALLOWED_ORIGINS = env_list("GATEHOUSE_MCP_ALLOWED_ORIGINS", [])
GATEHOUSE_MCP_WAIT_SECONDS = env_int("GATEHOUSE_MCP_WAIT_SECONDS", 5)
GATEHOUSE_MCP_CATALOG_POLL_SECONDS = env_int("GATEHOUSE_MCP_CATALOG_POLL_SECONDS", 2)
# Upstream MCP servers: how often beat syncs their tools, and how long a request to one may wait for its answer.
GATEHOUSE_UPSTREAM_SYNC_SECONDS = env_int("GATEHOUSE_UPSTREAM_SYNC_SECONDS", 300)
GATEHOUSE_UPSTREAM_TIMEOUT_SECONDS = env_int("GATEHOUSE_UPSTREAM_TIMEOUT_SECONDS", 20)

# Celery: Redis in production and tests; by default the embedded broker, a folder of
# message files under VAR_DIR (`embedded://`; `filesystem://` names it too).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "embedded://")
CELERY_EMBEDDED_BROKER_DIR = VAR_DIR / "broker"
# The embedded defaults keep everything on one machine's disk: fine for `make demo` and development, never what a
# production deployment means to run on. With DEBUG off they must be asked for by name.
GATEHOUSE_ALLOW_EMBEDDED = env_bool("GATEHOUSE_ALLOW_EMBEDDED", False)
_embedded = [
    name
    for name, used in (
        ("DATABASE_URL (SQLite)", DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"),
        ("CELERY_BROKER_URL (the embedded broker)", CELERY_BROKER_URL.startswith(("embedded://", "filesystem://"))),
    )
    if used
]
if _embedded and not DEBUG and not GATEHOUSE_ALLOW_EMBEDDED:
    raise ImproperlyConfigured(
        f"DEBUG is off but {' and '.join(_embedded)} is the embedded default: set DATABASE_URL=postgres://… and "
        "CELERY_BROKER_URL=redis://… (docs/deploy.md), or GATEHOUSE_ALLOW_EMBEDDED=1 to run on the embedded stack"
    )
CELERY_TASK_HARD_TIME_LIMIT = 120
CELERY_TASK_SOFT_TIME_LIMIT = 100
CELERY_SWEEP_INTERVAL_SECONDS = env_int("GATEHOUSE_SWEEP_INTERVAL", 10)
CELERY_EXECUTION_LEASE = timedelta(seconds=env_int("GATEHOUSE_EXECUTION_LEASE", CELERY_TASK_HARD_TIME_LIMIT + 30))
CELERY_EXECUTION_MAX_ATTEMPTS = env_int("GATEHOUSE_EXECUTION_MAX_ATTEMPTS", 5)

# Notifications (notifications/): mail through Django's backend, from EMAIL_URL
# (smtp://user:password@host:port, smtps:// for TLS from the start, ?tls=1 for STARTTLS)
# or the standard EMAIL_* variables; links in messages point at GATEHOUSE_SITE_URL.
EMAIL_URL = os.environ.get("EMAIL_URL", "")
if EMAIL_URL:
    _email = urlsplit(EMAIL_URL)
    if _email.scheme not in {"smtp", "smtps"} or not _email.hostname:
        raise ImproperlyConfigured(f"EMAIL_URL={EMAIL_URL!r} is not smtp://host:port or smtps://host:port")
    EMAIL_HOST, EMAIL_PORT = _email.hostname, _email.port or (465 if _email.scheme == "smtps" else 25)
    EMAIL_HOST_USER, EMAIL_HOST_PASSWORD = unquote(_email.username or ""), unquote(_email.password or "")
    EMAIL_USE_SSL = _email.scheme == "smtps"
    EMAIL_USE_TLS = parse_qs(_email.query).get("tls", ["0"])[0] in {"1", "true"}
else:
    EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
    EMAIL_PORT = env_int("EMAIL_PORT", 25)
    EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
    EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
    EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
    EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "gatehouse@localhost")
GATEHOUSE_SITE_URL = os.environ.get("GATEHOUSE_SITE_URL", "http://127.0.0.1:8000").rstrip("/")
# A failing delivery is tried again after 2, 4, 8 … seconds (capped), at most this many times.
GATEHOUSE_NOTIFY_MAX_ATTEMPTS = env_int("GATEHOUSE_NOTIFY_MAX_ATTEMPTS", 8)
GATEHOUSE_NOTIFY_BACKOFF_SECONDS = env_int("GATEHOUSE_NOTIFY_BACKOFF_SECONDS", 2)
GATEHOUSE_NOTIFY_LEASE_SECONDS = env_int("GATEHOUSE_NOTIFY_LEASE_SECONDS", 30)

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads nothing from it; the token travels in hx-headers
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = 31536000
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    # An orchestrator probes over plain HTTP inside the cluster; a redirect would count as a pass.
    SECURE_REDIRECT_EXEMPT = [r"^healthz(/|$)"]

# Content-Security-Policy on every response (django-csp): scripts, styles, images and fonts from this site's own
# static files only — nothing in templates/ is inline (no <script> or <style> body, no on…= handler, no style=)
# — and no framing. htmx's indicator style is in console.css (htmx-config in base.html turns its inline one off).
# No form-action: the OAuth consent form's answer redirects to the MCP client's own loopback address.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [csp.SELF],
        "script-src": [csp.SELF],
        "style-src": [csp.SELF],
        "img-src": [csp.SELF],
        "font-src": [csp.SELF],
        "connect-src": [csp.SELF],
        "object-src": [csp.NONE],
        "base-uri": [csp.SELF],
        "frame-ancestors": [csp.NONE],
    },
}

# Prometheus scrapes /metrics with this bearer token; unset, the endpoint does not exist.
GATEHOUSE_METRICS_TOKEN = os.environ.get("GATEHOUSE_METRICS_TOKEN", "")
# plain: one line of text per record; json: one JSON object per line, with the call id being handled.
LOG_FORMAT = os.environ.get("GATEHOUSE_LOG_FORMAT", "plain")
if LOG_FORMAT not in {"plain", "json"}:
    raise ImproperlyConfigured(f"GATEHOUSE_LOG_FORMAT={LOG_FORMAT!r} is not plain or json")
# Traces are exported over OTLP/HTTP or to the console (approvals.telemetry): refuse at start what it cannot do.
for _variable in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
    if os.environ.get(_variable, "").strip() not in {"", "http/protobuf"}:
        raise ImproperlyConfigured(f"{_variable}={os.environ[_variable]!r}: Gatehouse exports http/protobuf only")
if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() not in {"", "otlp", "console", "none"}:
    raise ImproperlyConfigured(
        f"OTEL_TRACES_EXPORTER={os.environ['OTEL_TRACES_EXPORTER']!r}: use otlp, console or none"
    )

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "approvals.telemetry.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # An expected refusal (any 4xx, a replay's aborted pipeline) is one quiet line, not a warning.
    "filters": {
        "client_errors_at_info": {"()": "approvals.logfilters.ClientErrorsAtInfo"},
        "aborted_pipeline_at_debug": {"()": "approvals.logfilters.AbortedPipelineAtDebug"},
    },
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "django.request": {"filters": ["client_errors_at_info"]},
        "psycopg": {"filters": ["aborted_pipeline_at_debug"]},
        # django-axes says INFO lines on every login; its failures and lockouts are warnings.
        "axes": {"level": "WARNING"},
    },
}
