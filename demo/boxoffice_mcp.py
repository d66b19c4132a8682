"""Seed 004's box office as an upstream MCP server of its own (the official SDK's MCPServer).

A system Gatehouse does not own: it keeps its own inventory (a SQLite file of its
own, --inventory or BOXOFFICE_INVENTORY, seeded on first use with the festival's two shows) and
knows nothing of Gatehouse — no credentials, no idempotency keys, as most MCP servers.
`make demo` registers it as the upstream `boxoffice` (stdio: Gatehouse's worker
starts this program for each call) and syncs its three tools into the catalog:

- `search_seats` — read-only → tier 0, runs at once;
- `hold_seats` — a non-destructive write → tier 1; the demo's rule raises a hold
  of more than two seats to tier 2, so it waits for a reviewer;
- `release_hold` — a non-destructive, idempotent write → tier 1.

    python demo/boxoffice_mcp.py [--inventory FILE]              stdio (what Gatehouse starts)
    python demo/boxoffice_mcp.py [--inventory FILE] http PORT    Streamable HTTP on 127.0.0.1:PORT/mcp

Imports nothing of Gatehouse: it starts in a fraction of a second for each call.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

# (section, rows, seats per row, price in centavos): the demo festival's arena.
SECTIONS = [("Pista Premium", "AB", 10, 32000), ("Cadeira Inferior", "CDE", 12, 28000), ("Camarote", "K", 6, 65000)]
EVENTS = ["show-sabado", "show-domingo"]
HOLD_SECONDS = 600
MAX_SEATS = 6
DEFAULT_INVENTORY = Path(__file__).resolve().parent.parent / "var" / "boxoffice.sqlite3"

server = MCPServer(
    "boxoffice",
    title="Festival box office",
    instructions="Seats of the summer festival: search them, hold them for ten minutes, release a hold.",
    log_level="WARNING",
)


@contextmanager
def inventory() -> Iterator[sqlite3.Connection]:
    """Open the inventory (creating and seeding it on first use); one transaction per use."""
    path = Path(os.environ.get("BOXOFFICE_INVENTORY") or DEFAULT_INVENTORY)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=30, isolation_level="IMMEDIATE")
    try:
        with db:
            _seed(db)
            yield db
    finally:
        db.close()


def _seed(db: sqlite3.Connection) -> None:
    db.execute(
        "CREATE TABLE IF NOT EXISTS seat (event TEXT, seat TEXT, section TEXT, row TEXT, number INTEGER, "
        "price INTEGER, PRIMARY KEY (event, seat))"
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS hold "
        "(hold_id TEXT PRIMARY KEY, event TEXT, expires REAL, released INTEGER DEFAULT 0)"
    )
    db.execute("CREATE TABLE IF NOT EXISTS hold_seat (hold_id TEXT, seat TEXT)")
    rows = [
        (event, f"{row}{n}", section, row, n, price)
        for event in EVENTS
        for section, letters, per_row, price in SECTIONS
        for row in letters
        for n in range(1, per_row + 1)
    ]
    db.executemany("INSERT OR IGNORE INTO seat VALUES (?, ?, ?, ?, ?, ?)", rows)


def _held(db: sqlite3.Connection, event: str) -> set[str]:
    query = (
        "SELECT hs.seat FROM hold_seat hs JOIN hold h USING (hold_id) "
        "WHERE h.event = ? AND h.released = 0 AND h.expires > ?"
    )
    return {seat for (seat,) in db.execute(query, (event, time.time()))}


def _known_event(db: sqlite3.Connection, event: str) -> None:
    if db.execute("SELECT 1 FROM seat WHERE event = ? LIMIT 1", (event,)).fetchone() is None:
        raise ToolError(f"There is no event {event}; the events are {', '.join(EVENTS)}.")


@server.tool(annotations=ToolAnnotations(title="Search seats", read_only_hint=True, open_world_hint=False))
def search_seats(event_id: str, quantity: int = 2, max_price_brl: float = 1000.0) -> dict[str, object]:
    """Find up to five options of `quantity` free seats side by side, at or under the price."""
    if not 1 <= quantity <= MAX_SEATS:
        raise ToolError(f"quantity must be 1 to {MAX_SEATS}.")
    with inventory() as db:
        _known_event(db, event_id)
        held = _held(db, event_id)
        seats = db.execute(
            "SELECT seat, section, price, row FROM seat WHERE event = ? AND price <= ? ORDER BY price, row, number",
            (event_id, int(max_price_brl * 100)),
        ).fetchall()
    rows: dict[str, list[tuple[str, str, int, str]]] = {}
    for seat in seats:
        if seat[0] not in held:
            rows.setdefault(seat[3], []).append(seat)
    options = [free[i : i + quantity] for free in rows.values() for i in range(0, len(free) - quantity + 1, quantity)]
    options = options[:5]
    return {
        "event_id": event_id,
        "options": [
            {"seat_ids": [s[0] for s in o], "section": o[0][1], "total_brl": sum(s[2] for s in o) / 100}
            for o in options
        ],
    }


@server.tool(
    annotations=ToolAnnotations(
        title="Hold seats", read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    )
)
def hold_seats(event_id: str, seat_ids: list[str]) -> dict[str, object]:
    """Hold the seats for ten minutes (a hold can be released); refuses seats someone else holds."""
    if not 1 <= len(seat_ids) <= MAX_SEATS or len(set(seat_ids)) != len(seat_ids):
        raise ToolError(f"seat_ids must list 1 to {MAX_SEATS} distinct seats.")
    with inventory() as db:
        _known_event(db, event_id)
        listed = db.execute("SELECT seat FROM seat WHERE event = ?", (event_id,))
        known = {seat for (seat,) in listed} & set(seat_ids)
        if unknown := sorted(set(seat_ids) - known):
            raise ToolError(f"No such seats at {event_id}: {', '.join(unknown)}.")
        if taken := sorted(set(seat_ids) & _held(db, event_id)):
            raise ToolError(f"Already held: {', '.join(taken)}.")
        hold_id = "bh_" + secrets.token_hex(4)
        expires = time.time() + HOLD_SECONDS
        db.execute("INSERT INTO hold (hold_id, event, expires) VALUES (?, ?, ?)", (hold_id, event_id, expires))
        db.executemany("INSERT INTO hold_seat VALUES (?, ?)", [(hold_id, seat) for seat in seat_ids])
    return {"hold_id": hold_id, "event_id": event_id, "seat_ids": seat_ids, "expires_in_seconds": HOLD_SECONDS}


@server.tool(
    annotations=ToolAnnotations(
        title="Release a hold",
        read_only_hint=False,
        destructive_hint=False,
        idempotent_hint=True,
        open_world_hint=False,
    )
)
def release_hold(hold_id: str) -> dict[str, object]:
    """Release a hold: its seats are free again (releasing twice is harmless)."""
    with inventory() as db:
        if db.execute("SELECT 1 FROM hold WHERE hold_id = ?", (hold_id,)).fetchone() is None:
            raise ToolError(f"There is no hold {hold_id}.")
        db.execute("UPDATE hold SET released = 1 WHERE hold_id = ?", (hold_id,))
    return {"hold_id": hold_id, "released": True}


def main(args: list[str]) -> None:
    if args[:1] == ["--inventory"]:
        os.environ["BOXOFFICE_INVENTORY"] = args[1]
        args = args[2:]
    if args[:1] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(args[1]), stateless_http=True, json_response=True)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
