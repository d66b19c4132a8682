"""`make bench` (python -m bench.run): start the bench stack, measure, print and write docs/benchmarks.md.

The stack (the web servers with their workers, one Celery worker, the audit sequencer) is stopped on the way out,
whether the run ends normally, fails, or is interrupted (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from bench.parameters import SETTINGS, BenchSettings

if TYPE_CHECKING:
    from bench.stack import Stack


def log(message: str) -> None:
    print(message, flush=True)


def prepare(settings: BenchSettings, env: dict[str, str]) -> dict[str, str]:
    """Create the fresh database, migrate, collect static files, seed the demo; return the agents' tokens."""
    from bench.stack import flush_redis, manage, prepare_database

    prepare_database(settings)
    flush_redis(settings)
    keys = Path(env["GATEHOUSE_SIGNING_KEYS"])
    if not any(keys.glob("*.pem")):
        manage(env, "signing_key", "generate", "--out", f"{keys}/")
    manage(env, "migrate", "--noinput")
    manage(env, "collectstatic", "--noinput")
    tokens_file = Path(env["GATEHOUSE_VAR_DIR"]) / "tokens.json"
    tokens_file.parent.mkdir(parents=True, exist_ok=True)
    manage(env, "seed_demo", "--password", "bench-reviewer-password", "--tokens-file", str(tokens_file))
    return json.loads(tokens_file.read_text())


def commands(settings: BenchSettings) -> dict[str, str]:
    """Return the exact command lines the report shows."""
    from bench import stack, verify, wrk

    env = " ".join(
        f"{name}={settings.environment()[name]}"
        for name in ("DJANGO_SETTINGS_MODULE", "DEBUG", "DATABASE_URL", "CELERY_BROKER_URL", "GATEHOUSE_DEMO",
                     "GATEHOUSE_DEMO_SERVICES_URL", "GATEHOUSE_RATE_LIMIT_PER_MINUTE", "GATEHOUSE_AGENT_BUDGET_CALLS",
                     "GATEHOUSE_DB_POOL_MAX",
                     "BENCH_INSTANT_ENDPOINT")
    )  # fmt: skip
    return {
        "env": f"export {env}  # and SECRET_KEY, ALLOWED_HOSTS",
        "web": stack.display(stack.web_command(settings)),
        "reference": stack.display(stack.reference_command(settings)),
        "worker": stack.display(stack.worker_command()),
        "sequencer": stack.display(stack.sequencer_command()),
        "downstream": stack.display(stack.downstream_command(settings)),
        "wrk": shlex.join(
            wrk.command(settings.base_url, 32, settings.duration / settings.ingest_rounds, Path("<block>.lua"))
        ),
        "audit_verify": stack.display(verify.command()),
    }


def load_data(pending: int, events: int) -> None:
    """Top the database up to `pending` pending calls and `events` audit events, logging each phase's time."""
    from bench import dataset

    started = time.monotonic()
    added_calls = dataset.top_up_pending(pending)
    calls_done = time.monotonic()
    added_events = dataset.top_up_events(events)
    events_done = time.monotonic()
    dataset.analyze()
    log(
        f"  loaded {added_calls:,} pending calls in {calls_done - started:.0f} s, {added_events:,} audit events in "
        f"{events_done - calls_done:.0f} s, VACUUM ANALYZE in {time.monotonic() - events_done:.0f} s"
    )


def measure(
    settings: BenchSettings, env: dict[str, str], tokens: dict[str, str], workdir: Path, stack: Stack
) -> dict[str, object]:
    """Run the five scenarios (and the sequencer's backlog) against the running stack; return their results by name."""
    from bench import dataset, e2e, ingest, pages, sealing, validation, verify

    log("1. Ingest")
    ingest_results = ingest.measure(settings, tokens, workdir, log)
    log("2. End to end")
    # Ingest left ~20,000 calls, thousands of them executed (dead row versions): start
    # from the table autovacuum would leave, as the pages scenario does (findings, 18).
    dataset.analyze()
    e2e_results = e2e.measure(settings, tokens, log)
    log("2b. Sealing a backlog")
    sealing_results = sealing.measure(settings.runs, log=log)
    with stack.sequencer_stopped():
        sealing.measure_statement(sealing_results, settings.runs, log=log)
    log("3. Reviewer pages")
    page_results = pages.PageResults()
    load_data(settings.small_pending_calls, settings.small_audit_events)
    pages.measure(settings, workdir, "small", page_results, log)
    log("3b. audit_verify's walk, A/B (a chain between the two sizes)")
    load_data(settings.small_pending_calls, settings.walk_ab_events)
    walk_results = verify.measure_walk(env, settings.runs, log)
    load_data(settings.pending_calls, settings.audit_events)
    pages.measure(settings, workdir, "large", page_results, log)
    log("4. audit_verify")
    verify_results = verify.measure(env, settings.runs, log)
    log("5. Validation")
    validation_results = validation.measure(settings.runs, log)
    return {
        "ingest": ingest_results,
        "e2e": e2e_results,
        "pages": page_results,
        "verify": verify_results,
        "validation": validation_results,
        "sealing": sealing_results,
        "verify_walk": walk_results,
    }


def main() -> int:
    """Run the whole benchmark; return the exit status."""
    from bench import wrk

    started = time.monotonic()
    settings = SETTINGS
    env = settings.environment()
    os.environ.update(env)
    wrk.ensure_wrk()
    from bench.environment import load_average

    load_before = load_average()
    log(f"Preparing database {settings.database} (load average {load_before}) …")
    tokens = prepare(settings, env)
    import django

    django.setup()
    from bench import environment, report
    from bench.stack import Stack

    workdir = Path(env["GATEHOUSE_VAR_DIR"])
    with Stack(settings, workdir / "logs") as stack:
        stack.start_all()
        measured = measure(settings, env, tokens, workdir, stack)
    results = report.Results(
        settings=settings,
        machine=environment.machine(),
        versions=environment.versions(),
        commands=commands(settings),
        load_before=load_before,
        load_after=load_average(),
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        elapsed_seconds=time.monotonic() - started,
        **measured,  # type: ignore[arg-type]
    )
    report.save(results, workdir / "results.pickle")
    document = report.write(results, settings.output)
    log("")
    log(document)
    log(f"Written to {settings.output} in {(time.monotonic() - started) / 60:.1f} min.")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("Interrupted: the bench stack was stopped.", file=sys.stderr)
        sys.exit(130)
