"""The orders service: look orders up and refund them through a ledger.

Invariants, whatever the concurrency: one refund per idempotency key, and an
order's refunded total never exceeds its amount. Both are decided under a row
lock on the order (and backed by a unique constraint and a check constraint).
"""

from __future__ import annotations

import secrets

from django.db import IntegrityError, transaction
from django.db.models import F

from audit.typealiases import JSONObject
from demo import faults
from demo.common import ServiceError, brl, conflict_if_different, int_arg, request_hash, text_arg
from demo.models import Order, Refund
from demo.verifier import Claims

MOTIVOS = ("produto_defeituoso", "atraso_entrega", "cancelamento_cliente", "erro_cobranca")
MAX_REFUND = 5_000_000


def order_state(order: Order) -> JSONObject:
    """Return what a reviewer or an agent needs to know about an order's money."""
    return {
        "pedido_id": order.order_id,
        "amount_centavos": order.amount_centavos,
        "refunded_centavos": order.refunded_centavos,
        "refundable_centavos": order.refundable_centavos,
    }


def _order(order_id: str, *, lock: bool = False) -> Order:
    queryset = Order.objects.select_for_update() if lock else Order.objects
    order = queryset.filter(order_id=order_id).first()
    if order is None:
        raise ServiceError(404, "order_not_found", f"There is no order {order_id}.")
    return order


def _refund_body(refund: Refund, *, replayed: bool) -> JSONObject:
    return {
        "refund_id": refund.refund_id,
        "pedido_id": refund.order.order_id,
        "valor_centavos": refund.amount_centavos,
        "motivo": refund.motivo,
        "order": order_state(refund.order),
        "created_at": refund.created_at.isoformat(),
        "replayed": replayed,
    }


def _refund_arguments(arguments: JSONObject) -> tuple[str, int, str]:
    order_id = text_arg(arguments, "pedido_id")
    amount = int_arg(arguments, "valor_centavos", 1, MAX_REFUND)
    motivo = text_arg(arguments, "motivo")
    if motivo not in MOTIVOS:
        raise ServiceError(422, "invalid_arguments", "motivo is not an accepted value.", accepted_values=MOTIVOS)
    return order_id, amount, motivo


def refund(arguments: JSONObject, *, key: str, claims: Claims) -> JSONObject:
    """Refund `valor_centavos` of the order once per idempotency key; return the ledger entry."""
    order_id, amount, motivo = _refund_arguments(arguments)
    if faults.held_before_apply(order_id):
        raise ServiceError(503, "unavailable", "The ledger dropped this request before applying it.")
    try:
        with transaction.atomic():
            body = _apply_refund(arguments, order_id, amount, motivo, key, claims)
            if not body["replayed"] and faults.active("ack_without_apply", order_id):
                transaction.set_rollback(True)
    except IntegrityError:
        # A concurrent request with the same key committed first: answer with its refund.
        existing = Refund.objects.select_related("order").get(idempotency_key=key)
        conflict_if_different(existing.request_hash, arguments)
        return _refund_body(existing, replayed=True)
    if not body["replayed"]:
        faults.pause_after_apply(order_id)
    return body


def _apply_refund(
    arguments: JSONObject, order_id: str, amount: int, motivo: str, key: str, claims: Claims
) -> JSONObject:
    """Write the refund under the order's row lock; return its body (a replay if the key is known)."""
    order = _order(order_id, lock=True)
    # Read after the lock: a concurrent request with this key has committed or not started.
    existing = Refund.objects.select_related("order").filter(idempotency_key=key).first()
    if existing is not None:
        conflict_if_different(existing.request_hash, arguments)
        return _refund_body(existing, replayed=True)
    if amount > order.refundable_centavos:
        raise ServiceError(
            409,
            "refund_exceeds_order",
            f"{order_id} can refund at most {brl(order.refundable_centavos)}; {brl(amount)} was asked.",
            order=order_state(order),
        )
    created = Refund.objects.create(
        refund_id="RE-" + secrets.token_hex(5).upper(),
        order=order,
        amount_centavos=amount,
        motivo=motivo,
        idempotency_key=key,
        request_hash=request_hash(arguments),
        call_id=claims.call_id,
        approval_ref=claims.approval_ref,
    )
    Order.objects.filter(pk=order.pk).update(refunded_centavos=F("refunded_centavos") + amount)
    created.order.refresh_from_db()
    return _refund_body(created, replayed=False)


def preview_refund(arguments: JSONObject) -> JSONObject:
    """Predict a refund: the order's money before and after, or why it would be refused."""
    order_id, amount, _ = _refund_arguments(arguments)
    order = _order(order_id)
    before = {**order_state(order), "refunds": order.refunds.count()}
    if amount > order.refundable_centavos:
        return {
            "summary": f"Would be refused: {order_id} can refund at most {brl(order.refundable_centavos)}.",
            "before": before,
            "after": None,
            "would_fail": "refund_exceeds_order",
        }
    after = {
        **before,
        "refunded_centavos": order.refunded_centavos + amount,
        "refundable_centavos": order.refundable_centavos - amount,
        "refunds": before["refunds"] + 1,
    }
    return {
        "summary": f"Refund {brl(amount)} of {order_id} ({brl(order.amount_centavos)}): "
        f"refunded so far {brl(order.refunded_centavos)} → {brl(order.refunded_centavos + amount)}.",
        "before": before,
        "after": after,
    }


def verify_refund(arguments: JSONObject, result: JSONObject, *, key: str) -> JSONObject:
    """Read the ledger back: is there a refund for this key, of this order and amount?"""
    order_id, amount, _ = _refund_arguments(arguments)
    entry = Refund.objects.select_related("order").filter(idempotency_key=key).first()
    if entry is None:
        return {"confirmed": False, "observed": {"refund": None}, "detail": "No refund in the ledger for this key."}
    observed = {
        "refund_id": entry.refund_id,
        "pedido_id": entry.order.order_id,
        "valor_centavos": entry.amount_centavos,
        "order": order_state(entry.order),
    }
    matches = (entry.order.order_id, entry.amount_centavos, entry.refund_id) == (
        order_id,
        amount,
        result.get("refund_id"),
    )
    detail = "The ledger holds this refund." if matches else "The ledger's refund differs from the result."
    return {"confirmed": matches, "observed": observed, "detail": detail}


def order_status(arguments: JSONObject, *, key: str, claims: Claims) -> JSONObject:
    """Return an order's status, amount and refunds."""
    order = _order(text_arg(arguments, "order_id"))
    return {
        **order_state(order),
        "order_id": order.order_id,
        "customer": order.customer,
        "description": order.description,
        "status": order.status,
        "refunds": [
            {"refund_id": r.refund_id, "valor_centavos": r.amount_centavos, "motivo": r.motivo}
            for r in order.refunds.all()
        ],
    }
