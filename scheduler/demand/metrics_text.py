"""Read one model server's `/metrics` page (vLLM or SGLang) into the numbers scaling needs.

Names as the servers export them: vLLM v0.34 (`vllm/v1/metrics/loggers.py`), SGLang v0.5.23
(`sglang/srt/observability/metrics_collector.py`); the table is in docs/operating.md, section 4.
Parsed with prometheus_client's text parser. Bad readings (NaN, Inf, a histogram without
buckets) are reported by field and left out; a page that is not Prometheus text is an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# signal -> the family names that carry it, vLLM first (counters without their _total).
GAUGES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "kv_cache": ("vllm:kv_cache_usage_perc", "sglang:token_usage"),
    "gen_throughput": ("sglang:gen_throughput",),
}
COUNTERS: dict[str, tuple[str, ...]] = {
    "generation_tokens": ("vllm:generation_tokens", "sglang:generation_tokens"),
}
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl": ("vllm:inter_token_latency_seconds", "sglang:inter_token_latency_seconds"),
}
# Per replica, these add up over label sets (vLLM's DP engines); the KV usage is their mean.
MEAN = {"kv_cache"}

Buckets = dict[float, float]  # upper bound (le) -> cumulative count


# Line prefixes of the families above: a real server's page has hundreds of other lines
# (python_gc_*, process_*, every other vllm:* histogram) that need no parsing.
_FAMILIES = tuple(
    n for group in (GAUGES, COUNTERS, HISTOGRAMS) for ns in group.values() for n in ns
)


def _relevant(text: str) -> str:
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[2].startswith(_FAMILIES):
                keep.append(line)
        elif line.startswith(_FAMILIES):
            keep.append(line)
        elif line.strip() and not line[0].isalpha() and line[0] not in "_:":
            keep.append(line)  # not a sample line at all: let the parser say what is wrong
    return "\n".join(keep) + "\n"


class MetricsError(ValueError):
    """The page is not a model server's Prometheus text."""


@dataclass
class ServerSample:
    """One scrape of one replica: plain numbers, or None where the page had no good value."""

    values: dict[str, float] = field(default_factory=dict)  # running, waiting, kv_cache, ...
    histograms: dict[str, Buckets] = field(default_factory=dict)  # ttft, itl
    errors: list[str] = field(default_factory=list)  # "kv_cache: NaN reading"


def _finite(name: str, value: float, errors: list[str]) -> bool:
    if math.isnan(value) or math.isinf(value):
        errors.append(f"{name}: {value} reading")
        return False
    return True


def parse_metrics(text: str) -> ServerSample:
    """The signals of one /metrics page. Raises MetricsError when it is not Prometheus text
    or carries none of the known families."""
    by_name: dict[str, object] = {}
    try:
        for family in text_string_to_metric_families(_relevant(text)):
            by_name[family.name] = family
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsError(f"not Prometheus text: {str(exc)[:120]}") from exc
    sample = ServerSample()
    known = False
    for signal, names in GAUGES.items():
        fam = next((by_name[n] for n in names if n in by_name), None)
        if fam is None:
            continue
        known = True
        vals = [s.value for s in fam.samples]  # type: ignore[attr-defined]
        if not vals or not all(_finite(signal, float(v), sample.errors) for v in vals):
            continue
        total = float(sum(vals))
        sample.values[signal] = total / len(vals) if signal in MEAN else total
    for signal, names in COUNTERS.items():
        fam = next((by_name[n] for n in names if n in by_name), None)
        if fam is None:
            continue
        known = True
        vals = [s.value for s in fam.samples if s.name.endswith("_total")]  # type: ignore[attr-defined]
        if vals and all(_finite(signal, float(v), sample.errors) for v in vals):
            sample.values[signal] = float(sum(vals))
    for signal, names in HISTOGRAMS.items():
        fam = next((by_name[n] for n in names if n in by_name), None)
        if fam is None:
            continue
        known = True
        buckets: Buckets = {}
        bad = False
        for s in fam.samples:  # type: ignore[attr-defined]
            if not s.name.endswith("_bucket"):
                continue
            try:
                le = float(s.labels["le"])
            except (KeyError, ValueError):
                sample.errors.append(f"{signal}: bucket without a valid le label")
                bad = True
                continue
            if math.isnan(s.value) or math.isinf(s.value):
                sample.errors.append(f"{signal}: {s.value} bucket count")
                bad = True
                continue
            buckets[le] = buckets.get(le, 0.0) + float(s.value)
        if bad:
            continue
        if not buckets:
            sample.errors.append(f"{signal}: histogram has no buckets")
            continue
        sample.histograms[signal] = buckets
    if not known:
        raise MetricsError("no vLLM or SGLang metric on the page")
    return sample


def bucket_delta(now: Buckets, before: Buckets | None) -> Buckets:
    """What was observed between two scrapes; a restarted server (a count going down) counts
    from zero."""
    if before is None:
        return dict(now)
    if any(now.get(le, 0.0) < c for le, c in before.items()):
        return dict(now)
    return {le: c - before.get(le, 0.0) for le, c in now.items()}


def add_buckets(total: Buckets, more: Mapping[float, float]) -> None:
    for le, c in more.items():
        total[le] = total.get(le, 0.0) + c


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """Prometheus' histogram_quantile: linear within the bucket the rank falls in; None when
    nothing was observed. A rank in the +Inf bucket gives the largest finite bound."""
    bounds = sorted(buckets)
    if not bounds or not math.isinf(bounds[-1]):
        return None
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return prev_bound
            if count == prev_count:
                return le
            return prev_bound + (le - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = le, count
    return prev_bound
