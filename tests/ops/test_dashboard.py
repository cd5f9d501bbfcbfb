from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from ops_helpers import NOW, preemption, snapshot_and_plan

from scheduler.core.models import ModelStatus, Replica, Shard, Snapshot, StartAction
from scheduler.core.serve_spec import Serve
from scheduler.ops.dashboard import DashboardObserver, parse_listen, serve_ops
from scheduler.ops.metrics import MetricsObserver


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or (
            line.startswith(name + "{") and line.split(" ")[0] == name
        ):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.fixture
def served() -> object:
    dash, metrics = DashboardObserver(), MetricsObserver()
    server = serve_ops(dash, metrics, port=0)
    yield dash, metrics, server
    server.stop()


def test_metrics_follow_passes_and_actions(served: object) -> None:
    dash, metrics, server = served  # type: ignore[misc]
    snap, plan = snapshot_and_plan()
    for obs in (dash, metrics):
        obs.pass_finished(snap, plan, 0.042, ["llm-scheduler/models/bad: class: invalid"])
        obs.action_done(preemption(), True, None)
        obs.action_done(
            StartAction(model="big-405b", profile="tp8x2", replica="r-9", shards=[], reason="x"),
            False,
            "nomad said no",
        )
    text = httpx.get(server.url + "/metrics").text
    assert _metric(text, 'llm_scheduler_gpus{state="free"}') == 48 - 2 - 4
    assert _metric(text, 'llm_scheduler_gpus{state="allocated"}') == 4
    assert _metric(text, 'llm_scheduler_mig_slices{state="free"}') == 6 - 1
    assert _metric(text, 'llm_scheduler_mig_slices{state="allocated"}') == 1
    assert _metric(text, "llm_scheduler_models_pending") == 1
    assert _metric(text, 'llm_scheduler_replicas{model="llama-70b",state="running"}') == 1
    assert _metric(text, 'llm_scheduler_replicas{model="tiny-1b",state="starting"}') == 1
    assert _metric(text, 'llm_scheduler_preemptions_total{class="opportunistic"}') == 1
    assert _metric(text, 'llm_scheduler_errors_total{kind="input"}') == 1
    assert _metric(text, 'llm_scheduler_errors_total{kind="start"}') == 1
    assert _metric(text, "llm_scheduler_pass_duration_seconds_count") == 1


def test_state_api_shows_holders_pending_and_preemptions(served: object) -> None:
    dash, _, server = served  # type: ignore[misc]
    assert httpx.get(server.url + "/healthz").json()["passes"] == 0
    snap, plan = snapshot_and_plan()
    dash.pass_finished(snap, plan, 0.01, [])
    dash.action_done(preemption(), True, None)
    state = httpx.get(server.url + "/api/state").json()
    names = [n["name"] for n in state["nodes"]]
    assert names == sorted(names) and "gpu-h100-1" in names  # natural order, no number >= 10
    h100 = next(n for n in state["nodes"] if n["name"] == "gpu-h100-1")
    holders = [g["holder"] for g in h100["gpus"]]
    assert holders == ["llama-70b"] * 4 + [None] * 4
    mig_holders = [s["holder"] for n in state["nodes"] for g in n["gpus"] for s in g["mig"] or []]
    assert mig_holders.count("tiny-1b") == 1
    (pending,) = state["pending"]
    assert pending["model"] == "big-405b" and pending["class"] == "standard"
    assert pending["reason"] == plan.models["big-405b"].pending
    assert pending["code"] == plan.models["big-405b"].pending_code
    assert state["preemptions"][0]["victim"] == "tiny-1b"
    assert state["preemptions"][0]["victim_class"] == "opportunistic"
    assert state["counts"]["preemptions"] == 1
    assert httpx.get(server.url + "/healthz").json()["passes"] == 1
    page = httpx.get(server.url + "/")
    assert page.status_code == 200 and "api/state" in page.text


def test_state_api_says_which_signal_set_each_count(served: object) -> None:
    """Each model's `why` reaches the page (the live/desired cell's title)."""
    dash, _, server = served  # type: ignore[misc]
    snap, plan = snapshot_and_plan()
    why = "2 replicas: ttft p90 840 ms > 500 ms objective (queue 2/5)"
    big = plan.models["big-405b"].model_copy(update={"why": why})
    dash.pass_finished(snap, plan.model_copy(update={"models": {**plan.models, "big-405b": big}}),
                       0.01, [])  # fmt: skip
    models = {m["name"]: m for m in httpx.get(server.url + "/api/state").json()["models"]}
    assert models["big-405b"]["why"] == why
    assert models["llama-70b"]["why"] is None
    assert "title: m.why" in httpx.get(server.url + "/").text


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen(":9000") == ("127.0.0.1", 9000)
    with pytest.raises(ValueError, match="host:port"):
        parse_listen("localhost")


def test_every_palette_colour_reads_and_stands_apart() -> None:
    from scheduler.ops.palette import DISTINCT, contrast, model_colours, text_on

    assert all(contrast(c, text_on(c)) >= 4.5 for c in DISTINCT)
    names = [f"model-{i}" for i in range(40)]
    given = model_colours(names)
    assert len(set(given.values())) == 40
    assert [given[n] for n in sorted(names)[: len(DISTINCT)]] == DISTINCT


