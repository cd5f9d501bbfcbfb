"""The gateway routes OpenAI requests to the replicas Consul lists, through the real `openai`
client, with the stand-ins on loopback: every endpoint, streamed and not, headers passed on,
every kind of bad input answered in OpenAI's error shape and counted, a refused replica
retried on another, a replica dropping mid-stream, a client going away mid-stream."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import openai
import pytest

from llm_scheduler_standins.registry import ServiceInstance
from scheduler.adapters.nomad_jobs import service_name
from scheduler.gateway.server import GatewayThread
from tests.gateway.gateway_helpers import Stack, client, free_port, ready, stack, until

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def st() -> Iterator[Stack]:
    yield from stack()


@pytest.fixture(scope="module")
def gw(st: Stack) -> GatewayThread:
    st.model("chat", {"min": 2, "max": 2})
    st.model("idle", {"min": 0, "max": 1})
    gw = st.gateway(max_body_bytes=4096)
    until(lambda: len(gw.gateway.state.of("chat").usable()) == 2, what="two chat replicas")
    return gw


def metric(gw: GatewayThread, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in httpx.get(f"{gw.url}/metrics").text.splitlines():
        if line.startswith(f"{name}{{") and line.split("}")[0].count("=") == len(labels):
            got = ",".join(sorted(line[len(name) + 1 :].split("}")[0].split(",")))
            if got == wanted:
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_models_lists_the_catalog_those_at_zero_included(gw: GatewayThread) -> None:
    ids = {m.id: m for m in client(gw.url).models.list().data}
    assert set(ids) == {"chat", "idle"}
    assert ids["chat"].model_extra == {"ready": True}
    assert ids["idle"].model_extra == {"ready": False}


def test_every_endpoint_streamed_and_not(gw: GatewayThread) -> None:
    c = client(gw.url)
    chat = c.chat.completions.create(model="chat", messages=HI, max_tokens=3)
    assert chat.choices[0].message.content == "the model answers "
    assert c.completions.create(model="chat", prompt="a", max_tokens=2).choices[0].text
    assert len(c.embeddings.create(model="chat", input=["a", "b", "c"]).data) == 3
    stream = c.chat.completions.create(
        model="chat", messages=HI, max_tokens=5, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert len(chunks) == 6 and chunks[-1].usage is not None
    text = "".join(
        ch.choices[0].text
        for ch in c.completions.create(model="chat", prompt="a", max_tokens=3, stream=True)
    )
    assert text == "the model answers "


def test_requests_spread_over_both_replicas(gw: GatewayThread) -> None:
    c = client(gw.url)
    for _ in range(30):
        c.embeddings.create(model="chat", input="a")
    assert metric(gw, "llm_gateway_requests_total", model="chat", code="200") >= 30
    outstanding = [r.outstanding for r in gw.gateway.state.of("chat").replicas.values()]
    assert outstanding == [0, 0]


def test_authorization_passes_through(st: Stack, gw: GatewayThread) -> None:
    assert st.dc.servers is not None
    st.dc.servers.api_key = "sk-right"
    try:
        assert client(gw.url, api_key="sk-right").embeddings.create(model="chat", input="a").data
        with pytest.raises(openai.AuthenticationError):
            client(gw.url).embeddings.create(model="chat", input="a")
    finally:
        st.dc.servers.api_key = None


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        (b"{not json", 400, "invalid_json", None),
        (b"[1, 2]", 400, "invalid_json", None),
        (b'{"prompt": "a"}', 400, "missing_model", "model"),
        (b'{"model": 7, "prompt": "a"}', 400, "missing_model", "model"),
        (b'{"model": "nope", "prompt": "a"}', 404, "model_not_found", "model"),
        (json.dumps({"model": "chat", "prompt": "a" * 5000}).encode(), 413, "body_too_large", None),
    ],
)
def test_bad_input_gets_openais_error_shape_and_is_counted(
    gw: GatewayThread, body: bytes, status: int, code: str, param: str | None
) -> None:
    before = metric(gw, "llm_gateway_bad_input_total", reason=code)
    reply = httpx.post(
        f"{gw.url}/v1/completions", content=body, headers={"content-type": "application/json"}
    )
    assert reply.status_code == status
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["code"], error["param"]) == (code, param)
    assert error["type"] == "invalid_request_error"
    if status == 404:
        assert "Known models: chat, idle" in error["message"]
    assert metric(gw, "llm_gateway_bad_input_total", reason=code) == before + 1
    # ... and everyone else is still served.
    assert client(gw.url).embeddings.create(model="chat", input="a").data


def test_unknown_model_through_the_openai_client(gw: GatewayThread) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client(gw.url).chat.completions.create(model="gpt-4", messages=HI)
    assert err.value.code == "model_not_found"


def _register_dead_replica(st: Stack, model: str) -> str:
    """A passing registration at a loopback port nothing listens on."""
    node = st.dc.fleet[0]
    sid = f"dead-{model}-{free_port()}"
    st.dc.consul.register_service(
        ServiceInstance(
            id=sid,
            name=service_name(model),
            node_id=node.id,
            node_name=node.name,
            address="127.0.0.1",
            port=free_port(),
        )
    )
    return sid


def test_a_refused_connection_is_retried_once_on_another_replica(
    st: Stack, gw: GatewayThread
) -> None:
    sid = _register_dead_replica(st, "chat")
    try:
        until(lambda: sid in gw.gateway.state.of("chat").replicas, what="the dead replica")
        before = metric(gw, "llm_gateway_upstream_errors_total", model="chat", kind="refused")
        c = client(gw.url)
        for _ in range(20):
            assert c.embeddings.create(model="chat", input="a").data
        assert (
            metric(gw, "llm_gateway_upstream_errors_total", model="chat", kind="refused") > before
        )
    finally:
        st.dc.consul.deregister_service(sid)


def test_a_lone_refusing_replica_is_a_502(st: Stack, gw: GatewayThread) -> None:
    st.model("lonely", {"min": 0, "max": 0})
    sid = _register_dead_replica(st, "lonely")
    try:
        until(lambda: ready(gw, "lonely"), what="the dead replica")
        reply = httpx.post(f"{gw.url}/v1/completions", json={"model": "lonely", "prompt": "a"})
        assert reply.status_code == 502
        assert reply.json()["error"]["code"] == "upstream_error"
    finally:
        st.dc.consul.deregister_service(sid)


def test_a_replica_dropping_mid_stream_ends_it_with_an_error_event(
    st: Stack, gw: GatewayThread
) -> None:
    assert st.dc.servers is not None
    st.dc.servers.drop_streams_after = 2
    try:
        stream = client(gw.url).chat.completions.create(
            model="chat", messages=HI, max_tokens=10, stream=True
        )
        got = []
        with pytest.raises(openai.APIError) as err:
            for chunk in stream:
                got.append(chunk)
        assert len(got) == 2 and "stopped mid-answer" in err.value.message
    finally:
        st.dc.servers.drop_streams_after = None
    counts = gw.gateway.state.count("chat")
    until(lambda: counts.inflight == 0, what="the count back to zero")
    assert metric(gw, "llm_gateway_upstream_errors_total", model="chat", kind="mid_stream") >= 1


def test_a_client_gone_mid_stream_cancels_upstream(st: Stack, gw: GatewayThread) -> None:
    counts = gw.gateway.state.count("chat")
    assert counts.inflight == 0
    body = {"model": "chat", "prompt": "a", "max_tokens": 4000, "stream": True}
    with httpx.stream("POST", f"{gw.url}/v1/completions", json=body) as reply:
        lines = reply.iter_lines()
        assert next(lines).startswith("data: ")
        assert counts.inflight == 1
    until(lambda: counts.inflight == 0, 3, "the in-flight count back where it was")
    servers = st.dc.servers
    assert servers is not None
    # The replica stopped answering too: the upstream request was cancelled, not left to run.
    # Well before the answer's own end (4000 tokens: over 8 s at the stand-in's pace).
    until(lambda: all(r.active == 0 for r in servers._replicas.values()), 3, "upstream idle")
    assert all(r.outstanding == 0 for r in gw.gateway.state.of("chat").replicas.values())


def test_a_client_gone_before_a_whole_answer_cancels_upstream(st: Stack, gw: GatewayThread) -> None:
    """Not streamed: the answer would come whole, seconds later; the client leaves first."""
    counts = gw.gateway.state.count("chat")
    body = {"model": "chat", "prompt": "a", "max_tokens": 4000}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{gw.url}/v1/completions", json=body, timeout=0.5)
    until(lambda: counts.inflight == 0, 3, "the in-flight count back where it was")
    servers = st.dc.servers
    assert servers is not None
    # Well before the answer's own end (4000 tokens: over 8 s at the stand-in's pace).
    until(lambda: all(r.active == 0 for r in servers._replicas.values()), 3, "upstream idle")


def test_a_client_gone_in_the_middle_of_its_body_is_counted_and_nothing_breaks(
    gw: GatewayThread,
) -> None:
    before = metric(gw, "llm_gateway_bad_input_total", reason="client_closed")
    host, port = gw.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"model": "ch'
        )
    until(lambda: metric(gw, "llm_gateway_bad_input_total", reason="client_closed") > before,
          what="the cut body counted")  # fmt: skip
    assert client(gw.url).embeddings.create(model="chat", input="a").data
