"""audit_verify's bench measurements: the walk's A/B runs the command with the store's walk and with its twin."""

from __future__ import annotations

import os

import pytest
from django.db import connection

from audit.chain import record_alone
from bench import dataset, verify


def child_env() -> dict[str, str]:
    """Return the environment of a child process that sees this test's database."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    return {**os.environ, "DATABASE_URL": url}


@pytest.mark.usefixtures("committed_events")
def test_the_walk_ab_runs_audit_verify_both_ways_over_the_whole_chain_alternating() -> None:
    record_alone("bench.before", actor=("system", "bench"))
    dataset.top_up_events(2_000)
    lines: list[str] = []

    walk = verify.measure_walk(child_env(), runs=2, log=lines.append)

    assert [run.events for run in walk.statement] == [2_000, 2_000]
    assert [run.events for run in walk.portable] == [2_000, 2_000]
    assert walk.ratio().low > 0
    assert len(lines) == 2
    assert any("A/B: audit_verify events/s" in row for row in verify.headline_rows(walk))
    assert any("its portable twin" in line for line in verify.section_lines(walk))
    assert verify.headline_rows(None) == [] and verify.section_lines(None) == []
