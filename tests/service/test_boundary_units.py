"""Hostile values at the boundary where KV and Nomad input is parsed: each is refused or
warned about by key and field, and none can make arithmetic inside a pass raise."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from scheduler.adapters import catalog
from scheduler.adapters.catalog import GENERAL, read_catalog
from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.nomad_allocs import replica_from
from scheduler.adapters.nomad_jobs import CREATED_META, MODEL_META, REPLICA_META, owned_job
from scheduler.adapters.pass_memory import parse_reservations, parse_state
from scheduler.core.decide import decide
from scheduler.core.models import GPU, Demand, Model, Node, Profile, Replica, Scaling, Snapshot
from scheduler.core.validate import SnapshotError, parse_snapshot

LAYOUT = KVLayout()
NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
FAR = "9999-12-31T00:00:00Z"
SERVE = {"source": "org/model", "runtime": "vllm"}


def _entry(key: str, value: object) -> dict[str, object]:
    return {"Key": key, "Value": json.dumps(value).encode()}


def _model_value(**profile: object) -> dict[str, object]:
    return {
        "owner": "org/a",
        "scaling": {"min": 1, "max": 2},
        "profiles": [{"name": "p", **profile}],
        "serve": SERVE,
    }


def _errors(entries: list[dict[str, object]]) -> list[str]:
    return read_catalog(entries, LAYOUT).all_errors()


# ------------------------------------------------------------------ timestamps


def test_a_far_future_last_used_is_refused_by_key_and_field() -> None:
    cat = read_catalog([_entry(LAYOUT.demand_key("m"), {"last_used": FAR})], LAYOUT)
    assert cat.errors["m"] == [
        f"{LAYOUT.demand_key('m')}: last_used: 9999-12-31T00:00:00+00:00 is out of range "
        "(from 1970 to before 2200)"
    ]
    assert "m" in cat.bad_models and "m" not in cat.demand


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("demand", "m", "last_used"), FAR),
        (("holds", "r", "until"), FAR),
        (("retired", "m"), FAR),
        (("now",), FAR),
        (("replicas", 0, "created_at"), FAR),
        (("replicas", 0, "last_used_at"), "0001-01-01T00:00:00Z"),
        (("recent_desired", "m", 0, "at"), FAR),
    ],
)
def test_a_snapshot_file_with_a_timestamp_out_of_range_is_refused(
    path: tuple[str | int, ...], value: str
) -> None:
    data: dict[str, object] = {
        "now": NOW.isoformat(),
        "demand": {"m": {}},
        "holds": {"r": {"until": NOW.isoformat(), "for": "m"}},
        "retired": {"m": NOW.isoformat()},
        "replicas": [
            {"id": "r", "model": "m", "profile": "p", "state": "running", "created_at": "2026"}
        ],
        "recent_desired": {"m": [{"at": NOW.isoformat(), "count": 1}]},
    }
    data["replicas"][0]["created_at"] = NOW.isoformat()  # type: ignore[index]
    node: object = data
    for part in path[:-1]:
        node = node[part]  # type: ignore[index]
    node[path[-1]] = value  # type: ignore[index]
    with pytest.raises(SnapshotError) as err:
        parse_snapshot(data)
    where = ".".join(str(p) for p in path).replace(".0.", "[0].").replace(".0", "[0]")
    assert any(p.startswith(f"{where}: ") and "out of range" in p for p in err.value.problems)


def test_a_far_future_stamp_in_job_meta_or_an_allocation_cannot_stop_a_pass() -> None:
    job = owned_job(
        {
            "ID": "llm-m-r",
            "Meta": {MODEL_META: "m", REPLICA_META: "r", CREATED_META: FAR},
            "TaskGroups": [],
        }
    )
    assert job is not None and job.created_at == datetime(1970, 1, 1, tzinfo=UTC)
    alloc = {"ID": "a", "ClientStatus": "running", "DesiredStatus": "run", "ModifyTime": 10**30}
    rep = replica_from(job, [alloc], {"a"}, None)
    assert rep is not None and rep.ready_at == job.created_at


def test_a_huge_last_used_could_stop_every_pass() -> None:
    """Why the range exists: a pass over a last_used near the end of time raises."""
    model = Model(
        name="m",
        owner="o",
        scaling=Scaling(min=0, max=1, on_demand=True),
        profiles=[Profile(name="p")],
    )
    big = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)
    with pytest.raises(ValueError):
        Demand(inflight=1, last_used=big)
    # Built without validation, as nothing at the boundary does any more, it would raise.
    demand = Demand.model_construct(inflight=0, queued=0, last_used=big)
    rep = Replica(id="r", model="m", profile="p", state="running", created_at=NOW)
    snap = Snapshot(now=NOW, models=[model], replicas=[rep]).model_copy(
        update={"demand": {"m": demand}}
    )
    with pytest.raises(OverflowError):
        decide(snap)


# ------------------------------------------------------------------ strict numbers


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        (LAYOUT.demand_key("m"), {"inflight": "5"}, "inflight"),
        (LAYOUT.demand_key("m"), {"queued": "1"}, "queued"),
        (LAYOUT.settings, {"eviction_grace_s": "300"}, "eviction_grace_s"),
        (LAYOUT.model_key("m"), _model_value(gpus="2"), "profiles[0].gpus"),
        (LAYOUT.model_key("m"), _model_value(memory_gb="16"), "profiles[0].memory_gb"),
        (LAYOUT.quota_key("org/a"), {"limit": {"gpus": "4"}}, "limit.gpus"),
        (LAYOUT.quota_key("org/a"), {"weight": "2"}, "weight"),
        (LAYOUT.settings, {"max_victims": "3"}, "max_victims"),
        (LAYOUT.model_key("m"), {**_model_value(), "scaling": {"max": "2"}}, "scaling.max"),
        (
            LAYOUT.model_key("m"),
            {**_model_value(), "scaling": {"on_demand": "yes"}},
            "scaling.on_demand",
        ),
        (LAYOUT.model_key("m"), {**_model_value(), "load_grace_s": "600"}, "load_grace_s"),
    ],
)
def test_a_number_written_as_a_string_is_refused(key: str, value: object, field: str) -> None:
    errors = _errors([_entry(key, value)])
    assert any(e.startswith(f"{key}: {field}: ") for e in errors), errors


# ------------------------------------------------------------------ profiles

HOSTILE = ['a"b', "${x}", "../etc", "a\nb", "P", "x" * 70, ""]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_profile_name_follows_the_model_name_rule(name: str) -> None:
    errors = _errors([_entry(LAYOUT.model_key("m"), _model_value(name=name))])
    assert any(e.startswith(f"{LAYOUT.model_key('m')}: profiles[0].name: ") for e in errors)


@pytest.mark.parametrize("entry", ['H100"', "${x}", "../H100", "H100\n", ""])
def test_a_gpu_models_entry_in_a_safe_alphabet(entry: str) -> None:
    errors = _errors([_entry(LAYOUT.model_key("m"), _model_value(gpu_models=[entry]))])
    assert any("profiles[0].gpu_models[0]: " in e for e in errors), errors


@pytest.mark.parametrize(
    ("profile", "says"),
    [
        ({"mig_profile": "9g.99gb"}, "'9g.99gb' is no MIG profile of"),
        ({"mig_profile": "3g.40gb", "gpu_models": ["A100-SXM4-40GB"]}, "one of 1g.10gb"),
        ({"mig_profile": "1g.10gb${x}"}, "String should match pattern"),
    ],
)
def test_a_mig_profile_exists_on_a_gpu_the_profile_allows(profile: object, says: str) -> None:
    errors = _errors([_entry(LAYOUT.model_key("m"), _model_value(**profile))])  # type: ignore[arg-type]
    assert len(errors) == 1 and errors[0].startswith(f"{LAYOUT.model_key('m')}: profiles[0]")
    assert says in errors[0] and "\n" not in errors[0]


def test_known_mig_profiles_and_unknown_boards_pass() -> None:
    for profile in (
        {"mig_profile": "3g.40gb"},
        {"mig_profile": "3g.20gb", "gpu_models": ["A100"]},
        {"mig_profile": "2g.24gb", "gpu_models": ["L40S"]},  # a board the table lacks
    ):
        assert _errors([_entry(LAYOUT.model_key("m"), _model_value(**profile))]) == []  # type: ignore[arg-type]


def test_a_gpu_model_no_gpu_has_is_a_warning_in_the_models_status() -> None:
    cat = read_catalog(
        [_entry(LAYOUT.model_key("m"), _model_value(gpu_models=["H100", "L40S", "H1OO"]))],
        LAYOUT,
    )
    node = Node(
        id="n",
        name="n",
        gpus=[GPU(id="g", model="NVIDIA L40S", memory_gb=48)],
        cpu_cores=8,
        memory_gb=64,
    )
    catalog.warn_unknown_gpu_models(cat, list(cat.models.values()), [node], LAYOUT)
    assert cat.errors == {
        "m": [
            f"{LAYOUT.model_key('m')}: profiles[0].gpu_models[2]: 'H1OO' is part of no GPU "
            "model in the fleet or the MIG table (a warning: the profile waits for such a GPU)"
        ]
    }
    assert "m" in cat.models and not cat.bad_models  # read as written


# ------------------------------------------------------------------ demand keys

BAD_DEMAND_NAMES = ["名前", 'a"b', "${x}", "a\nb", "a\x00b", "Upper", "x" * 300, "x/y", "-a"]


@pytest.mark.parametrize("name", BAD_DEMAND_NAMES)
def test_a_demand_key_that_can_never_name_a_model_is_reported_by_key(name: str) -> None:
    cat = read_catalog([_entry(LAYOUT.demand_key(name), {"inflight": 1})], LAYOUT)
    assert catalog.model_name_problem(name) is not None
    lines = cat.errors[GENERAL]
    assert len(lines) == 1 and lines[0].startswith(LAYOUT.demand)
    assert "\n" not in lines[0] and "\x00" not in lines[0] and len(lines[0]) < 300
    assert not cat.demand and not cat.bad_models


def test_demand_for_a_model_not_in_the_catalog_is_one_line_in_errors() -> None:
    cat = read_catalog(
        [
            _entry(LAYOUT.model_key("m"), _model_value()),
            _entry(LAYOUT.demand_key("m"), {"inflight": 1}),
            _entry(LAYOUT.demand_key("ghost"), {"inflight": 1}),
        ],
        LAYOUT,
    )
    assert cat.errors == {
        GENERAL: [
            f"{LAYOUT.demand_key('ghost')}: no model 'ghost' in the catalog "
            f"({LAYOUT.model_key('ghost')}): this demand counts for nothing"
        ]
    }


# ------------------------------------------------------------------ the scheduler's state key


def test_a_bad_part_of_the_state_key_is_named_and_the_rest_stands() -> None:
    good = {"until": NOW.isoformat(), "for": "m"}
    state = {
        "holds": {"ok": good, "far": {"until": FAR, "for": "m"}, "naive": {**good, "until": "x"}},
        "preempted": {"r": "m"},
        "gone": {
            "models": {"kept": NOW.isoformat(), "old": "0001-01-01T00:00:00", "far": FAR},
            "demand": {"d": {"since": FAR, "last": {}}, "e": {"since": NOW.isoformat()}},
        },
    }
    problems: list[str] = []
    holds, preempted, gone = parse_state([_entry(LAYOUT.holds, state)], LAYOUT.holds, problems)
    assert set(holds) == {"ok"} and preempted == {"r": "m"}
    assert set(gone.models) == {"kept"} and gone.demand == {}
    key = LAYOUT.holds
    assert [p.split(": ")[1] for p in problems] == [
        "holds.far", "holds.naive", "gone.models.old", "gone.models.far",
        "gone.demand.d", "gone.demand.e",
    ]  # fmt: skip
    assert all(p.startswith(f"{key}: ") and "\n" not in p for p in problems)
    assert "out of range" in problems[0]


def test_a_state_key_of_the_wrong_shape_is_named() -> None:
    problems: list[str] = []
    holds, _, _ = parse_state([_entry(LAYOUT.holds, {"holds": "all"})], LAYOUT.holds, problems)
    assert holds == {} and problems == [f"{LAYOUT.holds}: holds: Input should be a JSON object"]


def test_bad_reservations_are_named_by_key_and_field_and_the_others_stand() -> None:
    good = {
        "since": NOW.isoformat(),
        "until": NOW.isoformat(),
        "shards": [{"node": "n0", "gpus": ["g0"], "cpu_cores": 4, "memory_gb": 16}],
        "quota": {"gpus": 1},
    }
    state = {
        "holds": {},
        "reservations": {
            "chat": [good, {**good, "until": FAR}, {**good, "shards": "all"}],
            "rag": {"since": NOW.isoformat()},
            "code": [{**good, "quota": {"gpus": -1}}],
        },
    }
    problems: list[str] = []
    kept = parse_reservations([_entry(LAYOUT.holds, state)], LAYOUT.holds, problems)
    assert list(kept) == ["chat"] and [r.quota.gpus for r in kept["chat"]] == [1]
    assert [p.split(": ")[1:3] for p in problems] == [
        ["reservations.chat[1]", "until"],
        ["reservations.chat[2]", "shards"],
        ["reservations.rag", "Input should be a JSON array"],
        ["reservations.code[0]", "quota.gpus"],
    ]
    assert all(p.startswith(f"{LAYOUT.holds}: ") and "\n" not in p for p in problems)
    # State written before reservations (or none at all): none, and nothing to say.
    for old in ({"holds": {}}, None):
        problems = []
        entries = [] if old is None else [_entry(LAYOUT.holds, old)]
        assert parse_reservations(entries, LAYOUT.holds, problems) == {} and problems == []


def test_reservations_go_through_the_state_key_as_the_plan_hands_them_on() -> None:
    from scheduler.adapters.pass_memory import Gone
    from scheduler.core.models import Plan, Reservation
    from scheduler.service.status_report import _state

    res = Reservation.model_validate(
        {"since": NOW, "until": NOW, "shards": [{"node": "n0", "gpus": ["g0"], "cpu_cores": 4}]}
    )
    plan = Plan(reservations={"chat": [res]})

    class Given:
        gone = Gone()

    state = json.loads(json.dumps(_state(Given(), plan, {})))  # type: ignore[arg-type]
    problems: list[str] = []
    assert parse_reservations([_entry(LAYOUT.holds, state)], LAYOUT.holds, problems) == {
        "chat": [res]
    }
    assert problems == []


def test_a_gpu_report_stamped_out_of_range_is_ignored_with_its_key_and_field() -> None:
    from scheduler.adapters.gpu_reports import parse_record

    report = {"node_id": "n", "reported_at": FAR, "gpus": []}
    line = parse_record("llm-scheduler/nodes/n/gpus", json.dumps(report))
    assert isinstance(line, str) and "field reported_at: " in line and "out of range" in line


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_any_demand_key_is_a_model_or_one_printable_line(name: str) -> None:
    assume(name and not name.endswith("/"))  # a folder marker, skipped as Consul's UI makes
    cat = read_catalog([_entry(LAYOUT.demand_key(name), {"inflight": 1})], LAYOUT)
    lines = cat.all_errors()
    assert len(lines) == 1  # not a model name, or no such model in the catalog
    assert lines[0].isprintable() and len(lines[0]) < 400


@settings(max_examples=100, deadline=None)
@given(st.datetimes(timezones=st.just(UTC)))
def test_any_last_used_is_refused_or_decided_on(stamp: datetime) -> None:
    value = {"last_used": stamp.isoformat()}
    cat = read_catalog([_entry(LAYOUT.demand_key("m"), value)], LAYOUT)
    if "m" not in cat.demand:
        assert cat.errors["m"][0].startswith(f"{LAYOUT.demand_key('m')}: last_used: ")
        return
    model = Model(
        name="m",
        owner="o",
        scaling=Scaling(min=0, max=1, on_demand=True),
        profiles=[Profile(name="p")],
    )
    decide(Snapshot(now=NOW, models=[model], demand=cat.demand))  # raises nothing
