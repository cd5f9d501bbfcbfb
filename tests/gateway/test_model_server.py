"""The stand-in model servers answer the OpenAI endpoints as vLLM does, through the real
`openai` client, at the pace of their queueing model; the Nomad stand-in registers each
replica's Consul service where its server listens, on loopback."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from llm_scheduler_standins.devcluster import DevCluster
from llm_scheduler_standins.model_server import ModelServers, QueueModel
from scheduler.adapters.nomad_jobs import service_name
from scheduler.service.loop import Service
from tests.service.e2e_helpers import (
    FAST_SETTINGS,
    LAYOUT,
    model_value,
    put,
    service_config,
    small_fleet,
    wait_for,
)

FAST = QueueModel(capacity=1.0, request_s=0.4, base_ttft_s=0.005, base_itl_s=0.001)


@pytest.fixture
def server() -> Iterator[tuple[ModelServers, openai.OpenAI]]:
    servers = ModelServers(FAST)
    port = servers.start("alloc-1", "chat")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
    try:
        yield servers, client
    finally:
        client.close()
        servers.close()


def test_the_three_endpoints_answer_streamed_and_not(
    server: tuple[ModelServers, openai.OpenAI],
) -> None:
    _, client = server
    hi = [{"role": "user", "content": "hi"}]
    chat = client.chat.completions.create(model="chat", messages=hi, max_tokens=3)
    assert chat.object == "chat.completion"
    assert chat.usage is not None and chat.usage.completion_tokens == 3
    done = client.completions.create(model="chat", prompt="a", max_tokens=2)
    assert done.choices[0].text == "the model "
    emb = client.embeddings.create(model="chat", input=["a", "b"])
    assert [d.index for d in emb.data] == [0, 1]
    chunks = list(
        client.chat.completions.create(
            model="chat",
            messages=hi,
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "the model answers with "
    )
    assert chunks[-1].choices == [] and chunks[-1].usage is not None


def test_errors_have_vllm_shape(server: tuple[ModelServers, openai.OpenAI]) -> None:
    _, client = server
    with pytest.raises(openai.NotFoundError) as missing:
        client.completions.create(model="other", prompt="a")
    assert missing.value.body == {
        "message": "The model `other` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="chat", prompt="a", stream_options={"include_usage": True})


def test_a_busy_replica_answers_later() -> None:
    """Capacity one: a request that arrives while another runs waits its turn, about
    request_s (the queueing model's timing, far apart enough to hold on a loaded machine)."""
    servers = ModelServers(QueueModel(capacity=1.0, request_s=3.0, base_ttft_s=0.005))
    try:
        port = servers.start("alloc-1", "chat")
        base = f"http://127.0.0.1:{port}/v1"
        # The first request pays for the server's start-up: time the second one alone.
        httpx.post(f"{base}/embeddings", json={"model": "chat", "input": "a"}, timeout=10)
        started = time.perf_counter()
        httpx.post(f"{base}/embeddings", json={"model": "chat", "input": "a"}, timeout=10)
        alone = time.perf_counter() - started
        body = {"model": "chat", "prompt": "a", "max_tokens": 4000, "stream": True}
        with httpx.stream("POST", f"{base}/completions", json=body, timeout=10) as running:
            assert next(running.iter_lines()).startswith("data: ")  # it runs now
            started = time.perf_counter()
            httpx.post(f"{base}/embeddings", json={"model": "chat", "input": "a"}, timeout=10)
            queued = time.perf_counter() - started
        # Relative, so a loaded machine slowing both requests alike does not fail it.
        assert queued > alone + 1.5, (alone, queued)
    finally:
        servers.close()


def test_replicas_register_at_the_loopback_port_they_listen_on() -> None:
    with DevCluster(fleet=small_fleet(), load_delay_s=0.05, model_servers=True) as dc:
        dc.consul.kv_put(LAYOUT.settings, json.dumps(FAST_SETTINGS))
        svc = Service(service_config(dc))
        svc.run_in_thread()
        try:
            value = model_value([{"name": "one", "gpus": 1}], scaling={"min": 1, "max": 1})
            put(dc, LAYOUT.model_key("chat"), value)
            url = f"{dc.consul_url}/v1/health/service/{service_name('chat')}?passing"
            [entry] = wait_for(lambda: httpx.get(url).json(), what="a passing replica")
            service = entry["Service"]
            assert service["Address"] == "127.0.0.1"
            assert dc.servers is not None
            assert service["Port"] in dc.servers.ports().values()
            models = httpx.get(f"http://127.0.0.1:{service['Port']}/v1/models").json()
            assert models["data"][0]["id"] == "chat"
        finally:
            svc.stop()