def test_nodes_are_listed_in_natural_name_order() -> None:
    from scheduler.ops.dashboard import natural_key

    names = ["gpu-h100-1", "gpu-a100-10", "gpu-a100-2", "gpu-a100-mig-1"]
    assert sorted(names, key=natural_key) == [
        "gpu-a100-2", "gpu-a100-10", "gpu-a100-mig-1", "gpu-h100-1",
    ]  # fmt: skip


def _with(snap: Snapshot, **update: object) -> Snapshot:
    return snap.model_copy(update=update)


def test_a_retiring_model_is_in_the_models_with_its_replicas() -> None:
    dash = DashboardObserver()
    snap, plan = snapshot_and_plan()
    gone = NOW - timedelta(minutes=3)
    retiring = _with(snap, models=[m for m in snap.models if m.name != "llama-70b"],
                     retired={"llama-70b": gone})  # fmt: skip
    dash.pass_finished(retiring, plan, 0.01, [])
    models = {m["name"]: m for m in dash.state()["models"]}
    assert models["llama-70b"]["retiring"] == "2026-12-02T09:57:00Z"
    assert models["llama-70b"]["live"] == 1 and models["llama-70b"]["desired"] == 0
    assert models["tiny-1b"]["retiring"] is None
    assert "llama-70b" in dash.state()["colours"]


def test_a_multi_node_replica_is_one_entry_and_each_gpu_knows_its_shard() -> None:
    dash = DashboardObserver()
    snap, plan = snapshot_and_plan()
    a, b = snap.nodes[1], snap.nodes[2]
    rep = Replica(id="r-9", model="big-405b", profile="tp8x2", state="running", created_at=NOW,
                  shards=[Shard(node=a.id, gpus=[g.id for g in a.gpus]),
                          Shard(node=b.id, gpus=[g.id for g in b.gpus])])  # fmt: skip
    dash.pass_finished(_with(snap, replicas=[*snap.replicas, rep]), plan, 0.01, [])
    state = dash.state()
    assert state["multi_node"] == [
        {"id": "r-9", "model": "big-405b", "state": "running",
         "shards": [{"node": a.name, "gpus": 8}, {"node": b.name, "gpus": 8}]}
    ]  # fmt: skip
    shards = {g["shard"] for n in state["nodes"] for g in n["gpus"] if g["replica"] == "r-9"}
    assert shards == {"1/2", "2/2"}
    assert all(g["shard"] is None for n in state["nodes"] for g in n["gpus"]
               if g["replica"] == "r-1")  # fmt: skip


def test_history_of_the_last_hour_and_how_long_each_model_waited() -> None:
    clock = [1_000_000.0]
    dash = DashboardObserver(clock=lambda: clock[0])
    snap, plan = snapshot_and_plan()
    for _ in range(400):  # 400 passes, one every 15 s: 100 minutes
        dash.pass_finished(snap, plan, 0.02, [])
        dash.pass_carried(0.5, [])  # the slowest pass of its step is kept
        clock[0] += 15
    history = dash.state()["history"]
    points = history["points"]
    assert history["window_s"] == 3600
    assert clock[0] - 15 - points[0]["at"] <= 3600 and len(points) == 241
    assert {p["gpus_in_use"] for p in points} == {5}  # 4 H100s and a GPU with a held slice
    assert {p["pending"] for p in points} == {1}
    assert {p["pass_s"] for p in points} == {0.5}
    (pending,) = dash.state()["pending"]
    assert pending["waited_s"] == 399 * 15
    assert pending["since"] == "1970-01-12T13:46:40Z"
    done = plan.model_copy(update={"models": {**plan.models,
        "big-405b": ModelStatus(desired=1, live=1)}})  # fmt: skip
    dash.pass_finished(snap, done, 0.02, [])
    dash.pass_finished(snap, plan, 0.02, [])  # pending again: it waits anew
    assert dash.state()["pending"][0]["waited_s"] == 0


def test_input_errors_reach_the_page_and_stand_on_a_carried_pass() -> None:
    dash = DashboardObserver()
    snap, plan = snapshot_and_plan()
    dash.pass_finished(snap, plan, 0.01, ["llm-scheduler/models/bad: class: invalid"])
    dash.pass_carried(0.01, ["llm-scheduler/models/bad: class: invalid", "another"])
    assert dash.state()["input_errors"] == ["llm-scheduler/models/bad: class: invalid", "another"]


def test_a_model_entry_says_its_expected_time_to_ready() -> None:
    from types import SimpleNamespace

    from scheduler.service.ready_learning import ReadyLearning

    snap, plan = snapshot_and_plan()
    serve = {"source": "org/llama", "weights_gb": 140}
    llama = snap.models[0].model_copy(update={"serve": Serve.model_validate(serve)})
    snap = _with(snap, models=[llama, *snap.models[1:]])
    ready = ReadyLearning()
    ready.tracker.estimates.observe("llama-70b", "cold", 360.0)
    dash = DashboardObserver()
    dash.attach(SimpleNamespace(ready=ready, health=dict))
    for observer in (ready, dash):  # the service's order: the learning first
        observer.pass_finished(snap, plan, 0.01, [])
    models = {m["name"]: m for m in dash.state()["models"]}
    entry = models["llama-70b"]["time_to_ready"]
    assert entry["cold_s"] == 360.0 and entry["learned"] == {"cold": 1}
    assert entry["warm_s"] == 20 + 140 * 8 / 16  # not seen warm: from the weight size
    assert entry["text"] == "cold: about 6 min (learned from 1 start)"
    assert models["tiny-1b"]["time_to_ready"] is None  # serves nothing: nothing to expect
