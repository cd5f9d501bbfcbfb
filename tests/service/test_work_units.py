"""What the actuator is given (service/work.py): the plan's actions less what bad input holds
back, the replicas Nomad failed, the jobs to purge, and the few facts it needs."""

from __future__ import annotations

from datetime import UTC, datetime

from scheduler.adapters.catalog import Catalog
from scheduler.adapters.nomad_jobs import OwnedJob
from scheduler.adapters.snapshot_builder import ClusterView
from scheduler.core.models import GPU, Model, Node, Plan, Shard, Snapshot, StartAction, StopAction
from scheduler.service.work import work_of

NOW = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)
NODE = Node(
    id="n1",
    name="a",
    cpu_cores=32,
    memory_gb=256,
    gpus=[GPU(id=f"G{i}", model="NVIDIA H100 80GB HBM3", memory_gb=80) for i in range(4)],
)


def _model(name: str, owner: str) -> Model:
    return Model.model_validate({"name": name, "owner": owner, "profiles": [{"name": "one"}]})


def _job(replica: str, model: str, *, stopped: bool = False) -> OwnedJob:
    return OwnedJob(f"llm-{model}-{replica}", model, "one", replica, NOW, None, stopped, [])


def _start(model: str, replica: str) -> StartAction:
    return StartAction(model=model, profile="one", replica=replica, reason="",
                       shards=[Shard(node="n1", gpus=["G0"])])  # fmt: skip


def _view(**kw: object) -> ClusterView:
    models = [_model("ok", "team/a"), _model("frozen", "team/a"), _model("capped", "org/b/c")]
    base: dict[str, object] = {
        "snapshot": Snapshot(now=NOW, nodes=[NODE], models=models),
        "jobs": {"r-1": _job("r-1", "ok"), "r-2": _job("r-2", "frozen"), "r-3": _job("r-3", "ok")},
        "purgeable": ["llm-ok-old"],
        "catalog": Catalog(),
        "frozen_models": {"frozen"},
        "blocked_owners": {"org/b"},
        "job_ids": {"llm-ok-r-1", "someone-elses"},
    }
    return ClusterView(**{**base, **kw})  # type: ignore[arg-type]


def test_bad_input_holds_back_the_stops_of_a_frozen_model_and_starts_under_a_bad_quota() -> None:
    plan = Plan(
        actions=[
            StopAction(replica="r-1", model="ok", reason=""),
            StopAction(replica="r-2", model="frozen", reason=""),
            _start("ok", "r-4"),
            _start("capped", "r-5"),  # owner org/b/c is under the blocked org/b
        ]
    )
    work = work_of(_view(), plan)
    assert [(type(a).__name__, a.replica) for a in work.actions] == [
        ("StopAction", "r-1"),
        ("StartAction", "r-4"),
    ]
    assert work.purge == ["llm-ok-old"]
    facts = work.facts
    assert set(facts.models) == {"ok", "frozen", "capped"} and facts.now == NOW
    assert facts.listed == frozenset({"llm-ok-r-1", "someone-elses"})
    assert set(facts.jobs) == {"r-1", "r-2", "r-3"} and set(facts.nodes) == {"n1"}


def test_a_failed_replica_is_stopped_once_and_never_one_of_a_frozen_model_or_not_ours() -> None:
    faults = {"r-1": "placement refused", "r-2": "devices short", "r-9": "no job of ours"}
    plan = Plan(actions=[StopAction(replica="r-1", model="ok", reason="scale down")])
    work = work_of(_view(faults=faults), plan)
    assert work.failed == {"r-1": "placement refused"}
    assert work.actions == []  # stopped as a failed replica, not twice
    stopped = _view(faults=faults, jobs={"r-1": _job("r-1", "ok", stopped=True)})
    assert work_of(stopped, Plan()).failed == {}


def test_a_pass_that_starts_nothing_does_not_index_the_nodes() -> None:
    plan = Plan(actions=[StopAction(replica="r-1", model="ok", reason="")])
    assert work_of(_view(), plan).facts.nodes == {}
