"""`make bench` pools an endpoint's short blocks into one result (bench.wrk.pooled)."""

from __future__ import annotations

from bench.wrk import QUANTILES, LoadResult, pooled


def block(requests: int, seconds: float, latency_ms: float, *, errors: int = 0) -> LoadResult:
    """A block whose requests all took `latency_ms` but its slowest tenth, which took ten times as long."""
    quantiles = tuple(latency_ms if k < QUANTILES * 9 // 10 else latency_ms * 10 for k in range(QUANTILES))
    return LoadResult(
        requests=requests,
        seconds=seconds,
        p50_ms=latency_ms,
        p95_ms=latency_ms * 10,
        p99_ms=latency_ms * 10,
        max_ms=quantiles[-1],
        errors=errors,
        quantiles_ms=quantiles,
    )


def test_pooling_one_block_gives_back_its_own_figures():
    one = block(1000, 2.0, 3.0, errors=2)

    result = pooled([one])

    assert (result.requests, result.seconds, result.errors, result.rps) == (1000, 2.0, 2, 500.0)
    assert (result.p50_ms, result.p95_ms, result.p99_ms, result.max_ms) == (3.0, 30.0, 30.0, 30.0)


def test_pooled_throughput_is_requests_over_seconds_not_a_mean_of_rates():
    result = pooled([block(900, 3.0, 1.0), block(100, 1.0, 1.0)])

    assert result.rps == 250.0  # the mean of the blocks' rates (300 and 100) would be 200


def test_pooled_percentiles_weigh_each_block_by_its_requests():
    fast_and_busy, slow_and_quiet = block(9000, 2.0, 1.0), block(1000, 2.0, 100.0)

    result = pooled([fast_and_busy, slow_and_quiet])

    # Of all requests: 81 % at 1 ms and 9 % at 10 ms (the busy block), 9 % at 100 ms and 1 % at 1 s (the quiet one).
    assert result.p50_ms == 1.0
    assert result.p95_ms == 100.0
    assert result.p99_ms == 100.0  # the 9,900th of 10,000 requests, the last at 100 ms
    assert result.max_ms == 1000.0
    assert result.requests == 10_000
