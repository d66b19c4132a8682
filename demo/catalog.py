"""The demo catalog: seed 000's refund tool and seed 004's box-office tools, as data."""

from __future__ import annotations

from datetime import timedelta

from audit.typealiases import JSONObject

TIERS: list[JSONObject] = [
    {
        "level": 0,
        "name": "read",
        "description": "Reads nothing but data; runs without approval.",
        "requires_approval": False,
        "approvals_required": 0,
        "approval_window": timedelta(hours=1),
    },
    {
        "level": 1,
        "name": "reversible write",
        "description": "Changes something that can be undone; runs without approval, idempotency key required.",
        "requires_approval": False,
        "approvals_required": 0,
        "approval_window": timedelta(hours=1),
    },
    {
        "level": 2,
        "name": "irreversible write",
        "description": "Cannot be undone; one reviewer must approve.",
        "requires_approval": True,
        "approvals_required": 1,
        "approval_window": timedelta(hours=4),
    },
    {
        "level": 3,
        "name": "critical",
        "description": "Large or dangerous; two distinct reviewers must approve (four-eyes).",
        "requires_approval": True,
        "approvals_required": 2,
        "approval_window": timedelta(hours=8),
    },
]

MOTIVOS = ["produto_defeituoso", "atraso_entrega", "cancelamento_cliente", "erro_cobranca"]

TOOLS: list[JSONObject] = [
    {
        "name": "emitir_estorno",
        "title": "Issue a refund",
        "description": "Refund part or all of an order, in cents (BRL). Irreversible above R$200: "
        "larger refunds wait for a reviewer. Idempotent per idempotency_key.",
        "input_schema": {
            "type": "object",
            "properties": {
                "pedido_id": {"type": "string", "pattern": "^PED-[0-9]{8}$", "description": "Order id, PED-########."},
                "valor_centavos": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 5000000,
                    "description": "Amount in cents (R$ 1,00 = 100).",
                },
                "motivo": {"type": "string", "enum": MOTIVOS, "description": "Why the refund is due."},
                "idempotency_key": {
                    "type": "string",
                    "pattern": "^[a-f0-9]{32}$",
                    "description": "32 lowercase hex characters; the same key never refunds twice.",
                },
            },
            "required": ["pedido_id", "valor_centavos", "motivo", "idempotency_key"],
            "additionalProperties": False,
        },
        "base_tier": 1,
        "resource_argument": "pedido_id",
        "read_only_hint": False,
        "destructive_hint": True,
        "idempotent_hint": True,
        "open_world_hint": False,
        "rules": [
            {
                "name": "above-autonomy",
                "description": "Refunds above R$ 200,00 need one reviewer.",
                "condition": {"properties": {"valor_centavos": {"minimum": 20001}}, "required": ["valor_centavos"]},
                "tier": 2,
            },
            {
                "name": "large-refund",
                "description": "Refunds above R$ 5.000,00 need two reviewers.",
                "condition": {"properties": {"valor_centavos": {"minimum": 500001}}, "required": ["valor_centavos"]},
                "tier": 3,
            },
        ],
    },
    {
        "name": "get_order_status",
        "title": "Look up an order",
        "description": "Return an order's status, amount and how much was already refunded.",
        "input_schema": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "pattern": "^PED-[0-9]{8}$", "description": "Order id, PED-########."}
            },
            "required": ["order_id"],
            "additionalProperties": False,
        },
        "base_tier": 0,
        "resource_argument": "order_id",
        "read_only_hint": True,
        "destructive_hint": False,
        "idempotent_hint": True,
        "open_world_hint": False,
    },
    {
        "name": "search_seats",
        "title": "Search seats",
        "description": "Find available seats for an event within a price limit. Returns at most 5 options.",
        "input_schema": {
            "type": "object",
            "properties": {
                "event_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The event's id."},
                "quantity": {"type": "integer", "minimum": 1, "maximum": 6, "description": "Seats wanted together."},
                "max_price_brl": {"type": "number", "exclusiveMinimum": 0, "description": "Price limit per seat, BRL."},
            },
            "required": ["event_id", "quantity", "max_price_brl"],
            "additionalProperties": False,
        },
        "base_tier": 0,
        "resource_argument": "event_id",
        "read_only_hint": True,
        "destructive_hint": False,
        "idempotent_hint": True,
        "open_world_hint": False,
    },
    {
        "name": "hold_seats",
        "title": "Hold seats",
        "description": "Hold seats for 10 minutes so the fan can pay. Reversible: an unpaid hold expires, "
        "and release_hold undoes it. Calling again with the same idempotency_key returns the same hold.",
        "input_schema": {
            "type": "object",
            "properties": {
                "event_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The event's id."},
                "seat_ids": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": 32},
                    "minItems": 1,
                    "maxItems": 6,
                    "uniqueItems": True,
                    "description": "Seats to hold, at most 6.",
                },
                "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 255},
            },
            "required": ["event_id", "seat_ids", "idempotency_key"],
            "additionalProperties": False,
        },
        "base_tier": 1,
        "resource_argument": "event_id",
        "read_only_hint": False,
        "destructive_hint": False,
        "idempotent_hint": True,
        "open_world_hint": False,
    },
    {
        "name": "release_hold",
        "title": "Release a hold",
        "description": "Release a seat hold (the compensation of hold_seats). Releasing twice is harmless.",
        "input_schema": {
            "type": "object",
            "properties": {
                "hold_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The hold's id."}
            },
            "required": ["hold_id"],
            "additionalProperties": False,
        },
        "base_tier": 1,
        "resource_argument": "hold_id",
        "read_only_hint": False,
        "destructive_hint": False,
        "idempotent_hint": True,
        "open_world_hint": False,
    },
]

# name → (description, {tool: max tier})
AGENTS: dict[str, tuple[str, dict[str, int]]] = {
    "support-agent": (
        "Customer support: looks up orders and issues refunds.",
        {"emitir_estorno": 3, "get_order_status": 0},
    ),
    "box-office-agent": (
        "Box office: finds and holds seats for fans.",
        {"search_seats": 0, "hold_seats": 1, "release_hold": 1},
    ),
    "visitor": ("An anonymous visitor: may only search seats.", {"search_seats": 0}),
    "box-office-upstream": (
        "Box office through its own MCP server (the upstream boxoffice): a hold of more than two seats waits "
        "for a reviewer.",
        {"boxoffice_search_seats": 0, "boxoffice_hold_seats": 2, "boxoffice_release_hold": 1},
    ),
}
