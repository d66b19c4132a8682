"""The embedded broker: a message is seen whole or not at all, and a bad file never stops a worker."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from kombu import Connection

from config import embedded_broker


@pytest.fixture
def channel(tmp_path: Path) -> Iterator[Any]:
    options = embedded_broker.transport_options(tmp_path)
    with Connection("embedded://", transport=embedded_broker.TRANSPORT, transport_options=options) as connection:
        yield connection.default_channel


def test_a_message_still_being_written_is_not_visible_to_a_worker(
    channel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_while_writing: list[object] = []
    real_fsync = os.fsync

    def take_while_writing(fd: int) -> None:
        # The moment the stock transport's reader took a half-written file and died.
        try:
            seen_while_writing.append(channel._get("celery"))
        except Empty:
            seen_while_writing.append(None)
        real_fsync(fd)

    monkeypatch.setattr(embedded_broker.os, "fsync", take_while_writing)
    channel._put("celery", {"body": "whole"})

    assert seen_while_writing == [None]
    assert channel._get("celery") == {"body": "whole"}


def test_a_file_that_cannot_be_decoded_is_set_aside_and_the_next_message_delivered(
    channel: Any, tmp_path: Path
) -> None:
    (tmp_path / "queue" / "00000000000000000000_broken.celery.msg").write_bytes(b"")
    channel._put("celery", {"body": "next"})

    assert channel._get("celery") == {"body": "next"}
    assert [path.name for path in (tmp_path / "rejected").iterdir()] == ["00000000000000000000_broken.celery.msg"]
    with pytest.raises(Empty):
        channel._get("celery")


def test_messages_come_out_in_the_order_they_went_in_and_only_once(channel: Any, tmp_path: Path) -> None:
    for number in range(20):
        channel._put("celery", {"number": number})

    taken = [channel._get("celery")["number"] for _ in range(20)]

    assert taken == list(range(20))
    assert list((tmp_path / "queue").iterdir()) == []
    assert list((tmp_path / "taken").iterdir()) == []


def test_the_embedded_broker_is_chosen_by_its_url_and_not_for_redis() -> None:
    assert embedded_broker.is_embedded("embedded://")
    assert embedded_broker.is_embedded("filesystem://")
    assert not embedded_broker.is_embedded("redis://127.0.0.1:6379/0")
