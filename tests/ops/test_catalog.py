from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.cli import app
from scheduler.ops import catalog_io

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "consul" / "kv-seed.yaml"

GOOD = """
- name: tiny-1b
  owner: org/team-a
  class: opportunistic
  profiles: [{name: mig, mig_profile: 1g.10gb}]
  serve: {source: org/tiny-1b}
- name: mid-13b
  owner: org/team-b
  profiles: [{name: one, gpus: 1, gpu_memory_gb: 40}]
  serve: {source: org/mid-13b, runtime: sglang}
"""


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_every_bad_item_is_named_and_nothing_is_written(consul_kv: object, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "models:\n"
        "  - {name: ok-model, owner: org/a, profiles: [{name: p}], serve: {source: o/m}}\n"
        "  - {name: Bad_Name, owner: org/a, profiles: [{name: p}]}\n"
        "  - {name: typo, owner: org/a, clas: critical, profiles: [{name: p}]}\n"
    )
    code, out = _run("models", "apply", "-f", str(bad))
    assert code == 1
    assert "nothing was written" in out
    assert "models[1] (Bad_Name)" in out and "name" in out
    assert "models[2] (typo)" in out and "clas" in out
    _, entry = consul_kv.kv.get("llm-scheduler/models/ok-model")
    assert entry is None


def test_apply_creates_then_reports_unchanged_then_diffs_an_update(
    consul_kv: object, tmp_path: Path
) -> None:
    f = tmp_path / "models.yaml"
    f.write_text(GOOD)
    code, out = _run("models", "apply", "-f", str(f), "--dry-run", "--json")
    assert code == 0, out
    dry = json.loads(out)
    assert [c["action"] for c in dry["changes"]] == ["create", "create"]
    assert consul_kv.kv.get("llm-scheduler/models/tiny-1b")[1] is None

    code, out = _run("models", "apply", "-f", str(f))
    assert code == 0, out
    stored = json.loads(consul_kv.kv.get("llm-scheduler/models/tiny-1b")[1]["Value"])
    assert stored["class"] == "opportunistic"
    assert stored["profiles"][0]["mig_profile"] == "1g.10gb"

    code, out = _run("models", "apply", "-f", str(f), "--json")
    assert [c["action"] for c in json.loads(out)["changes"]] == ["unchanged", "unchanged"]

    f.write_text(GOOD.replace("gpu_memory_gb: 40", "gpu_memory_gb: 80"))
    code, out = _run("models", "apply", "-f", str(f))
    assert code == 0, out
    assert '-    "gpu_memory_gb": 40' in out.replace("\u2500", "") or "gpu_memory_gb" in out
    assert "update" in out

    code, out = _run("models", "list", "--json")
    names = [m["name"] for m in json.loads(out)["models"]]
    assert {"tiny-1b", "mid-13b"} <= set(names)


def test_cas_refuses_a_key_changed_since_it_was_read(consul_kv: object) -> None:
    kv = catalog_io.KVLayout("cas-test/")
    items = catalog_io.parse(
        catalog_io.load_documents(
            "x", text="{name: m1, owner: o, profiles: [{name: p}], serve: {source: o/m1}}"
        ),
        "models",
    )
    changes = catalog_io.plan_changes(consul_kv, kv, items)
    consul_kv.kv.put("cas-test/models/m1", "{}")  # someone else writes in between
    assert catalog_io.write_changes(consul_kv, changes) == ["cas-test/models/m1"]
    assert consul_kv.kv.get("cas-test/models/m1")[1]["Value"] == b"{}"


def test_the_example_kv_seed_applies(consul_kv: object) -> None:
    code, out = _run("models", "apply", "-f", str(SEED), "--prefix", "seed-test/", "--json")
    assert code == 0, out
    assert len(json.loads(out)["changes"]) >= 3
    code, out = _run("quotas", "apply", "-f", str(SEED), "--prefix", "seed-test/", "--json")
    assert code == 0, out
    owners = {c["name"] for c in json.loads(out)["changes"]}
    assert "org" in owners
    quota = json.loads(consul_kv.kv.get("seed-test/quotas/org")[1]["Value"])
    assert "owner" not in quota and "guarantee" in quota
    code, out = _run("quotas", "list", "--prefix", "seed-test/", "--json")
    assert code == 0 and not json.loads(out)["errors"]


def test_unreachable_consul_is_one_sentence_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSUL_HTTP_ADDR", "http://127.0.0.1:9")
    code, out = _run("models", "list")
    assert code == 1
    assert "cannot reach Consul at http://127.0.0.1:9: start it or set CONSUL_HTTP_ADDR" in out
    assert "Traceback" not in out


def test_a_file_that_is_not_yaml_names_the_line(tmp_path: Path) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text("models:\n  - name: [unclosed\n")
    code, out = _run("models", "apply", "-f", str(f))
    assert code == 1 and "not valid YAML or JSON at line" in out


def test_the_delete_diff_says_when_the_replicas_stop(consul_kv: object, tmp_path: Path) -> None:
    f = tmp_path / "models.yaml"
    f.write_text(GOOD)
    assert _run("models", "apply", "-f", str(f))[0] == 0
    consul_kv.kv.put("llm-scheduler/settings", json.dumps({"retire_grace_s": 900}))  # type: ignore[attr-defined]
    try:
        code, out = _run("models", "delete", "tiny-1b", "--dry-run")
    finally:
        consul_kv.kv.delete("llm-scheduler/settings")  # type: ignore[attr-defined]
        consul_kv.kv.delete("llm-scheduler/models/", recurse=True)  # type: ignore[attr-defined]
    assert code == 0, out
    header = next(line for line in out.splitlines() if line.startswith("+++"))
    assert header == (
        "+++ llm-scheduler/models/tiny-1b (deleted: its replicas stop 900 s after the "
        "scheduler sees it (retire_grace_s))"
    )
    assert "(file)" not in out
