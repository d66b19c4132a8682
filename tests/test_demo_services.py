"""The demo downstream over real HTTP: scoped credentials, the refunds ledger, seat holds."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.utils import timezone

from demo.models import Hold, Order, Refund, SpentCredential
from toolcatalog.credentials import Scope, mint

TIMEOUT = 15


def credential(operation: str = "emitir_estorno", resource: str = "PED-00000001", **extra: Any) -> str:
    """A credential for the demo services of the live server (their audience is its origin)."""
    claims = {
        "call_id": "c-1",
        "agent": "support-agent",
        "approval_ref": "policy:tier-1",
        "audience": settings.GATEHOUSE_DEMO_SERVICES_URL,
        **extra,
    }
    return mint(operation=operation, resource=resource, **claims)


def call(
    base: str, tool: str, body: dict[str, Any], *, token: str | None, key: str = "", route: str = ""
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if key:
        headers["Idempotency-Key"] = key
    return httpx.post(f"{base}/demo-services/tools/{tool}{route}", json=body, headers=headers, timeout=TIMEOUT)


def refund_args(amount: int = 1000, order: str = "PED-00000001") -> dict[str, Any]:
    return {"pedido_id": order, "valor_centavos": amount, "motivo": "atraso_entrega", "idempotency_key": "a" * 32}


def test_a_valid_credential_refunds_once_per_idempotency_key(demo_services: str) -> None:
    first = call(demo_services, "emitir_estorno", refund_args(), token=credential(), key="k-1")
    again = call(demo_services, "emitir_estorno", refund_args(), token=credential(), key="k-1")

    assert first.status_code == 200, first.text
    assert first.json()["replayed"] is False
    assert again.json()["refund_id"] == first.json()["refund_id"]
    assert again.json()["replayed"] is True
    assert Refund.objects.count() == 1
    assert Order.objects.get(order_id="PED-00000001").refunded_centavos == 1000


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        (None, "missing"),
        ({"now": -120}, "expired"),
        ({"resource": "PED-00000002"}, "wrong_resource"),
        ({"operation": "hold_seats"}, "wrong_operation"),
        ({"scope": Scope.PREVIEW}, "wrong_scope"),
        ({"audience": "https://payments.example"}, "wrong_audience"),
        ("not-a-credential", "invalid"),
    ],
    ids=["absent", "expired", "other-order", "other-operation", "preview-only", "other-audience", "forged"],
)
def test_the_refund_service_refuses_a_credential_that_does_not_fit(
    demo_services: str, claims: dict[str, Any] | str | None, reason: str
) -> None:
    if isinstance(claims, dict):
        if "now" in claims:  # issued two minutes ago
            claims = {**claims, "now": time.time() + claims["now"]}
        token = credential(**claims)
    else:
        token = claims

    response = call(demo_services, "emitir_estorno", refund_args(), token=token, key="k-403")

    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"
    assert response.json()["reason"] == reason
    assert not Refund.objects.exists()


def test_a_credential_takes_effect_once(demo_services: str) -> None:
    token = credential()

    first = call(demo_services, "emitir_estorno", refund_args(), token=token, key="k-once")
    replayed = call(demo_services, "emitir_estorno", refund_args(), token=token, key="k-once")

    assert first.status_code == 200, first.text
    assert replayed.status_code == 403
    assert replayed.json()["reason"] == "replayed"
    assert Refund.objects.count() == 1


def test_unreachable_public_keys_are_a_retryable_503_not_a_refusal(
    demo_services: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEHOUSE_DEMO_JWKS_URL", "http://127.0.0.1:9/.well-known/jwks.json")  # nothing listens

    response = call(demo_services, "emitir_estorno", refund_args(), token=credential(), key="k-keys")

    assert response.status_code == 503
    assert response.json()["reason"] == "keys_unavailable"
    assert not Refund.objects.exists()


def test_spent_credentials_are_forgotten_once_long_expired(demo_services: str) -> None:
    SpentCredential.objects.create(jti="old", expires_at=timezone.now() - timedelta(minutes=5))

    assert call(demo_services, "emitir_estorno", refund_args(), token=credential(), key="k-new").status_code == 200
    assert not SpentCredential.objects.filter(jti="old").exists()


def test_a_credential_lives_sixty_seconds_at_most(demo_services: str) -> None:
    fifty_seconds_old = credential(now=time.time() - 50)
    sixty_five_seconds_old = credential(now=time.time() - 65)
    asked_for_an_hour = credential(ttl=3600, now=time.time() - 65)

    assert call(demo_services, "emitir_estorno", refund_args(), token=fifty_seconds_old, key="k-a").status_code == 200
    assert (
        call(demo_services, "emitir_estorno", refund_args(), token=sixty_five_seconds_old, key="k-b").status_code == 403
    )
    assert call(demo_services, "emitir_estorno", refund_args(), token=asked_for_an_hour, key="k-c").status_code == 403


def test_every_demo_service_checks_its_credential(demo_services: str) -> None:
    requests = {
        "get_order_status": ("order_id", {"order_id": "PED-00000003"}),
        "search_seats": ("event_id", {"event_id": "show-sabado", "quantity": 2, "max_price_brl": 300}),
        "hold_seats": ("event_id", {"event_id": "show-sabado", "seat_ids": ["C1"], "idempotency_key": "h"}),
        "release_hold": ("hold_id", {"hold_id": "h_missing"}),
    }
    for tool, (argument, body) in requests.items():
        right = credential(operation=tool, resource=body[argument])
        wrong = credential(operation=tool, resource="something-else")
        assert call(demo_services, tool, body, token=None, key="k").status_code == 403, tool
        assert call(demo_services, tool, body, token=wrong, key="k").status_code == 403, tool
        assert call(demo_services, tool, body, token=right, key="k").status_code in {200, 404}, tool


def test_refunds_never_exceed_the_order_amount_under_concurrency(demo_services: str) -> None:
    # PED-00000001 costs R$ 89,90: four refunds of R$ 20,00 fit, the fifth does not.
    def attempt(index: int) -> int:
        return call(
            demo_services, "emitir_estorno", refund_args(2000), token=credential(), key=f"k-{index}"
        ).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = sorted(pool.map(attempt, range(8)))

    order = Order.objects.get(order_id="PED-00000001")
    assert statuses == [200] * 4 + [409] * 4
    assert Refund.objects.filter(order=order).count() == 4
    assert order.refunded_centavos == 8000 <= order.amount_centavos


def test_one_key_sent_concurrently_refunds_once(demo_services: str) -> None:
    def attempt(_: int) -> str:
        response = call(demo_services, "emitir_estorno", refund_args(), token=credential(), key="k-same")
        assert response.status_code == 200, response.text
        return response.json()["refund_id"]

    with ThreadPoolExecutor(max_workers=6) as pool:
        refund_ids = set(pool.map(attempt, range(6)))

    assert len(refund_ids) == 1
    assert Refund.objects.count() == 1


def test_a_key_reused_with_other_arguments_is_a_conflict(demo_services: str) -> None:
    call(demo_services, "emitir_estorno", refund_args(1000), token=credential(), key="k-1")
    response = call(demo_services, "emitir_estorno", refund_args(1500), token=credential(), key="k-1")

    assert response.status_code == 409
    assert response.json()["error"] == "idempotency_conflict"
    assert Refund.objects.get().amount_centavos == 1000


def test_preview_predicts_before_and_after_and_changes_nothing(demo_services: str) -> None:
    token = credential(scope=Scope.PREVIEW)
    response = call(demo_services, "emitir_estorno", refund_args(1500), token=token, route="/preview")

    preview = response.json()
    assert response.status_code == 200
    assert preview["before"]["refunded_centavos"] == 0
    assert preview["after"]["refunded_centavos"] == 1500
    assert preview["after"]["refundable_centavos"] == 8990 - 1500
    assert "R$ 15,00" in preview["summary"]
    assert not Refund.objects.exists()
    assert Order.objects.get(order_id="PED-00000001").refunded_centavos == 0


def test_verify_reads_the_ledger_back(demo_services: str) -> None:
    done = call(demo_services, "emitir_estorno", refund_args(), token=credential(), key="k-1").json()
    body = {"arguments": refund_args(), "result": done}
    token = credential(scope=Scope.VERIFY)

    found = call(demo_services, "emitir_estorno", body, token=token, key="k-1", route="/verify").json()
    missing = call(demo_services, "emitir_estorno", body, token=token, key="k-2", route="/verify").json()

    assert found["confirmed"] is True
    assert found["observed"]["refund_id"] == done["refund_id"]
    assert missing["confirmed"] is False


def test_search_returns_at_most_five_adjacent_options_under_the_price(demo_services: str) -> None:
    body = {"event_id": "show-sabado", "quantity": 2, "max_price_brl": 300}
    token = credential(operation="search_seats", resource="show-sabado")

    options = call(demo_services, "search_seats", body, token=token).json()["options"]

    assert 1 <= len(options) <= 5
    for option in options:
        assert len(option["seat_ids"]) == 2
        assert option["price_brl"] <= 300
        numbers = [int(seat[1:]) for seat in option["seat_ids"]]
        assert numbers[1] - numbers[0] == 1


def hold(base: str, seats: list[str], key: str) -> httpx.Response:
    body = {"event_id": "show-sabado", "seat_ids": seats, "idempotency_key": key}
    return call(base, "hold_seats", body, token=credential(operation="hold_seats", resource="show-sabado"), key=key)


def test_a_hold_is_exclusive_for_ten_minutes_then_frees_its_seats(demo_services: str) -> None:
    first = hold(demo_services, ["C1", "C2"], "k-1")
    clash = hold(demo_services, ["C2", "C3"], "k-2")

    assert first.status_code == 200
    assert clash.status_code == 409
    assert clash.json()["seat_ids"] == ["C2"]
    held = Hold.objects.get(hold_id=first.json()["hold_id"])
    assert held.expires_at - held.created_at == timedelta(minutes=10)

    Hold.objects.filter(pk=held.pk).update(expires_at=timezone.now() - timedelta(seconds=1))  # ten minutes pass
    assert hold(demo_services, ["C2", "C3"], "k-3").status_code == 200


def test_search_leaves_out_seats_an_active_hold_keeps(demo_services: str) -> None:
    body = {"event_id": "show-sabado", "quantity": 2, "max_price_brl": 300}

    def offered() -> set[str]:
        token = credential(operation="search_seats", resource="show-sabado")
        options = call(demo_services, "search_seats", body, token=token).json()["options"]
        return {seat for option in options for seat in option["seat_ids"]}

    cheapest = sorted(offered())[:2]
    taken = hold(demo_services, cheapest, "k-search")
    assert taken.status_code == 200
    assert not offered() & set(cheapest)

    Hold.objects.filter(hold_id=taken.json()["hold_id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert set(cheapest) <= offered()  # an expired hold keeps nothing


def test_release_frees_the_seats_and_releasing_twice_is_harmless(demo_services: str) -> None:
    hold_id = hold(demo_services, ["D4", "D5"], "k-1").json()["hold_id"]

    def token() -> str:  # a credential takes effect once: each release is an attempt of its own
        return credential(operation="release_hold", resource=hold_id)

    first = call(demo_services, "release_hold", {"hold_id": hold_id}, token=token(), key="r-1")
    second = call(demo_services, "release_hold", {"hold_id": hold_id}, token=token(), key="r-2")

    assert first.json()["state_before"] == "active"
    assert second.status_code == 200
    assert second.json()["state_before"] == "released"
    assert hold(demo_services, ["D4", "D5"], "k-2").status_code == 200
