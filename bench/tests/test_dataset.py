"""The pages scenario's audit events are COPYed onto the chain (bench.dataset.top_up_events): it must still verify."""

from __future__ import annotations

import pytest

from audit.chain import first_break, record_alone
from audit.models import Event
from bench import dataset


@pytest.mark.django_db
def test_topped_up_events_extend_the_chain_without_a_break() -> None:
    record_alone("bench.before", actor=("system", "bench"))

    added = dataset.top_up_events(40)
    record_alone("bench.after", actor=("system", "bench"))

    assert added == 39
    assert Event.objects.count() == 41
    assert first_break() is None


@pytest.mark.django_db
def test_a_chain_already_long_enough_is_left_as_it_is() -> None:
    dataset.top_up_events(5)

    assert dataset.top_up_events(3) == 0
    assert Event.objects.count() == 5
