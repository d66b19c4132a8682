"""The benchmark's report: a headline, the machine, the commands, every figure as median (min–max)."""

from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass
from pathlib import Path

from bench import pages as pages_scenario
from bench import sealing as sealing_scenario
from bench import verify as verify_scenario
from bench.e2e import ROUNDS_PER_RUN, E2EResults
from bench.environment import Machine
from bench.ingest import CONCURRENCIES, IngestResults
from bench.pages import PAGES, PageResults
from bench.parameters import BenchSettings
from bench.sealing import SealingResults
from bench.stats import Spread, keep_row
from bench.validation import ValidationResults
from bench.verify import VerifyRun

FINDINGS = Path(__file__).with_name("findings.md")
# Tier-2 ingest over the bare insert on Gatehouse's own server, and on the reference server (gunicorn sync workers).
INGEST_TARGET = 0.75
INGEST_TARGET_REFERENCE = 0.6
REFERENCE = "bare-gunicorn"
E2E_TARGET = 2.0
PAGE_TARGET_MS = 150.0
VERIFY_TARGET = 250_000


@dataclass
class Results:
    settings: BenchSettings
    machine: Machine
    versions: dict[str, str]
    commands: dict[str, str]
    load_before: str
    load_after: str
    date: str
    elapsed_seconds: float
    ingest: IngestResults
    e2e: E2EResults
    pages: PageResults
    verify: list[VerifyRun]
    validation: ValidationResults
    sealing: SealingResults | None = None  # None in results saved before the sequencer was measured
    verify_walk: verify_scenario.WalkAB | None = None  # None in results saved before the walk's A/B


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def headline(r: Results) -> list[str]:
    """Return the paragraph and ratios the README quotes."""
    ratios = {c: r.ingest.ratio("tier2", c) for c in CONCURRENCIES}
    reference = {c: r.ingest.ratio("tier2", c, base=REFERENCE) for c in CONCURRENCIES if has_reference(r)}
    e2e, instant = r.e2e.ratio("demo_service"), r.e2e.ratio("instant")
    pages_p95 = max(r.pages.spread(page, "large", "p95_ms").median for page in PAGES)
    pending, events = r.pages.sizes["large"]
    rate = verify_scenario.rate(r.verify)
    return [
        "## Headline",
        "",
        f"On a {r.machine.cpus}-core machine, with PostgreSQL, Redis, the web server and the worker all on it, "
        "taking a proposal through Gatehouse's governance (authenticate, validate, classify, store, audit-chain) "
        "sustains "
        + " and ".join(f"**{ratios[c].median:.2f}×** (concurrency {c})" for c in CONCURRENCIES)
        + " the requests/s of a bare Django endpoint that only parses the JSON and inserts one row, served by "
        f"Gatehouse's own server, with no errors (target ≥ {INGEST_TARGET}×)"
        + reference_clause(reference)
        + ". An auto-approved call — proposed, executed by the worker "
        f"with a scoped credential, recorded, the waiting request told — comes back `succeeded` in "
        f"**{instant.median:.2f}×** the time of a bare POST plus a bare Celery round trip when its downstream "
        f"answers at once (Gatehouse's own cost), and in **{e2e.median:.2f}×** when the downstream is the demo "
        f"seat service, a second Django request on the same server (target ≤ {E2E_TARGET}×). "
        "The reviewer pages (the queue, a call, the audit log, the overview) "
        f"answer in ≤ **{pages_p95:.0f} ms** p95 over {pending:,} pending calls and {events:,} audit events, with a "
        f"fixed number of queries, and `audit_verify` checks **{rate.median:,.0f} events/s**.",
        "",
        "| headline ratio | median (min–max) | target |",
        "|---|---|---|",
        *(
            f"| tier-2 ingest ÷ bare insert on Gatehouse's server, c={c} | {ratios[c].format(2)} | "
            f"≥ {INGEST_TARGET} — {verdict(ratios[c].low >= INGEST_TARGET)} |"
            for c in CONCURRENCIES
        ),
        *(
            f"| tier-2 ingest ÷ bare insert on gunicorn sync workers, c={c} | {ratio.format(2)} | "
            f"≥ {INGEST_TARGET_REFERENCE} — {verdict(ratio.low >= INGEST_TARGET_REFERENCE)} |"
            for c, ratio in reference.items()
        ),
        f"| auto-approved end-to-end p50 ÷ (bare POST p50 + bare Celery p50), instant downstream | "
        f"{instant.format(2)} | ≤ {E2E_TARGET} — {verdict(instant.high <= E2E_TARGET)} |",
        f"| the same, the demo seat service as downstream | {e2e.format(2)} | "
        f"≤ {E2E_TARGET} — {verdict(e2e.high <= E2E_TARGET)} |",
        f"| worst reviewer page p95 (ms) | {pages_p95:.1f} | "
        f"< {PAGE_TARGET_MS:.0f} — {verdict(pages_p95 < PAGE_TARGET_MS)} |",
        f"| audit_verify events/s | {rate.format(0)} | ≥ {VERIFY_TARGET:,} — {verdict(rate.low >= VERIFY_TARGET)} |",
        *sealing_scenario.headline_rows(r.sealing, getattr(r.ingest, "sealing_delay", None)),
        *store_ab_rows(r),
        *verify_scenario.headline_rows(getattr(r, "verify_walk", None)),
        *pages_scenario.ab_rows(r.pages),
        "",
    ]


