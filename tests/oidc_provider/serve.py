"""Run the test OpenID Connect provider: `python -m tests.oidc_provider.serve PORT SETUP_JSON`.

SETUP_JSON: {"users": [{"username", "password", "email", "groups": [...]}],
"client": {"client_id", "client_secret", "redirect_uris": [...], "post_logout_redirect_uris": [...]}}.
It migrates its SQLite file, creates those users and the one confidential client,
prints "ready" and serves until killed.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.oidc_provider.settings")


def set_up(setup: dict[str, Any]) -> None:
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0, interactive=False)
    for person in setup["users"]:
        user = User.objects.create_user(person["username"], person["email"], person["password"])
        user.groups.set([Group.objects.get_or_create(name=name)[0] for name in person["groups"]])
    client = setup["client"]
    Application.objects.create(
        name="Gatehouse",
        client_id=client["client_id"],
        client_secret=client["client_secret"],
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(client["redirect_uris"]),
        post_logout_redirect_uris=" ".join(client["post_logout_redirect_uris"]),
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=True,  # the person consents by signing in: no extra page in the tests
        hash_client_secret=False,
    )


def main() -> None:
    import django
    from django.core.servers.basehttp import WSGIServer, run
    from django.core.wsgi import get_wsgi_application

    port, setup = int(sys.argv[1]), json.loads(sys.argv[2])
    django.setup()
    set_up(setup)
    print("ready", flush=True)
    run("127.0.0.1", port, get_wsgi_application(), threading=True, server_cls=WSGIServer)


if __name__ == "__main__":
    main()
