"""wrk, Debian's HTTP load generator, driven from Python: unique idempotency keys per request.

wrk is C and costs the 2-core machine far less CPU per request than a Python
client would, so the server gets the cores. A small Lua script numbers every
request per thread (so every body carries its own key) and prints the summary
as one JSON line, with the latency at every 0.1 % of the requests (0.1 % … 99.9 %,
then the maximum: wrk answers 0 for 100 %) so that runs in several short blocks
can be pooled (`pooled`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

KEY_PLACEHOLDER = "__KEY__"
# Latency quantiles each run reports (one per 0.1 % of its requests), for pooling blocks of one measurement.
QUANTILES = 1000

LUA = r"""
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local counter = 0
wrk.method = "%(method)s"
wrk.path = "%(path)s"
%(headers)s
local template = [==[%(body)s]==]
request = function()
  counter = counter + 1
  local body = nil
  if template ~= "" then
    body = template:gsub("%(placeholder)s", "%(prefix)s-" .. tid .. "-" .. counter)
  end
  return wrk.format(nil, nil, nil, body)
end
done = function(summary, latency, requests)
  local e = summary.errors
  local quantiles = {}
  for i = 1, %(quantiles)d - 1 do
    quantiles[i] = string.format("%%d", latency:percentile(100 * i / %(quantiles)d))
  end
  quantiles[%(quantiles)d] = string.format("%%d", latency.max)
  io.write(string.format(
    'WRK_RESULT {"requests": %%d, "duration_us": %%d, "p50_us": %%d, "p95_us": %%d, "p99_us": %%d, ' ..
    '"max_us": %%d, "status_errors": %%d, "socket_errors": %%d, "quantiles_us": [%%s]}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(95),
    latency:percentile(99), latency.max, e.status, e.connect + e.read + e.write + e.timeout,
    table.concat(quantiles, ",")))
end
"""


@dataclass(frozen=True)
class LoadResult:
    """One wrk run: throughput, latency percentiles (ms) and errors."""

    requests: int
    seconds: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    # Latency (ms) at every 1/QUANTILES of the requests, the last the maximum; empty in results saved before pooling.
    quantiles_ms: tuple[float, ...] = ()

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def pooled(blocks: list[LoadResult]) -> LoadResult:
    """Return one result for several blocks of the same measurement: requests over seconds, pooled latencies.

    Each block's quantile k stands for the k-th 1/QUANTILES share of its requests
    (its upper edge), so the pooled percentiles weigh every block by how many
    requests it served: exact for one block, and at most one share high for several.
    """
    weighted = sorted(
        (latency, block.requests / len(block.quantiles_ms)) for block in blocks for latency in block.quantiles_ms
    )
    total = sum(weight for _, weight in weighted)

    def percentile(pct: float) -> float:
        rank, seen = total * pct / 100, 0.0
        for latency, weight in weighted:
            seen += weight
            if seen >= rank - 1e-9:
                return latency
        return weighted[-1][0]

    return LoadResult(
        requests=sum(block.requests for block in blocks),
        seconds=sum(block.seconds for block in blocks),
        p50_ms=percentile(50),
        p95_ms=percentile(95),
        p99_ms=percentile(99),
        max_ms=max(block.max_ms for block in blocks),
        errors=sum(block.errors for block in blocks),
    )


@dataclass(frozen=True)
class Target:
    """What to send: method, path, headers, and a body whose `__KEY__` becomes a unique key (to `base_url`, if set)."""

    method: str
    path: str
    headers: dict[str, str]
    body: str = ""
    base_url: str = ""


def ensure_wrk() -> str:
    """Return wrk's path, installing Debian's package first when it is missing."""
    found = shutil.which("wrk")
    if found:
        return found
    print("wrk is missing: installing Debian's package (apt-get install wrk)…", flush=True)
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True, env={"DEBIAN_FRONTEND": "noninteractive"})
    found = shutil.which("wrk")
    if not found:
        raise RuntimeError("wrk could not be installed")
    return found


def lua_script(target: Target, prefix: str) -> str:
    """Return the Lua script that sends `target` with keys `<prefix>-<thread>-<n>`."""
    headers = "\n".join(f'wrk.headers["{name}"] = "{value}"' for name, value in target.headers.items())
    return LUA % {
        "method": target.method,
        "path": target.path,
        "headers": headers,
        "body": target.body,
        "placeholder": KEY_PLACEHOLDER,
        "prefix": prefix,
        "quantiles": QUANTILES,
    }


def command(url: str, connections: int, seconds: float, script: Path) -> list[str]:
    """Return the wrk command line (one thread per core, at most one per connection)."""
    threads = max(1, min(2, connections))
    return [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        url,
    ]


def run(base_url: str, target: Target, *, connections: int, seconds: float, prefix: str, workdir: Path) -> LoadResult:
    """Run wrk against `target` at `connections` for `seconds`; return what it measured."""
    script = workdir / f"{prefix}.lua"
    script.write_text(lua_script(target, prefix))
    done = subprocess.run(
        command(base_url, connections, seconds, script),
        check=True,
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    line = next((row for row in done.stdout.splitlines() if row.startswith("WRK_RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result:\n{done.stdout}\n{done.stderr}")
    data = json.loads(line.removeprefix("WRK_RESULT "))
    return LoadResult(
        requests=data["requests"],
        seconds=data["duration_us"] / 1e6,
        p50_ms=data["p50_us"] / 1000,
        p95_ms=data["p95_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        max_ms=data["max_us"] / 1000,
        errors=data["status_errors"] + data["socket_errors"],
        quantiles_ms=tuple(value / 1000 for value in data["quantiles_us"]),
    )
