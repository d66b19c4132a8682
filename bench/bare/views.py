"""The bare ingest endpoint: parse the proposal's JSON, insert one row, answer 201."""

from __future__ import annotations

import json

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from bench.bare.models import BareRow


@csrf_exempt  # a machine endpoint like the agent API; the benchmark sends no cookie
@require_POST
def insert(request: HttpRequest) -> JsonResponse:
    """Store the posted JSON object as one row; return its id."""
    body = json.loads(request.body)
    row = BareRow.objects.create(key=body["idempotency_key"], payload=body)
    return JsonResponse({"id": row.pk}, status=201)