def has_reference(r: Results) -> bool:
    """Return whether the run measured the bare insert on the reference server (results saved before did not)."""
    return (REFERENCE, CONCURRENCIES[0]) in r.ingest.runs


def reference_clause(reference: dict[int, Spread]) -> str:
    """Return the headline's words for the ratios against the bare insert on gunicorn sync workers."""
    if not reference:
        return ""
    return (
        ", and "
        + " and ".join(f"**{reference[c].median:.2f}×** (concurrency {c})" for c in CONCURRENCIES)
        + " the same bare endpoint served by gunicorn's sync workers, as plain Django is usually deployed "
        f"(target ≥ {INGEST_TARGET_REFERENCE}×)"
    )


def store_ab_rows(r: Results) -> list[str]:
    """Return the A/B rows: tier-2 ingest with the store's PostgreSQL statements ÷ with their portable twins."""
    if ("tier2-portable", CONCURRENCIES[0]) not in r.ingest.runs:  # results saved before the A/B existed
        return []
    rows = []
    for c in CONCURRENCIES:
        label = f"tier-2 ingest with the store's PostgreSQL statements ÷ with their portable twins, c={c}"
        rows.append(keep_row(label, r.ingest.ratio("tier2", c, base="tier2-portable"), kept="them"))
    return rows


E2E_ROWS = (
    ("instant", "Gatehouse auto-approved, proposal → `succeeded`, instant downstream"),
    ("demo_service", "the same, the demo seat service as downstream"),
    ("bare_post", "bare POST"),
    ("bare_celery", "bare Celery round trip"),
    ("bare_composite", "bare composite: a bare POST that queues the bare task and is told when it ran"),
    ("bare_governed", "bare governed shape: the composite plus a governed call's read, claim and downstream call"),
)


def setup_section(r: Results) -> list[str]:
    s = r.settings
    lines = [
        "## Machine, versions, commands",
        "",
        f"- Run on {r.date}; `make bench` took **{r.elapsed_seconds / 60:.1f} min** end to end.",
        f"- Machine: {r.machine.cpus} CPUs (`nproc`), {r.machine.cpu_model}, {r.machine.memory_gib:.1f} GiB RAM, "
        f"Linux {r.machine.kernel}.",
        f"- Load average (1/5/15 min) before: {r.load_before}; after: {r.load_after}. The machine is shared "
        "(other engineers' test suites may run on it), so absolute figures drift; every target is a ratio "
        "measured in the same run, runs interleaved.",
        "- Versions: " + ", ".join(f"{name} {ver}" for name, ver in r.versions.items()) + ".",
        "",
        f"The stack is the benchmark's own: a fresh database `{s.database}`, "
        f"Redis DB `{s.redis_url.rsplit('/', 1)[-1]}`, "
        "`DEBUG=0`, `migrate` + `seed_demo`, and these processes:",
        "",
        "```sh",
        *r.commands.values(),
        "```",
        "",
        "- Gatehouse's web server is the Procfile's: gunicorn's threaded workers (`gthread`) serving "
        f"`config.wsgi` (the console, the API and `/mcp`), {s.web_workers} processes — the usual (2 × cores) + 1 "
        f"— of {s.web_threads} threads. Each process's psycopg pool is capped at {s.pool_max} connections "
        "(`GATEHOUSE_DB_POOL_MAX`) so the servers stay under PostgreSQL's `max_connections`. The reference "
        f"server is the same settings under gunicorn's sync workers ({s.web_workers} processes), the way plain "
        "Django is usually deployed: the bare insert is measured on both, in the same run.",
        "- `GATEHOUSE_RATE_LIMIT_PER_MINUTE=0`: the per-agent limit (1,200/min by default) would otherwise answer 429 "
        "to a load test from one agent; `GATEHOUSE_AGENT_BUDGET_CALLS=1000000000` likewise keeps the per-agent call "
        "budget (1,000 an hour by default) from refusing, while every proposal still counts against it.",
        "- The demo downstream services (executions, verifications; `GATEHOUSE_DEMO=1`) are this same server's "
        f"`/demo-services/`, via `GATEHOUSE_DEMO_SERVICES_URL={s.base_url}`.",
        "- The Procfile's audit sequencer (`manage.py audit_sequencer`) runs throughout: writers insert events "
        "unsealed, it seals them (section 1b).",
        "- `DJANGO_SETTINGS_MODULE=bench.settings` adds `bench.bare` to the product's settings: the bare endpoint "
        "`POST /bench/insert` (parse JSON, insert one row with a unique key, answer 201) and the bare task "
        "`bench.bare.touch` (update one row), served by the same processes, and the two bare compositions of "
        "section 2.",
        "",
    ]
    return lines


