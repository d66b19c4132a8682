"""`python -m bench.downstream PORT`: a downstream service that answers at once, for the end-to-end scenario.

The demo seat service is a Django view on the same web server as Gatehouse: with it
as the downstream, an auto-approved call pays for a second full request (and its seat
query) that neither bare measurement has. This server answers every POST with a fixed
seat-search answer of the demo service's shape and size, so that the end-to-end
figure measured against it is Gatehouse's own cost (propose, queue, claim, credential,
HTTP call, record, tell the waiting request) beside the bare POST and the bare Celery
round trip. It checks nothing: it is a stand-in, never part of the product.

Standard library only (asyncio), HTTP/1.1 with keep-alive, as the worker's client uses it.
"""

from __future__ import annotations

import asyncio
import json
import sys

# A real answer of the demo seat service for the bench's arguments (findings, 20).
ANSWER = {
    "event": "Festival de Verão — sábado",
    "event_id": "show-sabado",
    "starts_at": "2026-12-05T20:00:00+00:00",
    "options": [
        {"row": row, "section": section, "seat_ids": [f"{row}1", f"{row}2"], "price_brl": price, "total_brl": 2 * price}
        for row, section, price in (
            ("F", "Cadeira Superior", 150.0),
            ("G", "Cadeira Superior", 150.0),
            ("C", "Cadeira Inferior", 280.0),
            ("D", "Cadeira Inferior", 280.0),
            ("E", "Cadeira Inferior", 280.0),
        )
    ],
}
_BODY = json.dumps(ANSWER, ensure_ascii=False).encode()
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(_BODY) + _BODY


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer each request on the connection until the client closes it."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(_content_length(head))
            writer.write(RESPONSE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
