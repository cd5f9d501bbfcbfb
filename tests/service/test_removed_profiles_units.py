"""When a profile went missing from its model while replicas of it run: noted by the snapshot
builder's memory, kept in the scheduler's state key across a restart, forgotten once the
profile is back or none of its replicas is left; a bad part of the key is named, not fatal."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from scheduler.adapters.kv_layout import KVLayout
from scheduler.adapters.pass_memory import Gone, PassMemory, parse_state
from scheduler.core.models import Model

LAYOUT = KVLayout()
NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def _model(*profiles: str) -> Model:
    return Model.model_validate(
        {
            "name": "m",
            "owner": "org/a",
            "scaling": {"min": 1, "max": 2},
            "profiles": [{"name": p, "gpus": 1} for p in profiles],
        }
    )


def _state(gone: Gone | dict[str, object]) -> list[dict[str, object]]:
    body = {"gone": gone.to_json() if isinstance(gone, Gone) else gone}
    return [{"Key": LAYOUT.holds, "Value": json.dumps(body).encode()}]


def test_a_removed_profile_is_dated_when_first_seen_and_kept_across_a_restart() -> None:
    memory = PassMemory()
    held = {("m", "old"), ("m", "new"), ("ghost", "x")}
    assert memory.track_profiles([_model("old", "new")], Gone(), held, NOW) == {}
    # "old" leaves the model: dated now, and not moved by later passes.
    seen = memory.track_profiles([_model("new")], Gone(), held, NOW)
    later = memory.track_profiles([_model("new")], Gone(), held, NOW + timedelta(seconds=30))
    assert seen == later == {"m": {"old": NOW}}
    # A new leader reads the date back from the state key the old one wrote.
    _, _, saved = parse_state(_state(memory.gone), LAYOUT.holds)
    fresh = PassMemory()
    again = fresh.track_profiles([_model("new")], saved, held, NOW + timedelta(seconds=60))
    assert again == {"m": {"old": NOW}}
    # Forgotten once its replicas are gone, or once the profile is back.
    assert fresh.track_profiles([_model("new")], saved, {("m", "new")}, NOW) == {}
    assert fresh.gone.profiles == {}
    back = PassMemory()
    assert back.track_profiles([_model("old", "new")], saved, held, NOW) == {}


def test_a_bad_part_of_the_removed_profiles_is_named_and_the_rest_stands() -> None:
    gone = {
        "profiles": {
            "m": {"old": NOW.isoformat()},
            "bad": {"p": "yesterday"},
            "odd": "all",
        }
    }
    problems: list[str] = []
    _, _, saved = parse_state(_state(gone), LAYOUT.holds, problems)
    assert saved.profiles == {"m": {"old": NOW}}
    assert [p.split(": ")[1] for p in problems] == ["gone.profiles.bad", "gone.profiles.odd"]