def ingest_section(r: Results) -> list[str]:
    s = r.settings
    lines = [
        "## 1. Ingest: `POST /api/v1/tool-calls`",
        "",
        f"wrk, {s.runs} runs × {s.duration:.0f} s per endpoint and concurrency, interleaved: {_ingest_turns(r)}, "
        f"after a {s.warmup:.0f} s warm-up of each. Every request carries its own "
        "idempotency key. Tier 2: a R$250 refund by `support-agent` (held for a reviewer; nothing executes; its "
        "dry-run preview is asked for when a reviewer opens it, so none is computed here), sent both to the web server "
        "and to a second one, identical but for `GATEHOUSE_POSTGRESQL_STORE=0` (the A/B of the store modules' "
        "PostgreSQL statements, `audit/store.py` and `approvals/store.py`, against their portable twins: the ORM "
        "path SQLite runs). Tier 0: `search_seats` by "
        "`box-office-agent` (approved; an execution task is queued). Bare: the same JSON body to `POST /bench/insert`, "
        "on Gatehouse's server and on the reference server (gunicorn sync workers), taking turns with the rest. "
        "The worker runs throughout, so executions compete for the same two cores; what a run leaves queued is "
        "dropped before the next run so it does not load it (drained between runs: "
        f"{sum(r.ingest.drained):,} tasks in total).",
        "",
        "| endpoint | concurrency | requests/s | p50 ms | p99 ms | errors | ÷ bare (requests/s) "
        "| ÷ bare on gunicorn sync | waiting for an advisory lock |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    labels = {
        "bare": "bare insert",
        REFERENCE: "bare insert, reference server (gunicorn sync workers)",
        "tier2": "Gatehouse tier 2 (pending)",
        "tier2-portable": "the same, store's portable twins (`GATEHOUSE_POSTGRESQL_STORE=0`)",
        "tier0": "Gatehouse tier 0 (approved)",
    }
    labels = {name: label for name, label in labels.items() if (name, CONCURRENCIES[0]) in r.ingest.runs}
    for c in CONCURRENCIES:
        for name, label in labels.items():
            ratio = "—" if name == "bare" else r.ingest.ratio(name, c).format(2)
            reference = "—" if name == REFERENCE or REFERENCE not in labels else r.ingest.ratio(name, c, REFERENCE)
            waiting = Spread.of(r.ingest.lock_waits[(name, c)]).format(2)
            lines.append(
                f"| {label} | {c} | {r.ingest.spread(name, c, 'rps').format(0)} | "
                f"{r.ingest.spread(name, c, 'p50_ms').format(1)} | {r.ingest.spread(name, c, 'p99_ms').format(1)} | "
                f"{r.ingest.errors(name, c)} | {ratio} | {_format(reference)} | {waiting} |"
            )
    lost = sum(r.ingest.lost(name, c) for name in labels for c in CONCURRENCIES)
    lines += [
        "",
        "Errors: non-2xx answers plus socket errors, as wrk counts them. Every 2xx was checked against the "
        f"database afterwards: {lost} answered without a stored row. *Waiting for an advisory lock*: mean number "
        "of PostgreSQL sessions waiting on any advisory lock (writers take none; the audit sequencer's sealers "
        "take theirs), sampled every 20 ms during the run.",
        "",
        f"wrk command (per block): `{r.commands.get('wrk', '')}`",
        "",
    ]
    return lines


def _format(ratio: Spread | str) -> str:
    return ratio if isinstance(ratio, str) else ratio.format(2)


