"""Driving Django admin as a person does: log in, GET a form, change fields, POST it with its CSRF token."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

from django.contrib.auth import get_user_model
from django.test import Client, override_settings

PASSWORD = "admin-password-for-tests"
# Hash test passwords cheaply: the login is what the tests exercise, not PBKDF2's cost.
FAST_HASHER = override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"])


class _FormFields(HTMLParser):
    """Collect what a browser would submit from one <form>: inputs, checked boxes, textareas, selections."""

    def __init__(self, form_id: str | None) -> None:
        super().__init__()
        self.form_id, self.inside, self.fields = form_id, False, {}
        self._textarea: str | None = None
        self._select: str | None = None
        self._first_option: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = self.form_id is None or a.get("id") == self.form_id
        if not self.inside:
            return
        name = a.get("name")
        if tag == "input" and name and a.get("type", "text") not in {"submit", "button", "file"}:
            if a.get("type") not in {"checkbox", "radio"} or "checked" in a:
                self.fields[name] = a.get("value", "on" if a.get("type") == "checkbox" else "")
        elif tag == "textarea" and name:
            self._textarea = name
            self.fields[name] = ""
        elif tag == "select" and name:
            self._select, self._first_option = name, None
        elif tag == "option" and self._select:
            if self._first_option is None:
                self._first_option = a.get("value", "")
            if "selected" in a:
                self.fields[self._select] = a.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "textarea":
            self._textarea = None
        elif tag == "select" and self._select:
            self.fields.setdefault(self._select, self._first_option or "")
            self._select = None

    def handle_data(self, data: str) -> None:
        if self._textarea:
            # The first newline after <textarea> belongs to the markup, not the value.
            self.fields[self._textarea] += data.removeprefix("\n") if not self.fields[self._textarea] else data


def form_fields(html: str, form_id: str | None = None) -> dict[str, str]:
    """Return the fields a browser would submit from the form with `form_id` (or every form)."""
    parser = _FormFields(form_id)
    parser.feed(html)
    return parser.fields


class AdminBrowser:
    """A logged-in admin with CSRF checks enforced, as in a real browser."""

    def __init__(self, username: str = "root", *, superuser: bool = True) -> None:
        with FAST_HASHER:
            self._log_in(username, superuser)

    def _log_in(self, username: str, superuser: bool) -> None:
        User = get_user_model()
        self.user = User.objects.create_user(
            username, f"{username}@example.com", PASSWORD, is_staff=True, is_superuser=superuser
        )
        self.client = Client(enforce_csrf_checks=True)
        page = self.client.get("/admin/login/")
        assert page.status_code == 200
        response = self.client.post(
            "/admin/login/?next=/admin/",
            {"username": username, "password": PASSWORD, "csrfmiddlewaretoken": self.csrf_token()},
        )
        assert response.status_code == 302, "admin login failed"

    def csrf_token(self) -> str:
        return self.client.cookies["csrftoken"].value

    def get(self, url: str, **kwargs: Any) -> Any:
        return self.client.get(url, **kwargs)

    def form(self, url: str, form_id: str | None = None) -> dict[str, str]:
        """GET the page and return its form's fields, ready to change and POST."""
        page = self.client.get(url)
        assert page.status_code == 200, f"GET {url} → {page.status_code}"
        return form_fields(page.content.decode(), form_id)

    def post(self, url: str, data: dict[str, Any], **kwargs: Any) -> Any:
        """POST with the CSRF token a page of this site gave the browser."""
        return self.client.post(url, {**data, "csrfmiddlewaretoken": self.csrf_token()}, **kwargs)

    def submit(self, url: str, changes: dict[str, Any], form_id: str | None = None, drop: tuple[str, ...] = ()) -> Any:
        """GET the form at `url`, apply `changes` (and drop fields, like unticked boxes), POST it back."""
        data = self.form(url, form_id)
        data.update({k: str(v) for k, v in changes.items()})
        for name in drop:
            data.pop(name, None)
        data.setdefault("_save", "Save")
        return self.client.post(url, data)
