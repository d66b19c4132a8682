"""The embedded Celery broker (`make demo`'s default): message files in a folder, written atomically.

kombu's stock `filesystem://` transport creates a message file under its final name and
then writes into it, so a worker polling the folder can take the file while it is still
empty, fail to decode it and die with the message lost. Here a message is written under
a name no reader looks at, flushed to disk, and only then renamed into the queue: on
POSIX a rename is atomic, so a reader sees a whole message or none.

A file that still cannot be decoded (a disk fault, a hand-made file) is moved aside to
`rejected/` and logged; the worker goes on with the next message instead of dying.

As with any virtual kombu transport, a message taken but not yet acknowledged lives in
the worker's memory: a clean stop puts it back, a killed worker loses it. Gatehouse's
sweeper re-enqueues every approved call nobody claimed, so no call is lost with it.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic_ns

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps, loads

from audit.typealiases import JSONObject

logger = logging.getLogger(__name__)

URL_SCHEMES = ("embedded://", "filesystem://")
TRANSPORT = "config.embedded_broker:Transport"


def is_embedded(broker_url: str) -> bool:
    """Return True when `broker_url` names the embedded broker (`filesystem://` is its older name)."""
    return broker_url.startswith(URL_SCHEMES)


def transport_options(folder: Path) -> dict[str, object]:
    """Return the transport's options for a broker kept in `folder`, creating its sub-folders."""
    for sub in ("queue", "taken", "rejected", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        # Taken messages move within the same file system, so taking one is a rename too.
        "processed_folder": str(folder / "taken"),
        "control_folder": str(folder / "control"),
        "store_processed": True,
        "polling_interval": 0.1,
    }


class Channel(filesystem.Channel):
    """A filesystem channel whose messages appear whole or not at all."""

    # kombu's filesystem Channel narrows _put and _get from its base's signatures (its stubs ignore that too):
    # these keep the filesystem Channel's.
    def _put(self, queue: str, payload: JSONObject, **kwargs: object) -> None:  # type: ignore[override]
        """Write `payload` under a temporary name, flush it, then rename it into `queue`."""
        # Readers take files in name order: a fixed-width clock reading first keeps the queue in order.
        name = f"{monotonic_ns():020d}_{uuid.uuid4()}.{queue}.msg"
        folder = Path(self.data_folder_out)
        partial = folder / f".{name}.partial"  # readers only take names ending in ".<queue>.msg"
        try:
            with open(partial, "wb") as file:
                file.write(dumps(payload).encode())
                file.flush()
                os.fsync(file.fileno())
            os.replace(partial, folder / name)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise ChannelError(f"Cannot add message {name!r} to the embedded broker") from exc

    def _get(self, queue: str) -> JSONObject:  # type: ignore[override]
        """Take the oldest whole message of `queue`; set aside any that cannot be decoded."""
        wanted = f"{queue}.msg"
        folder = Path(self.data_folder_in)
        for name in sorted(os.listdir(folder)):
            if name.startswith(".") or name.partition(".")[2] != wanted:
                continue
            taken = Path(self.processed_folder) / name
            try:
                os.rename(folder / name, taken)  # atomic: of two workers, one takes it
            except OSError:
                continue
            payload = self._read(taken)
            if payload is not None:
                return payload
        raise Empty()

    def _read(self, taken: Path) -> JSONObject | None:
        """Return the message in `taken` and delete the file, or set it aside and return None."""
        try:
            payload: JSONObject = loads(taken.read_bytes())
        except (OSError, ValueError) as exc:
            rejected = taken.parent.parent / "rejected" / taken.name
            os.replace(taken, rejected)
            logger.error("Embedded broker: set aside a message it cannot read (%s): %s", exc, rejected)
            return None
        taken.unlink()
        return payload


class Transport(filesystem.Transport):
    """The embedded broker's transport; it has no host to connect to."""

    Channel = Channel
    # No hostname by default, so kombu does not warn on every connection that none was supplied.
    default_connection_params: dict[str, object] = {}