def _ingest_turns(r: Results) -> str:
    rounds, seconds = r.ingest.rounds, r.settings.duration
    if rounds <= 1:
        return "bare, tier 2, tier 0 one after the other in every run"
    return (
        f"in every run {rounds} rounds of {seconds / rounds:.0f}-s blocks, the endpoints taking turns, "
        "so that a slow spell of the machine falls on all of them alike; each endpoint's blocks are then pooled — "
        "requests/s is its requests over its seconds, and p50/p99 come from its blocks' latencies pooled (wrk's "
        "latency at every 0.1 % of each block's requests, weighted by the block's requests)"
    )


def e2e_section(r: Results) -> list[str]:
    s = r.settings
    return [
        "## 2. End to end: an auto-approved call",
        "",
        f"One client, sequential, {s.runs} runs. Gatehouse: `POST /api/v1/tool-calls?wait=10` of a tier-0 "
        f"`search_seats` until it answers `succeeded` (proposal → queued → worker claims → scoped credential → "
        f"downstream call → verification, which for a read is its own answer (findings, 14) → succeeded, the "
        f"waiting request told through Redis), {s.e2e_calls} calls per run, against two downstreams: "
        "`bench/downstream.py`, which answers at once with a fixed answer of the demo service's shape and size "
        "(`search_seats_instant`: search_seats' schema and tier, granted to the same agent), "
        "and the demo seat service itself, a Django view "
        "on the same web server that checks the credential and queries the seats — a second full request that "
        "neither bare measurement has (findings, 20). Bare POST: the same body to "
        f"`/bench/insert`, {s.e2e_calls * 2} per run. Bare Celery round trip: insert a row, "
        "enqueue `bench.bare.touch` on "
        f"the same Redis broker, poll the row until the worker has updated it, {s.e2e_calls * 2} per run. "
        "The bare composite and the bare governed shape are below the table. "
        f"Each run measures in {ROUNDS_PER_RUN} rounds of short blocks, one of each measurement in turn, so a "
        "slow spell of the machine falls on all of them alike. "
        "Before the first run the calls table is vacuumed, as autovacuum would after the ingest scenario's "
        "executions (findings, 18).",
        "",
        "| measurement | p50 ms | p99 ms |",
        "|---|---|---|",
        *(
            f"| {label} | {r.e2e.spread(name, 50).format(1)} | {r.e2e.spread(name, 99).format(1)} |"
            for name, label in E2E_ROWS
            if getattr(r.e2e, name, None)  # results saved before a row existed lack it
        ),
        "",
        f"Ratio Gatehouse p50 ÷ (bare POST p50 + bare Celery p50), run by run: instant downstream "
        f"**{r.e2e.ratio('instant').format(2)}**, demo seat service **{r.e2e.ratio('demo_service').format(2)}** "
        f"(target ≤ {E2E_TARGET}).",
        "",
        *composite_lines(r),
    ]


def composite_lines(r: Results) -> list[str]:
    """Say how much of the end-to-end budget the shape of the flow takes with no Gatehouse step in it."""
    if not getattr(r.e2e, "bare_composite", None):
        return []
    return [
        "The bare composite (`POST /bench/insert-and-wait`, "
        f"{r.settings.e2e_calls} per run) is an auto-approved call's shape with none of Gatehouse's steps: "
        "the bare insert, one Celery message to `bench.bare.touch_and_tell` (the bare update, then a Redis "
        "notice), the request subscribed and told. It is not judged; it shows what the shape itself costs "
        f"on this stack: **{r.e2e.ratio('bare_composite').format(2)}×** (bare POST p50 + bare Celery p50), "
        "run by run, of the 2× the target allows an auto-approved call.",
        "",
        *governed_lines(r),
    ]


def governed_lines(r: Results) -> list[str]:
    """Say what the round trips a governed call cannot skip cost, with none of Gatehouse's code."""
    if not getattr(r.e2e, "bare_governed", None):
        return []
    return [
        "The bare governed shape (`POST /bench/governed-and-wait`, "
        f"{r.settings.e2e_calls} per run) adds to the composite the round trips "
        "an auto-approved call cannot do without, in plain Django: a read by a unique key before the insert (a "
        "proposal reads its agent and grant), and a task (`bench.bare.claim_call_and_tell`) that commits a claim "
        "before the effect, POSTs to the instant downstream with urllib3, commits the answer and then tells the "
        "request — no pipeline, no audit events, no credential, no validation. Not judged: "
        f"**{r.e2e.ratio('bare_governed').format(2)}×** (bare POST p50 + bare Celery p50); Gatehouse with the "
        f"instant downstream takes **{r.e2e.over('instant', 'bare_governed').format(2)}×** its p50, run by run.",
        "",
    ]


