"""Waking from zero through the gateway: a request for a model with no replica is held and
counted as queued, the scheduler starts a replica, and the request goes on; the bounds on
held requests (max_queued, activation_timeout_s) and a model that cannot come are answered
at once, in OpenAI's error shape."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from scheduler.gateway.server import GatewayThread
from tests.gateway.gateway_helpers import Stack, client, stack, until

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def st() -> Iterator[Stack]:
    yield from stack()


def _held(gw: GatewayThread, model: str, body: dict[str, Any]) -> tuple[threading.Thread, dict]:
    out: dict[str, Any] = {}

    def go() -> None:
        started = time.perf_counter()
        out["reply"] = httpx.post(f"{gw.url}/v1/completions", json=body, timeout=30)
        out["took"] = time.perf_counter() - started

    thread = threading.Thread(target=go)
    thread.start()
    return thread, out


def test_a_request_for_a_model_at_zero_is_held_counted_and_served(st: Stack) -> None:
    """Replicas register with a critical check that never turns passing by itself: only the
    gateway's /health probe makes the new replica usable (Consul's view lags in life)."""
    st.dc.nomad.cluster.initial_check = "critical"
    st.model("cold", {"min": 0, "max": 1, "on_demand": True})
    gw = st.gateway()
    thread, out = _held(gw, "cold", {"model": "cold", "prompt": "a", "max_tokens": 2})
    key = gw.gateway.demand.key if gw.gateway.demand else ""

    def queued_in_consul() -> bool:
        entry = st.gateway_keys().get(key)
        if not entry:
            return False
        import base64

        models = json.loads(base64.b64decode(entry["Value"]))["models"]
        return models.get("cold", {}).get("queued") == 1

    until(queued_in_consul, what="the held request counted as queued in Consul")
    thread.join(20)
    assert out["reply"].status_code == 200
    assert out["reply"].json()["choices"][0]["text"] == "the model "
    [replica] = gw.gateway.state.of("cold").replicas.values()
    assert not replica.passing and replica.probed_ok
    counts = gw.gateway.state.count("cold")
    until(lambda: (counts.queued, counts.inflight) == (0, 0), what="the counts back to zero")
    page = httpx.get(f"{gw.url}/metrics").text
    assert 'llm_gateway_activations_total{model="cold"} 1.0' in page
    assert 'llm_gateway_activation_wait_seconds_count{model="cold"} 1.0' in page


def test_held_requests_are_bounded(st: Stack) -> None:
    """No scheduler: nothing starts. One request may wait (max_queued 1), for one second."""
    st.service.stop()
    st.model("stuck", {"min": 0, "max": 1}, max_queued=1, activation_timeout_s=1)
    gw = st.gateway()
    thread, out = _held(gw, "stuck", {"model": "stuck", "prompt": "a"})
    until(lambda: gw.gateway.state.count("stuck").queued == 1, what="one held request")
    second = httpx.post(f"{gw.url}/v1/completions", json={"model": "stuck", "prompt": "a"})
    assert second.status_code == 429
    assert second.json()["error"]["code"] == "too_many_queued"
    assert second.headers["retry-after"] == "30"
    thread.join(10)
    reply = out["reply"]
    assert reply.status_code == 503 and 0.9 < out["took"] < 5
    assert reply.json()["error"]["code"] == "activation_timeout"
    assert reply.headers["retry-after"] == "30"
    assert gw.gateway.state.count("stuck").queued == 0


def test_a_model_that_cannot_come_is_refused_at_once_with_the_schedulers_reason(
    st: Stack,
) -> None:
    """No node has the GPU model its only profile asks for: the scheduler's status says so,
    and the gateway answers 503 at once with that reason rather than hold the client."""
    profiles = [{"name": "big", "gpus": 1, "gpu_models": ["NVIDIA B200"]}]
    from tests.service.e2e_helpers import LAYOUT, model_value, put

    value = model_value(profiles, scaling={"min": 1, "max": 1})
    put(st.dc, LAYOUT.model_key("huge"), value)
    gw = st.gateway()
    until(lambda: (gw.gateway.state.statuses.get("huge") or {}).get("tried"), what="a status")
    started = time.perf_counter()
    reply = httpx.post(f"{gw.url}/v1/completions", json={"model": "huge", "prompt": "a"})
    assert time.perf_counter() - started < 5  # not held: its activation_timeout_s is 600
    assert reply.status_code == 503
    error = reply.json()["error"]
    assert error["code"] == "model_unavailable"
    assert "no node has" in error["message"]
    assert reply.headers["x-should-retry"] == "false"


def test_a_client_that_gives_up_while_held_is_no_longer_counted(st: Stack) -> None:
    st.service.stop()
    st.model("stuck", {"min": 0, "max": 1})
    gw = st.gateway()
    c = client(gw.url, timeout=0.5)
    with pytest.raises(Exception, match="timed out"):
        c.completions.create(model="stuck", prompt="a")
    until(lambda: gw.gateway.state.count("stuck").queued == 0, what="the held count back")
