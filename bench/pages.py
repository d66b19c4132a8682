"""Scenario 3: the reviewer pages — the queue, a pending call, the audit log and the overview — signed in as a reviewer.

Response times come from wrk over HTTP (one reviewer, one connection); query
counts from the same views run in this process under CaptureQueriesContext.
Both are measured at two data sizes, to show the count does not grow with the data.
The page that counts calls by status (the overview: "pending now", calls by state) is
also measured on the web server with the store's portable twins
(`GATEHOUSE_POSTGRESQL_STORE=0`), run for run after the tally's: the A/B that keeps
PostgreSQL's tally of the calls (approvals/tally.py) against counting the calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench import wrk
from bench.parameters import BenchSettings
from bench.stats import Spread, keep_row

# `{call}`: the newest pending call, as a reviewer opening the top of the queue would.
PAGES = {"queue": "/", "a call": "/calls/{call}/", "audit log": "/audit/", "overview": "/overview/"}
REVIEWER = "alice"
# The pages that read the calls' tally, measured again on the portable twins' server (the
# queue counts no further than its cap: it does not).
TALLIED = ("overview",)


def portable(page: str) -> str:
    """Return the label of `page` served with the store's portable twins."""
    return f"{page}, portable twins"


@dataclass
class PageResults:
    """Per (page, data size label): wrk runs and the query count."""

    runs: dict[tuple[str, str], list[wrk.LoadResult]] = field(default_factory=dict)
    queries: dict[tuple[str, str], int] = field(default_factory=dict)
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)

    def spread(self, page: str, size: str, metric: str) -> Spread:
        return Spread.of([getattr(r, metric) for r in self.runs[(page, size)]])

    def tally_ratio(self, page: str, size: str) -> Spread:
        """Return `page`'s p95 counting the calls ÷ its p95 summing the tally, run by run."""
        pairs = zip(self.runs[(portable(page), size)], self.runs[(page, size)], strict=True)
        return Spread.of([twin.p95_ms / tallied.p95_ms for twin, tallied in pairs])


def reviewer_client() -> object:
    """Return a Django test client signed in as the demo reviewer (a real session row)."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username=REVIEWER))
    return client


def count_queries(client: object, path: str, postgresql_statements: bool = True) -> int:
    """Return how many SQL queries one request of `path` runs (in this process)."""
    from django.db import connection
    from django.test import override_settings
    from django.test.utils import CaptureQueriesContext

    with (
        override_settings(GATEHOUSE_POSTGRESQL_STORE=postgresql_statements),
        CaptureQueriesContext(connection) as captured,
    ):
        response = client.get(path)  # type: ignore[attr-defined]
    if response.status_code != 200:
        raise RuntimeError(f"{path} answered {response.status_code} to a signed-in reviewer")
    return len(captured)


def newest_pending_call() -> str:
    """Return the id of the newest call waiting for a reviewer."""
    from approvals.models import Status, ToolCall

    return str(ToolCall.objects.filter(status=Status.PENDING_APPROVAL).latest("created_at").pk)


def check_page(base_url: str, path: str, cookie: str) -> None:
    """Fail unless `path` answers 200 over HTTP to the reviewer's session (not a login redirect)."""
    response = httpx.get(base_url + path, headers={"Cookie": cookie}, follow_redirects=False, timeout=30)
    if response.status_code != 200:
        raise RuntimeError(f"{path} answered {response.status_code} over HTTP to the reviewer")


def measure(
    settings: BenchSettings, workdir: Path, size: str, results: PageResults, log: object = print
) -> PageResults:
    """Measure every page at the current data size (labelled `size`)."""
    from django.conf import settings as django_settings

    from bench import dataset

    results.sizes[size] = (dataset.pending_count(), dataset.event_count())
    client = reviewer_client()
    cookie = f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"  # type: ignore[attr-defined]
    call = newest_pending_call()
    for page, template in PAGES.items():
        path = template.format(call=call)
        servers = {page: settings.base_url}
        if page in TALLIED:
            servers[portable(page)] = settings.portable_base_url
        for label, base_url in servers.items():
            check_page(base_url, path, cookie)
            results.queries[(label, size)] = count_queries(client, path, postgresql_statements=label == page)
        target = wrk.Target("GET", path, {"Cookie": cookie})
        for run in range(1, settings.runs + 1):
            for label, base_url in servers.items():
                result = wrk.run(
                    base_url,
                    target,
                    connections=1,
                    seconds=settings.page_duration,
                    prefix=f"page-{run}",
                    workdir=workdir,
                )
                results.runs.setdefault((label, size), []).append(result)
                log(
                    f"  {label:<9} {size:<5} run {run}: p50 {result.p50_ms:6.1f} ms  p95 {result.p95_ms:6.1f} ms  "
                    f"queries {results.queries[(label, size)]}  errors {result.errors}"
                )
    return results


def ab_rows(results: PageResults) -> list[str]:
    """Return the headline rows of the tally's A/B at the largest data size (none for results saved before it)."""
    size = "large"
    rows = []
    for page in TALLIED:
        if (portable(page), size) not in results.runs:
            continue
        ratio = results.tally_ratio(page, size)
        label = f"{page} p95 counting the calls (portable twin) ÷ summing PostgreSQL's tally"
        rows.append(keep_row(f"{label}, {results.sizes[size][0]:,} pending", ratio))
    return rows
