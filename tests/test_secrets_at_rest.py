"""Secrets at rest: encrypted in the database, rotated onto the newest key, write-only in forms, refused when unkeyed.

The key checks and the rotation run as real processes (`manage.py`, a Celery worker, the
ASGI application's import), with the environment a deployment would give them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from io import StringIO
from pathlib import Path

import pytest
from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.forms import modelform_factory
from django.test import override_settings

from tests.processes import BASE_DIR, session_database_url
from vault import secrets
from vault.models import Secret

pytestmark = pytest.mark.django_db


def marker() -> str:
    """Return a string that appears nowhere unless a test put it there."""
    return f"s3cret-{uuid.uuid4().hex}"


def stored_token(secret: Secret) -> str:
    """Return the column as the database holds it, bypassing the field."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT value FROM vault_secret WHERE id = %s", [secret.pk])
        return str(cursor.fetchone()[0])


def table_dump(table: str) -> str:
    """Return every row of `table` as text, as a backup or a curious DBA would read it."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")  # noqa: S608 - a fixed table name
        return repr(cursor.fetchall())


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `manage.py` as its own process on the test database, with `env` over the test environment."""
    environment = {**os.environ, "DATABASE_URL": session_database_url(), **env}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=environment, capture_output=True, text=True, timeout=60
    )


def test_the_database_holds_only_ciphertext_and_python_reads_plaintext() -> None:
    value = marker()
    secret = Secret.objects.create(purpose="test", value=value)

    assert value not in table_dump("vault_secret")
    assert Fernet(settings.GATEHOUSE_SECRETS_KEYS[0]).decrypt(stored_token(secret)).decode() == value
    assert Secret.objects.get(pk=secret.pk).value == value


def test_an_empty_secret_stays_empty() -> None:
    secret = Secret.objects.create(purpose="test", value="")

    assert stored_token(secret) == ""
    assert Secret.objects.get(pk=secret.pk).value == ""


@pytest.mark.django_db(transaction=True)
def test_rotate_secrets_moves_every_secret_onto_the_new_key() -> None:
    old_key = settings.GATEHOUSE_SECRETS_KEYS[0]
    values = [marker() for _ in range(3)]
    secrets_ = [Secret.objects.create(purpose="test", value=value) for value in values]
    new_key = Fernet.generate_key().decode()

    result = manage("rotate_secrets", GATEHOUSE_SECRETS_KEYS=f"{new_key},{old_key}")

    assert result.returncode == 0, result.stderr
    assert "vault.Secret.value: 3 re-encrypted" in result.stdout
    for secret, value in zip(secrets_, values, strict=True):
        token = stored_token(secret)
        with pytest.raises(InvalidToken):
            Fernet(old_key).decrypt(token)
        assert Fernet(new_key).decrypt(token).decode() == value
    with override_settings(GATEHOUSE_SECRETS_KEYS=[new_key]):  # the old key dropped: all still readable
        assert [Secret.objects.get(pk=secret.pk).value for secret in secrets_] == values


def test_a_secret_under_a_dropped_key_is_refused_by_name_not_misread() -> None:
    secret = Secret.objects.create(purpose="test", value=marker())

    other_key = Fernet.generate_key().decode()

    with (
        override_settings(GATEHOUSE_SECRETS_KEYS=[other_key]),
        pytest.raises(secrets.SecretUnreadable, match="cannot be decrypted with any key"),
    ):
        Secret.objects.get(pk=secret.pk)


def test_new_writes_use_the_newest_key_and_reads_accept_any() -> None:
    old_key, new_key = settings.GATEHOUSE_SECRETS_KEYS[0], Fernet.generate_key().decode()
    before = Secret.objects.create(purpose="test", value="written under the old key")

    with override_settings(GATEHOUSE_SECRETS_KEYS=[new_key, old_key]):
        after = Secret.objects.create(purpose="test", value="written under the new key")

        assert Secret.objects.get(pk=before.pk).value == "written under the old key"
    assert Fernet(new_key).decrypt(stored_token(after)) == b"written under the new key"


def test_the_form_never_renders_the_secret_and_blank_keeps_it() -> None:
    value = marker()
    secret = Secret.objects.create(purpose="test", value=value)
    form_class = modelform_factory(Secret, fields=["purpose", "value"])

    html = str(form_class(instance=secret))
    form = form_class({"purpose": "renamed", "value": ""}, instance=secret)
    assert form.is_valid(), form.errors
    form.save()

    assert value not in html
    assert "•••• (set)" in html
    assert form.changed_data == ["purpose"]
    assert Secret.objects.get(pk=secret.pk).value == value


def test_the_form_replaces_the_secret_with_what_is_typed() -> None:
    secret = Secret.objects.create(purpose="test", value=marker())
    form_class = modelform_factory(Secret, fields=["purpose", "value"])
    replacement = marker()

    form = form_class({"purpose": "test", "value": replacement}, instance=secret)
    assert form.is_valid(), form.errors
    form.save()

    assert Secret.objects.get(pk=secret.pk).value == replacement
    assert replacement not in str(form_class(instance=secret))