def pages_section(r: Results) -> list[str]:
    s = r.settings
    lines = [
        "## 3. Reviewer pages",
        "",
        "Signed in as `alice` (group with `approvals.review_toolcall` and `audit.browse_auditlog`), wrk with one "
        f"connection, {s.runs} runs × {s.page_duration:.0f} s per page and data size. Queries: the same request "
        "in-process under `CaptureQueriesContext` (session, user and permission queries included). Bulk data: "
        "pending tier-2/3 "
        "refunds from one `INSERT … SELECT generate_series`, audit events `COPY`ed after the sealed head already "
        "sealed, with the digest and hash the sequencer would give them (a load that at least doubles the table "
        "builds its plain indexes after the rows, as a restore does); then `VACUUM ANALYZE`, as autovacuum would.",
        "",
        "| page | pending calls | audit events | p50 ms | p95 ms | queries |",
        "|---|---|---|---|---|---|",
    ]
    for page in PAGES:
        labels = [page, pages_scenario.portable(page)] if page in pages_scenario.TALLIED else [page]
        for label in labels:
            for size, (pending, events) in r.pages.sizes.items():
                if (label, size) not in r.pages.runs:
                    continue  # results saved before the tally's A/B
                lines.append(
                    f"| {label} (`{PAGES[page]}`) | {pending:,} | {events:,} | "
                    f"{r.pages.spread(label, size, 'p50_ms').format(1)} | "
                    f"{r.pages.spread(label, size, 'p95_ms').format(1)} | {r.pages.queries[(label, size)]} |"
                )
    lines.append("")
    return lines


def verify_section(r: Results) -> list[str]:
    runs = r.verify
    return [
        "## 4. `audit_verify`",
        "",
        f"`{r.commands['audit_verify']}`, {len(runs)} runs over {runs[0].events:,} events. Rate = events ÷ the "
        "command's own elapsed time (walk + count); wall time includes Python and Django start-up.",
        "",
        "| events/s | walk s | wall s (/usr/bin/time) | max RSS MiB |",
        "|---|---|---|---|",
        f"| {verify_scenario.rate(runs).format(0)} | {_spread([x.seconds for x in runs], 2)} | "
        f"{_spread([x.wall_seconds for x in runs], 1)} | {_spread([x.max_rss_mib for x in runs], 0)} |",
        "",
        *verify_scenario.section_lines(getattr(r, "verify_walk", None)),
    ]


def validation_section(r: Results) -> list[str]:
    lines = [
        "## 5. Validation and risk evaluation",
        "",
        "`toolcatalog.policy.evaluate(policy, grant, arguments)` with `emitir_estorno`'s policy from "
        "`toolcatalog.policies.policy_for` (its input schema and both rule conditions compiled once per tool "
        f"version), 20,000 calls per run, {r.settings.runs} runs, in-process. For scale, compiling that policy once "
        f"took {r.validation.compile_ms:.1f} ms.",
        "",
        "| arguments | µs per call |",
        "|---|---|",
        *(f"| {label} | {spread.format(1)} |" for label, spread in r.validation.per_call_us.items()),
        "",
    ]
    return lines


def _spread(values: list[float], digits: int) -> str:
    return Spread.of(values).format(digits)


def markdown(r: Results) -> str:
    """Return docs/benchmarks.md."""
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m bench.run`; see `bench/`). Every figure is the median of "
        f"{r.settings.runs} runs with the min–max in brackets. CI does not run the benchmark.",
        "",
        *headline(r),
        *setup_section(r),
        *ingest_section(r),
        *sealing_scenario.section(r.sealing, getattr(r.ingest, "sealing_delay", None)),
        *e2e_section(r),
        *pages_section(r),
        *verify_section(r),
        *validation_section(r),
    ]
    if FINDINGS.exists():
        lines += [FINDINGS.read_text().rstrip(), ""]
    return "\n".join(lines)


def write(results: Results, output: Path) -> str:
    """Write the report to `output`; return it."""
    document = markdown(results)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(document)
    return document


def save(results: Results, path: Path) -> None:
    """Keep the raw results, so the report can be written again without measuring again."""
    path.write_bytes(pickle.dumps(results))


def main(pickled: str, output: str) -> int:
    """`python -m bench.report var/bench/results.pickle docs/benchmarks.md`: write the report again."""
    results = pickle.loads(Path(pickled).read_bytes())  # noqa: S301 — our own file, written by bench.run
    write(results, Path(output))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
