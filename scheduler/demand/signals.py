"""What the model servers feel, per model: the adapter side of scaling signals.

A signal source turns the servers' metrics into one `Load` per model (numbers the core compares
with the model's objectives) and the last time each model's servers had work. Two sources:
`ScrapeSignals` reads each live replica's `/metrics` directly (no Prometheus needed), and
`scheduler.demand.prometheus.PrometheusSignals` asks a Prometheus server. Either way the gateway's
KV demand still counts: `combine` keeps the larger need and the later `last_used`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol
from urllib.parse import urlsplit

from pydantic import ValidationError

from scheduler.core.models import Demand, Load
from scheduler.demand.metrics_text import (
    Buckets,
    MetricsError,
    ServerSample,
    add_buckets,
    bucket_delta,
    parse_metrics,
    quantile,
)


@dataclass(frozen=True)
class Target:
    """Where one replica serves HTTP: the head shard's allocation and its `http` port."""

    model: str
    replica: str
    alloc: str
    url: str  # http://host:port


@dataclass
class Signals:
    load: dict[str, Load] = field(default_factory=dict)
    seen: dict[str, datetime] = field(default_factory=dict)  # model -> last time it had work
    errors: list[str] = field(default_factory=list)  # "model m, replica r: kv_cache: nan reading"


class SignalSource(Protocol):
    name: str

    def read_signals(
        self, models: Sequence[str], targets: Mapping[str, Sequence[Target]], now: datetime
    ) -> Signals: ...


def combine(demand: Mapping[str, Demand], signals: Signals) -> dict[str, Demand]:
    """The gateway's demand and the servers' own counts: the larger need wins, and `last_used`
    is whichever saw traffic last."""
    out = dict(demand)
    for name, load in signals.load.items():
        kv = demand.get(name)
        running = round(load.running) if load.running is not None else 0
        waiting = round(load.waiting) if load.waiting is not None else 0
        stamps = [t for t in (kv.last_used if kv else None, signals.seen.get(name)) if t]
        out[name] = Demand(
            inflight=max(kv.inflight if kv else 0, running),
            queued=max(kv.queued if kv else 0, waiting),
            last_used=max(stamps) if stamps else None,
        )
    for name, seen in signals.seen.items():
        if name not in out:
            out[name] = Demand(last_used=seen)
    return out


def build_load(
    model: str,
    fields: Mapping[str, float | None],
    reporting: int,
    complete: bool,
    errors: list[str],
) -> Load | None:
    """A Load from raw numbers; a value the model refuses (out of range, NaN) is reported by
    model and field, left out, and makes the load incomplete (no scale-down on it)."""
    clean = {k: v for k, v in fields.items() if v is not None}
    try:
        return Load(**clean, reporting=reporting, complete=complete)
    except ValidationError as exc:
        bad = set()
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            bad.add(where)
            errors.append(f"model {model}: {where}: {err['msg']} ({err.get('input')!r})")
        clean = {k: v for k, v in clean.items() if k not in bad}
        try:
            return Load(**clean, reporting=reporting, complete=False)
        except ValidationError:
            return None


# A real vLLM page is tens of kB; anything this large is not a model server's page.
MAX_PAGE_BYTES = 8 * 1024 * 1024