@pytest.mark.django_db(transaction=True)
def test_a_dump_of_the_database_carries_the_mask_not_the_secret() -> None:
    value = marker()
    Secret.objects.create(purpose="test", value=value)

    result = manage("dumpdata", "vault")

    assert result.returncode == 0, result.stderr
    assert value not in result.stdout
    assert "•••• (set)" in result.stdout


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ("not-a-fernet-key", "GATEHOUSE_SECRETS_KEYS: key 1 of 1 is not a Fernet key"),
        (f"{Fernet.generate_key().decode()},tooshort", "GATEHOUSE_SECRETS_KEYS: key 2 of 2 is not a Fernet key"),
        ("", "GATEHOUSE_SECRETS_KEYS must be set when DEBUG is off"),
    ],
)
def test_a_missing_or_malformed_key_stops_a_command_with_one_clear_line(keys: str, message: str) -> None:
    result = manage("check", GATEHOUSE_SECRETS_KEYS=keys, DEBUG="0")

    last_line = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0
    assert last_line.startswith("django.core.exceptions.ImproperlyConfigured: ")  # one line, the class says why
    assert message in last_line
    assert "tooshort" not in result.stderr  # a key, even a bad one, is never echoed


def test_the_web_application_refuses_to_start_without_a_key() -> None:
    environment = {**os.environ, "GATEHOUSE_SECRETS_KEYS": "", "DEBUG": "0"}

    result = subprocess.run(
        [sys.executable, "-c", "import config.asgi"],
        cwd=BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode != 0
    assert "GATEHOUSE_SECRETS_KEYS must be set when DEBUG is off" in result.stderr.strip().splitlines()[-1]


def test_a_worker_refuses_to_start_without_a_key() -> None:
    environment = {**os.environ, "GATEHOUSE_SECRETS_KEYS": "", "DEBUG": "0"}

    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo", "--loglevel=WARNING"],
        cwd=BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode != 0
    assert "GATEHOUSE_SECRETS_KEYS must be set when DEBUG is off" in result.stderr


def test_debug_without_a_key_runs_on_an_ephemeral_key_and_says_so() -> None:
    script = "from vault import secrets; print(secrets.decrypt(secrets.encrypt('round trip')))"

    result = manage("shell", "--no-imports", "-c", script, GATEHOUSE_SECRETS_KEYS="", DEBUG="1")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "round trip"
    assert "GATEHOUSE_SECRETS_KEYS is not set: secrets are encrypted with an ephemeral key" in result.stderr


def test_check_configuration_refuses_a_malformed_key_in_process() -> None:
    with (
        override_settings(GATEHOUSE_SECRETS_KEYS=["x" * 44]),
        pytest.raises(ImproperlyConfigured, match="key 1 of 1 is not a Fernet key"),
    ):
        secrets.check_configuration()


def test_the_demo_makes_its_key_once_readable_by_its_owner_only(tmp_path: Path) -> None:
    from demo.run import demo_secrets_key

    first, second = demo_secrets_key(tmp_path / "var"), demo_secrets_key(tmp_path / "var")

    assert first == second
    assert Fernet(first).decrypt(Fernet(first).encrypt(b"x")) == b"x"
    assert (tmp_path / "var" / "secrets.key").stat().st_mode & 0o777 == 0o600


def test_rotation_keeps_the_keyed_hashes_of_sensitive_arguments_comparable() -> None:
    from toolcatalog.sensitive import hashed

    before = hashed("1234")
    old_key, new_key = settings.GATEHOUSE_SECRETS_KEYS[0], Fernet.generate_key().decode()

    with override_settings(GATEHOUSE_SECRETS_KEYS=[new_key, old_key]):
        call_command("rotate_secrets", stdout=StringIO())
        with override_settings(GATEHOUSE_SECRETS_KEYS=[new_key]):
            assert hashed("1234") == before


def test_make_demo_gives_every_process_the_key_it_keeps_under_var(tmp_path: Path) -> None:
    script = "from demo.run import demo_environment; print(demo_environment()['GATEHOUSE_SECRETS_KEYS'])"
    environment = {key: value for key, value in os.environ.items() if key != "GATEHOUSE_SECRETS_KEYS"}
    environment["GATEHOUSE_VAR_DIR"] = str(tmp_path / "var")

    runs = [
        subprocess.run(  # a fresh shell's `make demo`, twice
            [sys.executable, "-c", script], cwd=BASE_DIR, env=environment, capture_output=True, text=True, timeout=60
        )
        for _ in range(2)
    ]

    keys = [run.stdout.strip() for run in runs]
    assert keys[0] == keys[1] == (tmp_path / "var" / "secrets.key").read_text().strip()
    assert Fernet(keys[0])
