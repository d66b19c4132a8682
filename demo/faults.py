"""Fault injection for the tests that prove crash safety. Never set in production.

`GATEHOUSE_DEMO_FAULT="<fault>:<resource>"` makes the service misbehave for one
resource (read per request, so a test toggles it while the server runs):

- `pause_after_apply` — commit the effect, then hold the response while the variable
  stays set (at most a minute): the window in which a test SIGKILLs the worker;
- `pause_before_apply` — hold the request before touching anything while the variable
  stays set, then answer 503 without applying: for the worker that was killed meanwhile,
  its request never took effect;
- `ack_without_apply` — answer success but roll the effect back: a downstream that
  lies, which only post-execution verification catches;
- `unavailable` — answer 503 to every attempt; `unavailable_once` — to the first
  attempt of each idempotency key only.
"""

from __future__ import annotations

import os
import time

FAULT_ENV = "GATEHOUSE_DEMO_FAULT"
PAUSE_LIMIT_SECONDS = 60.0

_failed_keys: set[str] = set()


def active(fault: str, resource: str) -> bool:
    """Return whether `fault` is switched on for `resource`."""
    return os.environ.get(FAULT_ENV, "") == f"{fault}:{resource}"


def pause_after_apply(resource: str) -> None:
    """Block while the `pause_after_apply` fault is on for `resource`."""
    deadline = time.monotonic() + PAUSE_LIMIT_SECONDS
    while active("pause_after_apply", resource) and time.monotonic() < deadline:
        time.sleep(0.05)


def held_before_apply(resource: str) -> bool:
    """Block while `pause_before_apply` is on for `resource`; return whether the request was held."""
    if not active("pause_before_apply", resource):
        return False
    deadline = time.monotonic() + PAUSE_LIMIT_SECONDS
    while active("pause_before_apply", resource) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def unavailable(resource: str, key: str) -> bool:
    """Return whether this request should be answered 503."""
    if active("unavailable", resource):
        return True
    if active("unavailable_once", resource) and key not in _failed_keys:
        _failed_keys.add(key)
        return True
    return False