def _http_response(raw: bytes) -> tuple[int, str]:
    """(status, body) of a whole HTTP/1.1 response read to EOF; chunked bodies joined."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("not an HTTP response")
    lines = head.split(b"\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError) as exc:
        raise ValueError(f"not an HTTP status line: {lines[0][:60]!r}") from exc
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip().lower()
    if headers.get(b"transfer-encoding") == b"chunked":
        chunks, rest = [], body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            chunks.append(rest[:size])
            rest = rest[size + 2 :]
        body = b"".join(chunks)
    elif b"content-length" in headers:
        body = body[: int(headers[b"content-length"])]
    return status, body.decode("utf-8", errors="replace")


class ScrapeSignals:
    """Scrape every live replica's `/metrics` with bounded concurrency and a timeout, and keep
    the previous scrape of each replica so that latency percentiles cover the window between
    them (as Prometheus' rate() over histogram buckets does)."""

    name = "scrape"

    def __init__(
        self,
        *,
        concurrency: int = 64,
        timeout_s: float = 2.0,
        window_s: float = 60.0,
        quantile_q: float = 0.9,
    ) -> None:
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.window_s = window_s
        self.q = quantile_q
        # alloc -> [(monotonic time, sample)], oldest first, kept for the window
        self._history: dict[str, list[tuple[float, ServerSample]]] = {}
        self.last_duration_s = 0.0

    async def _get(self, url: str) -> tuple[int, str]:
        """GET url/metrics over plain HTTP/1.1, Connection: close. Its own small client: at
        thousands of replicas per pass, a general client's per-request cost is most of it."""
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        reader, writer = await asyncio.open_connection(host, port)
        try:
            request = (
                f"GET {parts.path.rstrip('/')}/metrics HTTP/1.1\r\nHost: {host}:{port}\r\n"
                "Accept: text/plain\r\nConnection: close\r\n\r\n"
            )
            writer.write(request.encode())
            await writer.drain()
            raw = await reader.read(MAX_PAGE_BYTES + 1)
            while raw and len(raw) <= MAX_PAGE_BYTES:
                more = await reader.read(MAX_PAGE_BYTES + 1 - len(raw))
                if not more:
                    break
                raw += more
            if len(raw) > MAX_PAGE_BYTES:
                raise ValueError(f"page larger than {MAX_PAGE_BYTES} bytes")
        finally:
            writer.close()
        return _http_response(raw)

    async def _scrape_all(self, targets: Sequence[Target]) -> dict[str, ServerSample | str]:
        sem = asyncio.Semaphore(self.concurrency)
        out: dict[str, ServerSample | str] = {}

        async def one(t: Target) -> None:
            async with sem:
                try:
                    status, body = await asyncio.wait_for(self._get(t.url), self.timeout_s)
                except (OSError, TimeoutError, ValueError) as exc:
                    why = str(exc) or "timed out"
                    out[t.alloc] = f"scrape {t.url}/metrics: {type(exc).__name__} {why}"[:200]
                    return
            if status != 200:
                out[t.alloc] = f"scrape {t.url}/metrics: HTTP {status}"
                return
            try:
                out[t.alloc] = parse_metrics(body)
            except MetricsError as exc:
                out[t.alloc] = f"{t.url}/metrics: {exc}"

        await asyncio.gather(*(one(t) for t in targets))
        return out

    def scrape(self, targets: Sequence[Target]) -> dict[str, ServerSample | str]:
        started = time.perf_counter()
        try:
            return asyncio.run(self._scrape_all(targets))
        finally:
            self.last_duration_s = time.perf_counter() - started

    def read_signals(
        self, models: Sequence[str], targets: Mapping[str, Sequence[Target]], now: datetime
    ) -> Signals:
        flat = [t for name in models for t in targets.get(name, ())]
        results = self.scrape(flat) if flat else {}
        mono = time.monotonic()
        signals = Signals()
        for name in models:
            mine = list(targets.get(name, ()))
            if not mine:
                continue
            load = self._aggregate(name, mine, results, mono, now, signals)
            if load is not None:
                signals.load[name] = load
        live = set(results)
        self._history = {k: v for k, v in self._history.items() if k in live}
        return signals

    def _windowed(
        self, alloc: str, res: ServerSample, mono: float, hist: dict[str, Buckets]
    ) -> float | None:
        """Add the replica's histograms over the window to `hist`; its tokens a second (None
        when it cannot say yet: a window needs two scrapes)."""
        past = self._history.setdefault(alloc, [])
        past[:] = [(at, s) for at, s in past if mono - at <= self.window_s]
        old = past[0] if past else None
        for key, buckets in res.histograms.items():
            before = old[1].histograms.get(key) if old else None
            if before is not None:  # a window needs two scrapes
                add_buckets(hist.setdefault(key, {}), bucket_delta(buckets, before))
        rate: float | None = None
        if "gen_throughput" in res.values:
            rate = res.values["gen_throughput"]
        elif old is not None and mono > old[0] and "generation_tokens" in res.values:
            prev = old[1].values.get("generation_tokens")
            if prev is not None and res.values["generation_tokens"] >= prev:
                rate = (res.values["generation_tokens"] - prev) / (mono - old[0])
        past.append((mono, res))
        return rate

    def _aggregate(
        self,
        name: str,
        mine: Sequence[Target],
        results: Mapping[str, ServerSample | str],
        mono: float,
        now: datetime,
        signals: Signals,
    ) -> Load | None:
        sums: dict[str, float] = {}
        kv: list[float] = []
        hist: dict[str, Buckets] = {}
        tokens_s = 0.0
        have_tokens = False
        reporting, complete = 0, True
        for t in mine:
            res = results.get(t.alloc, "not scraped")
            if isinstance(res, str):
                signals.errors.append(f"model {name}, replica {t.replica}: {res}")
                complete = False
                continue
            if res.errors:
                signals.errors += [f"model {name}, replica {t.replica}: {e}" for e in res.errors]
                complete = False
            reporting += 1
            for key in ("running", "waiting"):
                if key in res.values:
                    sums[key] = sums.get(key, 0.0) + res.values[key]
            if "kv_cache" in res.values:
                kv.append(res.values["kv_cache"])
            rate = self._windowed(t.alloc, res, mono, hist)
            if rate is not None:
                tokens_s += rate
                have_tokens = True
        if reporting == 0:
            return Load(reporting=0, complete=False)
        ttft = quantile(self.q, hist["ttft"]) if "ttft" in hist else None
        itl = quantile(self.q, hist["itl"]) if "itl" in hist else None
        fields: dict[str, float | None] = {
            "running": sums.get("running"),
            "waiting": sums.get("waiting"),
            "kv_cache": sum(kv) / len(kv) if kv else None,
            "ttft_p90_ms": ttft * 1000 if ttft is not None else None,
            "itl_p90_ms": itl * 1000 if itl is not None else None,
            "tokens_per_s": tokens_s if have_tokens else None,
        }
        if (fields["running"] or 0) + (fields["waiting"] or 0) > 0:
            signals.seen[name] = now
        return build_load(name, fields, reporting, complete, signals.errors)
