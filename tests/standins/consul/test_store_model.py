"""The KV store against a dict model under random operation sequences: same contents, and the
index a recursive watch sees never goes down (tombstones), and advances on every real change."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llm_scheduler_standins.consul.store import ConsulStore

KEYS = st.sampled_from(["a/1", "a/2", "a/b/3", "b/1", "ab"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.binary(max_size=3)),
        st.tuples(st.just("delete"), KEYS, st.just(b"")),
        st.tuples(st.just("delete-tree"), st.sampled_from(["a/", "b", ""]), st.just(b"")),
        st.tuples(st.just("cas-create"), KEYS, st.binary(max_size=3)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(OPS)
def test_store_matches_a_dict_and_prefix_index_is_monotonic(
    ops: list[tuple[str, str, bytes]],
) -> None:
    store = ConsulStore()
    model: dict[str, bytes] = {}
    last_prefix_index = store.kv.prefix_index("a/")
    for verb, key, value in ops:
        before = {k: v for k, v in model.items() if k.startswith("a/")}
        if verb == "set":
            store.kv_set(key, value)
            model[key] = value
        elif verb == "delete":
            store.kv_delete(key)
            model.pop(key, None)
        elif verb == "delete-tree":
            store.kv_delete(key, recurse=True)
            model = {k: v for k, v in model.items() if not k.startswith(key)}
        else:
            created = store.kv_cas(key, value, 0, 0)
            assert created == (key not in model)
            model.setdefault(key, value)
        assert {e.key: e.value for e in store.kv.entries.values()} == model
        after = {k: v for k, v in model.items() if k.startswith("a/")}
        index = store.kv.prefix_index("a/")
        assert index >= last_prefix_index
        if after != before and (before or after):
            assert index > last_prefix_index, (verb, key)
        last_prefix_index = index
        assert store.index >= 1
