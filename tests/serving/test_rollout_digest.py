"""What a replica runs, as Nomad keeps it: the spec digest in the job's Meta is read
back into the replica, changes with what is served, and failed roll-outs and moves survive a
restart through the scheduler's state key."""

from __future__ import annotations

import json

from serving_helpers import RUNTIME_FIXTURES, model, render

from scheduler.adapters.nomad_allocs import replica_from
from scheduler.adapters.nomad_jobs import SPEC_META, owned_job, spec_digest, specs_of
from scheduler.adapters.nomad_nodes import node_from_nomad
from scheduler.adapters.pass_memory import parse_lifecycle
from scheduler.adapters.snapshot_merge import refused_rollouts


def test_the_spec_digest_is_in_the_job_and_read_back_into_the_replica() -> None:
    job = render("vllm", "one-gpu")
    m = model("vllm", "one-gpu")
    assert job["Meta"][SPEC_META] == spec_digest(m, m.profiles[0])
    back = owned_job(job)
    assert back is not None and back.spec == job["Meta"][SPEC_META]
    rep = replica_from(back, [], set(), None)
    assert rep is not None and rep.spec == back.spec
    # A job written before digests: unknown, never judged outdated.
    del job["Meta"][SPEC_META]
    old = owned_job(job)
    assert old is not None and old.spec == ""


def test_the_digest_changes_with_what_is_served_and_only_then() -> None:
    base = model("vllm", "one-gpu", image="vllm/vllm-openai:v0.9.0")
    p = base.profiles[0]
    same = model("vllm", "one-gpu", image="vllm/vllm-openai:v0.9.0")
    assert spec_digest(base, p) == spec_digest(same, same.profiles[0])
    for changed in (
        model("vllm", "one-gpu", image="vllm/vllm-openai:v0.10.0"),
        model("sglang", "one-gpu", image="vllm/vllm-openai:v0.9.0"),
        base.model_copy(update={"load_grace_s": 600}),
        base.model_copy(update={"profiles": [p.model_copy(update={"cpu_cores": 99})]}),
    ):
        assert spec_digest(changed, changed.profiles[0]) != spec_digest(base, p)
    assert specs_of([base]) == {base.name: {p.name: spec_digest(base, p)}}


def test_failed_roll_outs_and_moves_are_read_from_the_state_key() -> None:
    key = "llm-scheduler/state"
    value = json.dumps({"holds": {}, "stalled": {"m": "abc"}, "moves": {"r-1": "r-2"}})
    assert parse_lifecycle([{"Key": key, "Value": value}], key) == ({"m": "abc"}, {"r-1": "r-2"})
    assert parse_lifecycle([{"Key": key, "Value": "not json"}], key) == ({}, {})
    assert parse_lifecycle([], key) == ({}, {})


def test_a_refused_replica_on_the_new_spec_stalls_the_roll_out() -> None:
    new = owned_job(render("vllm", "one-gpu", image="v2"))
    old_job = render("vllm", "one-gpu", image="v1")
    old_job["Meta"]["llm_scheduler_replica"] = "r-old"
    old = owned_job(old_job)
    assert new is not None and old is not None
    specs = {new.model: {new.profile: new.spec}}
    assert refused_rollouts([old, new], {new.replica: "placement refused"}, specs) == {
        new.model: new.spec
    }
    # A refused replica with no older one beside it (a plain scale-up) stalls nothing.
    assert refused_rollouts([new], {new.replica: "placement refused"}, specs) == {}
    assert refused_rollouts([old, new], {}, specs) == {}


def test_a_node_carries_its_meta_for_topology() -> None:
    """Node.Meta as /v1/node/:id answers it (fixtures/nomad/node-read.json): strings."""
    body = json.loads((RUNTIME_FIXTURES.parent / "nomad" / "node-read.json").read_text())
    body["Meta"] = {**(body.get("Meta") or {}), "rack": "r12"}
    assert node_from_nomad(body).meta["rack"] == "r12"
    body["Meta"] = None
    assert node_from_nomad(body).meta == {}
