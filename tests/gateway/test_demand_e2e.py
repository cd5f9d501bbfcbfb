"""Demand without clobbering, end to end: two gateways' counts add up in the scheduler; a
gateway killed with SIGKILL loses its key with its session, and the scheduler keeps the
model's replicas through eviction_grace_s; SIGTERM drains and destroys the session; with
Consul failing, the last known replicas keep serving and /healthz says so."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from llm_scheduler_standins.faults import Faults
from llm_scheduler_standins.model_server import QueueModel
from tests.gateway.gateway_helpers import GatewayProcess, Stack, client, ready, stack, until
from tests.service.e2e_helpers import our_jobs

GRACE_S = 4  # seconds (an integer: the settings refuse 4.0)
LONG = {"model": "busy", "prompt": "a", "max_tokens": 4000, "stream": True}


@pytest.fixture
def st() -> Iterator[Stack]:
    yield from stack({"eviction_grace_s": GRACE_S})


def _open_streams(exits: ExitStack, url: str, n: int) -> list[Iterator[str]]:
    """`n` long streamed requests, left open (their first event read). Keep what this
    returns: a line iterator dropped closes its response, and the client is gone."""
    lines = []
    for _ in range(n):
        reply = exits.enter_context(httpx.stream("POST", f"{url}/v1/completions", json=LONG))
        lines.append(reply.iter_lines())
        assert next(lines[-1]).startswith("data: ")
    return lines


def _replicas(st: Stack) -> int:
    return len(our_jobs(st.dc, "busy"))


def test_two_gateways_add_up_and_a_killed_ones_demand_lasts_the_grace(st: Stack) -> None:
    st.dc.consul.store.session_ttl_multiplier = 0.3  # a 10 s TTL expires after 3 s
    assert st.dc.servers is not None
    # 10 ms a token: the kept gateway's request (4000 tokens) outlasts the test.
    st.dc.servers.queue = QueueModel(capacity=8.0, request_s=0.2, base_itl_s=0.01)
    st.model("busy", {"min": 0, "max": 4, "target_per_replica": 1})
    kept = st.gateway(session_renew_s=1.0)
    killed = GatewayProcess(st.dc, "doomed", LLM_SCHEDULER_GATEWAY_SESSION_RENEW_S="1")
    with ExitStack() as exits:
        exits.callback(killed.stop)
        streams = _open_streams(exits, kept.url, 1)
        until(lambda: ready(kept, "busy"), what="a first replica")
        streams += _open_streams(exits, killed.url, 2)
        # 1 + 2 requests in flight at one request per replica: three replicas.
        until(lambda: _replicas(st) == 3, what="three replicas for 1 + 2 requests")
        assert len(st.gateway_keys()) == 2
        killed.kill()
        key = f"llm-scheduler/gateways/{killed.instance}"
        until(lambda: key not in st.gateway_keys(), what="the killed gateway's key gone")
        gone = time.monotonic()
        while time.monotonic() - gone < GRACE_S - 1.5:
            assert _replicas(st) == 3, "a vanished key was read as zero before the grace"
            time.sleep(0.1)
        until(lambda: _replicas(st) == 1, timeout=GRACE_S + 10, what="back to one replica")
        assert next(streams[0]) is not None  # the other gateway's request still flows


def test_sigterm_finishes_what_is_in_flight_then_destroys_the_session(st: Stack) -> None:
    st.model("busy", {"min": 1, "max": 1})
    gw = GatewayProcess(st.dc, "draining", LLM_SCHEDULER_GATEWAY_DRAIN_TIMEOUT_S="10")
    try:
        until(lambda: f"llm-scheduler/gateways/{gw.instance}" in st.gateway_keys(), what="key")
        body = {**LONG, "max_tokens": 300}  # about a second at the stand-in's pace
        with httpx.stream("POST", f"{gw.url}/v1/completions", json=body, timeout=20) as reply:
            lines = reply.iter_lines()
            assert next(lines).startswith("data: ")
            gw.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"{gw.url}/healthz")  # no longer accepting
            rest = [line for line in lines if line]
        assert rest[-1] == "data: [DONE]" and len(rest) == 300
        # Drained, uvicorn raises the signal again: the process ends as SIGTERM ends one.
        assert gw.proc.wait(15) == -signal.SIGTERM
        # Destroyed, not expired: a 10 s TTL would keep the key for 20 s here.
        assert f"llm-scheduler/gateways/{gw.instance}" not in st.gateway_keys()
        # --json: one line for the request, what it was and how long it took; no body.
        [line] = [json.loads(x) for x in gw.log_lines() if '"event": "request"' in x]
        assert line["model"] == "busy" and line["status"] == 200 and line["replica"]
        assert line["duration_s"] > line["ttfb_s"] > 0 and line["outcome"] == "ok"
        assert "prompt" not in json.dumps(line) and "data:" not in json.dumps(line)
    finally:
        gw.stop()


@pytest.fixture
def faulty() -> Iterator[tuple[Faults, Stack]]:
    faults = Faults(seed=1)
    for st in stack(faults=faults):
        yield faults, st


def test_consul_failing_keeps_the_last_replicas_and_healthz_says_so(
    faulty: tuple[Faults, Stack],
) -> None:
    faults, st = faulty
    st.model("chat", {"min": 1, "max": 1})
    gw = st.gateway(session_renew_s=1.0)
    until(lambda: ready(gw, "chat"), what="a replica")
    c = client(gw.url)
    assert c.embeddings.create(model="chat", input="a").data
    for prefix in ("/v1/health/", "/v1/kv/", "/v1/session/"):
        faults.set(prefix, error_rate=1.0)

    def health() -> httpx.Response:
        return httpx.get(f"{gw.url}/healthz")

    until(lambda: "demand" in health().json()["failures"], what="demand writes failing")
    body = health().json()
    assert health().status_code == 200 and body["status"] == "degraded"
    assert body["consul"] == "unreachable or failing"
    for _ in range(5):
        assert c.embeddings.create(model="chat", input="a").data  # last known replicas
    faults.clear()
    until(lambda: health().json()["status"] == "ok", timeout=15, what="healthz ok again")
    page = httpx.get(f"{gw.url}/metrics").text
    assert 'llm_gateway_demand_writes_total{outcome="failed"}' in page
    demand = gw.gateway.demand
    assert demand is not None
    until(lambda: demand.key in st.gateway_keys(), what="the demand key written again")
