"""Django settings of the benchmark's stack: the product's, plus the bare stack it is measured against.

`bench.bare` (one insert endpoint, its Celery tasks) lives here and not in the
product, so a deployment never installs or mounts it. The stack's processes get
DJANGO_SETTINGS_MODULE=bench.settings from `bench.parameters`.
"""

from __future__ import annotations

from config.settings import *  # noqa: F403 — the product's settings, unchanged but for the two below
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench.bare"]
ROOT_URLCONF = "bench.urls"
