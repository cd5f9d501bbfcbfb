"""Blocking queries (index/wait), faults and ACLs."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from nomad_helpers import gpu_job

import nomad
from llm_scheduler_standins.faults import Faults
from llm_scheduler_standins.nomad import READ, WRITE, NomadACL, NomadStandin, NomadToken
from scheduler.core.models import Node


def _index(response: httpx.Response) -> int:
    return int(response.headers["X-Nomad-Index"])


def test_blocking_allocations_return_soon_after_a_change(
    standin: NomadStandin, client: nomad.Nomad
) -> None:
    client.jobs.register_job(gpu_job("llm-block"))
    first = client.job.request("llm-block", "allocations", method="get")
    index = int(first.headers["X-Nomad-Index"])
    assert first.json()[0]["ClientStatus"] == "pending"
    started = time.monotonic()
    # The allocation turns running after load_delay_s (0.05 s): that change wakes the query.
    answer = client.job.request(
        "llm-block",
        "allocations",
        method="get",
        params={"index": index, "wait": "30s"},
        timeout=40,
    )
    elapsed = time.monotonic() - started
    assert elapsed < 2.0
    assert int(answer.headers["X-Nomad-Index"]) > index
    assert answer.json()[0]["ClientStatus"] == "running"


def test_blocking_wakes_on_a_write_from_another_thread(standin: NomadStandin) -> None:
    assert standin._server is not None
    url = standin._server.url
    index = _index(httpx.get(f"{url}/v1/allocations"))
    timer = threading.Timer(0.3, lambda: httpx.post(f"{url}/v1/jobs", json=gpu_job("llm-wake")))
    timer.start()
    started = time.monotonic()
    answer = httpx.get(f"{url}/v1/allocations", params={"index": index, "wait": "20s"}, timeout=30)
    timer.join()
    assert 0.2 < time.monotonic() - started < 3.0
    assert [a["JobID"] for a in answer.json()] == ["llm-wake"]


def test_blocking_times_out_with_the_same_index(standin: NomadStandin) -> None:
    assert standin._server is not None
    url = standin._server.url
    index = _index(httpx.get(f"{url}/v1/nodes"))
    started = time.monotonic()
    answer = httpx.get(f"{url}/v1/nodes", params={"index": index, "wait": "300ms"})
    assert 0.25 < time.monotonic() - started < 2.0
    assert _index(answer) == index


def test_unrelated_tables_do_not_wake_node_watchers(
    standin: NomadStandin, fleet: list[Node]
) -> None:
    assert standin._server is not None
    url = standin._server.url
    index = _index(httpx.get(f"{url}/v1/nodes"))
    httpx.post(f"{url}/v1/jobs", json=gpu_job("llm-other"))
    answer = httpx.get(f"{url}/v1/nodes", params={"index": index, "wait": "200ms"})
    assert _index(answer) == index
    standin.set_node_eligibility(fleet[0].id, False)
    changed = httpx.get(f"{url}/v1/nodes", params={"index": index, "wait": "5s"})
    assert _index(changed) > index


def test_index_reset_goes_backwards(fleet: list[Node]) -> None:
    faults = Faults(seed=1)
    standin = NomadStandin(fleet, load_delay_s=0.01, faults=faults)
    server = standin.start()
    try:
        for i in range(5):
            httpx.post(f"{server.url}/v1/jobs", json=gpu_job(f"llm-r{i}"))
        before = _index(httpx.get(f"{server.url}/v1/jobs"))
        faults.reset_index()
        after = _index(httpx.get(f"{server.url}/v1/jobs"))
        assert after < before
        faults.set("/v1/jobs", error_rate=1.0)
        failing = httpx.get(f"{server.url}/v1/jobs")
        assert failing.status_code == 500 and failing.headers["content-type"].startswith(
            "text/plain"
        )
        assert httpx.get(f"{server.url}/v1/nodes").status_code == 200
    finally:
        standin.stop()


@pytest.fixture
def acl_standin(fleet: list[Node]) -> NomadStandin:
    acl = NomadACL(
        [
            NomadToken("reader", namespaces={"default": READ}, node="read"),
            NomadToken("writer", namespaces={"default": WRITE}),
            NomadToken("root", management=True),
        ]
    )
    return NomadStandin(fleet, load_delay_s=0.01, acl=acl)


def test_acl_tokens(acl_standin: NomadStandin) -> None:
    server = acl_standin.start()
    try:
        anonymous = nomad.Nomad(host="127.0.0.1", port=server.port)
        with pytest.raises(nomad.api.exceptions.URLNotAuthorizedNomadException) as denied:
            anonymous.jobs.get_jobs()
        assert denied.value.nomad_resp.text == "Permission denied"
        unknown = nomad.Nomad(host="127.0.0.1", port=server.port, token="who")
        with pytest.raises(nomad.api.exceptions.URLNotAuthorizedNomadException) as missing:
            unknown.nodes.get_nodes()
        assert missing.value.nomad_resp.text == "ACL token not found"

        reader = nomad.Nomad(host="127.0.0.1", port=server.port, token="reader")
        assert len(reader.nodes.get_nodes()) == 6
        with pytest.raises(nomad.api.exceptions.URLNotAuthorizedNomadException):
            reader.jobs.register_job(gpu_job("llm-acl"))
        writer = nomad.Nomad(host="127.0.0.1", port=server.port, token="writer")
        writer.jobs.register_job(gpu_job("llm-acl"))
        assert [j["ID"] for j in reader.jobs.get_jobs()] == ["llm-acl"]
        with pytest.raises(nomad.api.exceptions.URLNotAuthorizedNomadException):
            writer.nodes.get_nodes()  # no node policy
        bearer = httpx.get(f"{server.url}/v1/jobs", headers={"Authorization": "Bearer root"})
        assert bearer.status_code == 200
        other_ns = httpx.get(
            f"{server.url}/v1/jobs",
            params={"namespace": "team-b"},
            headers={"X-Nomad-Token": "reader"},
        )
        assert other_ns.status_code == 403
    finally:
        acl_standin.stop()


def test_blocking_read_of_a_purged_job_answers_404(standin: NomadStandin) -> None:
    assert standin._server is not None
    url = standin._server.url
    httpx.post(f"{url}/v1/jobs", json=gpu_job("llm-gone"))
    index = _index(httpx.get(f"{url}/v1/job/llm-gone"))
    timer = threading.Timer(
        0.2, lambda: httpx.delete(f"{url}/v1/job/llm-gone", params={"purge": "true"})
    )
    timer.start()
    for _ in range(5):  # the job's own status changes wake the watcher too
        answer = httpx.get(
            f"{url}/v1/job/llm-gone", params={"index": index, "wait": "10s"}, timeout=20
        )
        if answer.status_code != 200:
            break
        index = _index(answer)
    timer.join()
    assert (answer.status_code, answer.text) == (404, "job not found")


def _frames(lines: object, count: int) -> list[dict]:
    import json

    got = []
    for line in lines:  # type: ignore[attr-defined]
        got.append(json.loads(line))
        if len(got) >= count:
            return got
    return got


def test_event_stream_sends_heartbeat_then_filtered_frames(standin: NomadStandin) -> None:
    assert standin._server is not None
    url = standin._server.url
    with httpx.stream(
        "GET", f"{url}/v1/event/stream", params={"topic": "Job:llm-ev"}, timeout=10
    ) as stream:
        lines = stream.iter_lines()
        assert _frames(lines, 1) == [{}]
        httpx.post(f"{url}/v1/jobs", json=gpu_job("llm-other-ev"))
        httpx.post(f"{url}/v1/jobs", json=gpu_job("llm-ev"))
        (frame,) = _frames(lines, 1)
    (event,) = frame["Events"]
    assert (event["Topic"], event["Type"], event["Key"]) == ("Job", "JobRegistered", "llm-ev")
    assert event["Payload"]["Job"]["ID"] == "llm-ev" and frame["Index"] == event["Index"]


def test_event_stream_replays_from_index_and_heartbeats(standin: NomadStandin) -> None:
    assert standin._server is not None
    url = standin._server.url
    httpx.post(f"{url}/v1/jobs", json=gpu_job("llm-replay"))
    standin.heartbeat_s = 0.2
    with httpx.stream(
        "GET", f"{url}/v1/event/stream", params={"topic": "Allocation", "index": "1"}, timeout=10
    ) as stream:
        frames = _frames(stream.iter_lines(), 4)
    assert frames[0] == {}
    events = [e for f in frames[1:] if f for e in f["Events"]]
    assert events and all(e["Topic"] == "Allocation" for e in events)
    assert all("Job" not in e["Payload"]["Allocation"] for e in events)
    assert {} in frames[1:]  # a heartbeat once nothing more happens


def test_python_nomad_event_stream(standin: NomadStandin, client: nomad.Nomad) -> None:
    # python-nomad's reader sees `stop` only when a line arrives: a heartbeat soon lets it
    # return before the stand-in closes (a stream cut mid-read kills its thread with
    # ChunkedEncodingError, which it does not catch).
    standin.heartbeat_s = 0.2
    stream, stop, events = client.event.stream.get_stream(topic="Job:llm-pn", timeout=10)
    stream.start()
    try:
        time.sleep(0.2)  # let it connect
        client.jobs.register_job(gpu_job("llm-pn"))
        frame = events.get(timeout=5)
        assert frame["Events"][0]["Key"] == "llm-pn"
    finally:
        stop.set()
        stream.join(timeout=5)
    assert not stream.is_alive()
