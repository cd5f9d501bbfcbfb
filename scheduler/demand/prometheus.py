"""Scaling signals from a Prometheus server's query API, for vLLM and SGLang alike.

Per model (label `model_name`, the served name, which the job templates set to the catalog
name): running and waiting requests summed, KV-cache usage averaged, TTFT and inter-token
latency p90 from the histogram buckets' rate over `window`, generation tokens/s. Metric names:
docs/operating.md, section 4. An unreachable Prometheus is a DemandError: the pass then acts on
nothing, so every model keeps its count, and the failed read is counted as for Consul.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx

from scheduler.core.models import Demand
from scheduler.demand import DemandError
from scheduler.demand.signals import Signals, Target, build_load, combine


def _names(*names: str) -> str:
    return '{__name__=~"' + "|".join(names) + '"}'


def queries(label: str, window: str, q: float) -> dict[str, str]:
    def hist(vllm: str, sglang: str) -> str:
        buckets = _names(f"{vllm}_bucket", f"{sglang}_bucket")
        return f"histogram_quantile({q}, sum by ({label}, le) (rate({buckets}[{window}])))"

    running = _names("vllm:num_requests_running", "sglang:num_running_reqs")
    waiting = _names("vllm:num_requests_waiting", "sglang:num_queue_reqs")
    kv = _names("vllm:kv_cache_usage_perc", "sglang:token_usage")
    return {
        "running": f"sum by ({label}) ({running})",
        "waiting": f"sum by ({label}) ({waiting})",
        "kv_cache": f"avg by ({label}) ({kv})",
        "ttft": hist("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
        "itl": hist("vllm:inter_token_latency_seconds", "sglang:inter_token_latency_seconds"),
        "tokens_per_s": (
            f"sum by ({label}) (rate({_names('vllm:generation_tokens_total')}[{window}]))"
            f" or sum by ({label}) ({_names('sglang:gen_throughput')})"
        ),
    }


class PrometheusSignals:
    name = "prometheus"

    def __init__(
        self,
        url: str,
        *,
        label: str = "model_name",
        timeout_s: float = 5.0,
        window: str = "1m",
        quantile_q: float = 0.9,
    ) -> None:
        self.url = url.rstrip("/")
        self.label = label
        self._client = httpx.Client(timeout=timeout_s)
        self._queries = queries(label, window, quantile_q)

    def _query(self, expr: str) -> dict[str, float]:
        try:
            resp = self._client.get(f"{self.url}/api/v1/query", params={"query": expr})
            body: Any = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise DemandError(f"prometheus {self.url}: {exc}") from exc
        if resp.status_code != 200 or not isinstance(body, dict) or body.get("status") != "success":
            raise DemandError(f"prometheus {self.url}: {resp.status_code} {str(body)[:200]}")
        out: dict[str, float] = {}
        for item in (body.get("data") or {}).get("result") or []:
            name = (item.get("metric") or {}).get(self.label)
            try:
                out[str(name)] = float(item["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
        return out

    def read_signals(
        self, models: Sequence[str], targets: Mapping[str, Sequence[Target]], now: datetime
    ) -> Signals:
        got = {key: self._query(expr) for key, expr in self._queries.items()}
        signals = Signals()
        for name in models:
            if not any(name in series for series in got.values()):
                continue  # no server of it reports: no signal (its replicas keep their count)
            fields: dict[str, float | None] = {}
            nan: list[str] = []
            for key, series in got.items():
                field = {"ttft": "ttft_p90_ms", "itl": "itl_p90_ms"}.get(key, key)
                value = series.get(name)
                if value is not None and math.isnan(value):
                    value = None
                    nan.append(field)
                if value is not None and key in ("ttft", "itl") and not math.isinf(value):
                    value *= 1000
                fields[field] = value
            busy = (fields.get("running") or 0) + (fields.get("waiting") or 0) > 0
            # A latency quantile of no observations is NaN: no reading while the model is idle.
            # Any other NaN is a broken reading: reported, and the model holds its count.
            bad = [f for f in nan if busy or f not in ("ttft_p90_ms", "itl_p90_ms")]
            signals.errors += [f"model {name}: {f}: NaN reading (prometheus)" for f in bad]
            load = build_load(name, fields, 0, not bad, signals.errors)
            if load is not None:
                signals.load[name] = load
                if (load.running or 0) + (load.waiting or 0) > 0:
                    signals.seen[name] = now
        return signals

    def close(self) -> None:
        self._client.close()


class PrometheusDemandSource:
    """The demand source of `--demand prometheus` before the servers' own
    signals were read, kept for embedders: the
    servers' running and waiting counts, combined with the gateway's KV demand."""

    name = "prometheus"

    def __init__(self, url: str, *, label: str = "model_name", timeout_s: float = 5.0) -> None:
        self.signals = PrometheusSignals(url, label=label, timeout_s=timeout_s)
        self._last_used: dict[str, datetime] = {}

    def read(
        self, models: list[str], kv_demand: Mapping[str, Demand], now: datetime
    ) -> dict[str, Demand]:
        sig = self.signals.read_signals(models, {}, now)
        self._last_used.update(sig.seen)
        sig.seen = {k: v for k, v in self._last_used.items() if k in models}
        demand = combine(kv_demand, sig)
        return {name: demand.get(name, Demand()) for name in models}

    def close(self) -> None:
        self.signals.close()
