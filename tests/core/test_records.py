"""The contract's records (contract_base.Record): pydantic dataclasses that validate, refuse and
serialise as the BaseModels they replaced did, with slots for the pass to read."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from scheduler.core.models import GPU, MigSlice, Model, Node, Profile, Replica, Scaling, Shard
from scheduler.core.validate import SnapshotError, format_validation_error, parse_snapshot

MODEL = {
    "name": "chat",
    "owner": "org/team",
    "class": "critical",
    "scaling": {"min": 1, "max": 3},
    "profiles": [{"name": "one", "gpus": 1}],
}
NODE = {
    "id": "n1",
    "name": "node-1",
    "cpu_cores": 64,
    "memory_gb": 512,
    "gpus": [
        {"id": "g0", "model": "H100", "memory_gb": 80},
        {"id": "g1", "model": "A100", "memory_gb": 80, "mig": [
            {"id": "g1-s0", "profile": "3g.40gb", "memory_gb": 40},
        ]},
    ],
}  # fmt: skip


@pytest.mark.parametrize("cls", [MigSlice, GPU, Node, Shard, Replica, Scaling, Profile, Model])
def test_the_records_the_pass_reads_have_slots_not_a_dict(cls: type) -> None:
    """What makes them fast to read: no instance dict, no __getattr__ hook before it."""
    assert "__slots__" in vars(cls)
    assert not any("__getattr__" in vars(k) for k in cls.__mro__)


def test_a_model_reads_the_operator_spelling_and_refuses_a_typo() -> None:
    m = Model.model_validate(MODEL)
    assert m.class_ == "critical" and m.scaling.min == 1
    assert m.model_dump(by_alias=True)["class"] == "critical"
    assert Model.model_validate(m.model_dump(by_alias=True)) == m
    with pytest.raises(ValidationError, match="scalling") as typo:
        Model.model_validate({**MODEL, "scalling": {"min": 1}})
    # Worded as a BaseModel words it (Quota, Settings and Demand still are BaseModels).
    assert format_validation_error(typo.value, "models/chat") == [
        "models/chat: scalling: Extra inputs are not permitted"
    ]
    with pytest.raises(ValidationError, match="min"):
        Model.model_validate({**MODEL, "scaling": {"min": 4, "max": 3}})


def test_a_node_ignores_what_a_newer_adapter_adds_and_checks_its_devices() -> None:
    node = Node.model_validate({**NODE, "rack": "r7"})
    assert not hasattr(node, "rack")
    assert node.gpus[1].mig is not None and node.gpus[1].mig[0].profile == "3g.40gb"
    twice = {**NODE, "gpus": [NODE["gpus"][0], NODE["gpus"][0]]}  # type: ignore[index]
    with pytest.raises(ValidationError, match="appears twice"):
        Node.model_validate(twice)


def test_records_are_frozen_and_model_copy_changes_only_the_copy() -> None:
    node = Node.model_validate(NODE)
    with pytest.raises(AttributeError):
        node.eligible = False  # type: ignore[misc]
    drained = node.model_copy(update={"eligible": False})
    assert (node.eligible, drained.eligible) == (True, False)
    assert drained.gpus is node.gpus and drained.id == node.id
    with pytest.raises(TypeError, match="no field 'eligble'"):
        node.model_copy(update={"eligble": False})


def test_a_snapshot_round_trips_through_json_with_records_inside() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
    snap = parse_snapshot(
        {
            "now": now,
            "nodes": [NODE],
            "models": [MODEL],
            "replicas": [
                {
                    "id": "r1",
                    "model": "chat",
                    "profile": "one",
                    "state": "running",
                    "created_at": now,
                    "shards": [{"node": "n1", "gpus": ["g0"]}],
                }
            ],
        }
    )
    assert isinstance(snap.replicas[0], Replica) and isinstance(snap.replicas[0].shards[0], Shard)
    again = parse_snapshot(snap.model_dump(mode="json", by_alias=True))
    assert again == snap
    assert again.model_dump_json(by_alias=True) == snap.model_dump_json(by_alias=True)


def test_a_bad_snapshot_names_every_bad_field_of_its_records() -> None:
    node = {**NODE, "cpu_cores": -1, "rack": "r7"}  # rack: ignored (machine-written)
    model = {**MODEL, "profiles": [{"name": "one", "gpuz": 2}]}
    now = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
    with pytest.raises(SnapshotError) as bad:
        parse_snapshot({"now": now, "nodes": [node], "models": [model]})
    assert bad.value.problems == [
        "nodes[0].cpu_cores: Input should be greater than or equal to 0",
        "models[0].profiles[0].gpuz: Extra inputs are not permitted",
    ]
