"""The CLI as a new operator meets it: error texts intact, JSON errors for scripts,
permission errors instead of empty tables, `run --once` that does a pass, rows that stay whole
when piped, and docs whose commands parse."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from scheduler.cli import app
from scheduler.core.models import NAME_PATTERN, Quota

REPO = Path(__file__).resolve().parents[2]


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


# ------------------------------------------------------------------ 4: rich eats no [...]


def test_a_validation_message_keeps_its_regex(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: Bad_Name\nowner: org/a\nserve: {source: org/x}\nprofiles: [{name: p, gpus: 1}]\n"
    )
    result = _invoke("models", "apply", "-f", str(bad))
    assert result.exit_code == 1
    # The whole pattern, brackets included, exactly as pydantic wrote it.
    assert f"String should match pattern '{NAME_PATTERN}'" in result.stderr
    assert "[a-z0-9]" in NAME_PATTERN  # what rich markup used to eat


def test_text_from_consul_with_brackets_is_printed_as_is(consul_kv: object) -> None:
    prefix = "brackets-test/"
    record = {"desired": 1, "live": 0, "pending": "profile [bold]tp4[/bold]: short [4 GPUs]",
              "last_error": "start r-1: [red]refused[/]",
              "tried": [{"profile": "tp4", "short": {"gpus": 2}}]}  # fmt: skip
    consul_kv.kv.put(prefix + "status/m", json.dumps(record))  # type: ignore[attr-defined]
    result = _invoke("status", "--prefix", prefix)
    assert result.exit_code == 0, result.output
    assert "profile [bold]tp4[/bold]: short [4 GPUs]" in result.stdout
    assert "start r-1: [red]refused[/]" in result.stdout
    result = _invoke("why", "m", "--prefix", prefix)
    assert "pending: profile [bold]tp4[/bold]: short [4 GPUs]" in result.stdout


# ------------------------------------------------------------------ 5: honest answers


def test_models_list_names_broken_json_once(consul_kv: object) -> None:
    prefix = "broken-json-test/"
    consul_kv.kv.put(prefix + "models/broken", "{not json")  # type: ignore[attr-defined]
    result = _invoke("models", "list", "--prefix", prefix)
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stderr.splitlines() if "models/broken" in ln]
    assert len(lines) == 1, result.stderr
    assert "not valid JSON" in lines[0]
    assert "Field required" not in result.stderr
    data = json.loads(_invoke("models", "list", "--prefix", prefix, "--json").stdout)
    assert data["models"] == [] and len(data["errors"]) == 1
    assert "not valid JSON" in data["errors"][0]


def test_json_errors_are_a_json_object_on_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: Bad_Name\nowner: org/a\nserve: {source: org/x}\nprofiles: [{name: p, gpus: 1}]\n"
    )
    result = _invoke("models", "apply", "-f", str(bad), "--json")
    assert result.exit_code == 1
    error = json.loads(result.stdout)
    assert error["exit_code"] == 1 and "nothing was written" in error["error"]
    assert error["details"] == [
        f"item (Bad_Name): name: String should match pattern '{NAME_PATTERN}'"
    ]
    monkeypatch.setenv("CONSUL_HTTP_ADDR", "127.0.0.1:9")
    for args in (("status",), ("models", "list"), ("quotas", "list"), ("why", "m")):
        result = _invoke(*args, "--json")
        assert result.exit_code == 1
        assert json.loads(result.stdout)["error"].startswith("cannot reach Consul at"), args
    # Without --json stdout stays empty: the sentence goes to stderr.
    result = _invoke("status")
    assert result.stdout == "" and "cannot reach Consul" in result.stderr


@pytest.fixture
def acl_consul(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A Consul stand-in with ACLs on (default deny) and a full catalog, reached with no token."""
    from llm_scheduler_standins.consul import ConsulACL, ConsulStandin, TokenSpec

    admin = TokenSpec(accessor_id="admin", key_prefix_rules={"": "write"}, session_write=True)
    reader = TokenSpec(accessor_id="reader", key_prefix_rules={"llm-scheduler/": "read"})
    partial = TokenSpec(
        accessor_id="partial",
        key_prefix_rules={"llm-scheduler/": "read", "llm-scheduler/models/secret": "deny"},
    )
    tokens = {"admin": admin, "reader": reader, "partial": partial}
    standin = ConsulStandin(acl=ConsulACL(tokens=tokens))
    model = {
        "name": "m",
        "owner": "o",
        "serve": {"source": "org/m"},
        "profiles": [{"name": "p", "gpus": 1}],
    }
    standin.kv_put("llm-scheduler/models/m", json.dumps(model))
    standin.kv_put("llm-scheduler/models/secret", json.dumps({**model, "name": "secret"}))
    standin.kv_put("llm-scheduler/quotas/o", json.dumps({"guarantee": {"gpus": 1}}))
    standin.kv_put("llm-scheduler/status/m", json.dumps({"desired": 1, "live": 0}))
    server = standin.start()
    monkeypatch.setenv("CONSUL_HTTP_ADDR", server.url)
    monkeypatch.delenv("CONSUL_HTTP_TOKEN", raising=False)
    monkeypatch.delenv("LLM_SCHEDULER_KV_PREFIX", raising=False)
    yield server.url
    standin.close()


def test_no_token_is_a_permission_error_not_an_empty_table(
    acl_consul: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Consul filters a recursive read by ACL and answers 404 when nothing is left (KVS.List
    # in hashicorp/consul agent/consul/kvs_endpoint.go), so the listing alone looks empty.
    for args, key in (
        (("models", "list"), "llm-scheduler/models/"),
        (("quotas", "list"), "llm-scheduler/quotas/"),
        (("status",), "llm-scheduler/status/"),
    ):
        result = _invoke(*args)
        assert result.exit_code == 1, (args, result.output)
        assert f"refused to read {key} (permission denied)" in result.stderr
        assert "CONSUL_HTTP_TOKEN" in result.stderr
        assert json.loads(_invoke(*args, "--json").stdout)["exit_code"] == 1
    # With a token that may read, the same commands list what is there.
    monkeypatch.setenv("CONSUL_HTTP_TOKEN", "reader")
    result = _invoke("models", "list", "--json")
    assert result.exit_code == 0, result.output
    assert [m["name"] for m in json.loads(result.stdout)["models"]] == ["m", "secret"]
    assert json.loads(result.stdout)["hidden_by_acl"] is False
    assert _invoke("status", "--json").exit_code == 0
    # A token that may read only some of them: the list says it is not complete.
    monkeypatch.setenv("CONSUL_HTTP_TOKEN", "partial")
    result = _invoke("models", "list")
    assert result.exit_code == 0 and "secret" not in result.stdout
    assert "Consul hid some keys under llm-scheduler/models/ from this token" in result.stderr
    assert json.loads(_invoke("models", "list", "--json").stdout)["hidden_by_acl"] is True


def test_why_before_the_first_pass_says_what_the_next_pass_would_do(
    consul_kv: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = "why-first-test/"
    monkeypatch.setenv("LLM_SCHEDULER_KV_PREFIX", prefix)
    model = {"name": "chat", "owner": "org/a", "scaling": {"min": 1, "max": 1},
             "serve": {"source": "org/chat"}, "profiles": [{"name": "one", "gpus": 1}]}  # fmt: skip
    consul_kv.kv.put(prefix + "models/chat", json.dumps(model))  # type: ignore[attr-defined]
    result = _invoke("why", "chat")
    assert result.exit_code == 0, result.output
    assert "0 replicas live, 1 wanted" in result.stdout
    assert "has what it wants" not in result.stdout
    assert "the next pass would start 1 replica (profile one)" in result.stdout
    data = json.loads(_invoke("why", "chat", "--json").stdout)
    assert data["pending"] is None and data["state"].startswith("the next pass would start")


def test_why_not_pending_covers_each_case() -> None:
    from scheduler.core.models import StopAction
    from scheduler.ops.status_view import why_not_pending

    assert why_not_pending(2, 2, 0, []) == "it has what it wants"
    assert why_not_pending(2, 2, 1, []) == (
        "it has what it wants; 1 replica still starting, not ready yet"
    )
    assert why_not_pending(2, 1, 0, []).startswith("1 more wanted; the next pass starts them")
    assert why_not_pending(1, 3, 0, []) == "2 more than wanted; they will be stopped"
    stop = StopAction(replica="r-1", model="m", reason="scale down: 2 live, 1 desired")
    assert why_not_pending(1, 2, 0, [stop]).startswith("the next pass would stop 1 replica")


# ------------------------------------------------------------------ 6: run --once


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *args],
        capture_output=True, text=True, timeout=60, env={**os.environ, **env}, check=False,
    )  # fmt: skip


def test_run_once_takes_the_lock_and_does_one_pass(cluster: object) -> None:
    import nomad
    from scheduler.ops.connect import consul_client

    prefix = "once-test/"
    env = {"CONSUL_HTTP_ADDR": cluster.consul_url, "NOMAD_ADDR": cluster.nomad_url,  # type: ignore[attr-defined]
           "LLM_SCHEDULER_KV_PREFIX": prefix}  # fmt: skip
    kv = consul_client(cluster.consul_url).kv  # type: ignore[attr-defined]
    model = {"name": "once", "owner": "org/a", "scaling": {"min": 1, "max": 1},
             "serve": {"source": "org/once"}, "profiles": [{"name": "one", "gpus": 1}]}  # fmt: skip
    kv.put(prefix + "models/once", json.dumps(model))

    done = _cli("run", "--once", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "one pass as leader: 1 start(s)" in done.stdout
    jobs = nomad.Nomad(address=cluster.nomad_url).jobs.get_jobs()  # type: ignore[attr-defined]
    assert any(j["ID"].startswith("llm-once-") for j in jobs)
    _, record = kv.get(prefix + "status/once")
    assert record is not None and json.loads(record["Value"])["desired"] == 1
    _, lock = kv.get(prefix + "leader")
    assert lock is None or not lock.get("Session"), "the lock is released after the pass"

    # Another scheduler holds the lock: say so, change nothing.
    consul = consul_client(cluster.consul_url)  # type: ignore[attr-defined]
    session = consul.session.create(ttl=30, lock_delay=0)
    assert kv.put(prefix + "leader", "other", acquire=session)
    try:
        done = _cli("run", "--once", env=env)
    finally:
        consul.session.destroy(session)
    assert done.returncode == 1
    assert f"could not take the leader lock {prefix}leader" in done.stderr
    assert "one pass as leader" not in done.stdout


# ------------------------------------------------------------------ 7: inputs that mislead


def test_a_guarantee_larger_than_its_limit_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"guarantee.gpus \(8\) is larger than limit.gpus \(4\)"):
        Quota.model_validate({"owner": "o", "guarantee": {"gpus": 8}, "limit": {"gpus": 4}})
    Quota.model_validate({"owner": "o", "guarantee": {"gpus": 4}, "limit": {"gpus": 4}})
    Quota.model_validate({"owner": "o", "guarantee": {"gpus": 8}, "limit": {"cpu_cores": 4}})
    f = tmp_path / "q.yaml"
    f.write_text("owner: org/x\nguarantee: {memory_gb: 64}\nlimit: {memory_gb: 32}\n")
    result = _invoke("quotas", "apply", "-f", str(f), "--dry-run")
    assert result.exit_code == 1
    assert "guarantee.memory_gb (64) is larger than limit.memory_gb (32)" in result.stderr


def test_the_service_names_the_quota_key_whose_guarantee_passes_its_limit() -> None:
    from scheduler.adapters.catalog import read_catalog
    from scheduler.adapters.kv_layout import KVLayout

    body = json.dumps({"guarantee": {"gpus": 8}, "limit": {"gpus": 4}}).encode()
    cat = read_catalog([{"Key": "llm-scheduler/quotas/org/x", "Value": body}], KVLayout())
    assert cat.bad_quotas == {"org/x"} and "org/x" not in cat.quotas
    [line] = cat.all_errors()
    assert line.startswith("llm-scheduler/quotas/org/x")
    assert "guarantee.gpus (8) is larger than limit.gpus (4)" in line


def test_want_given_twice_keeps_both_and_a_bare_profile_asks_for_a_count() -> None:
    gpu = "NVIDIA A100-SXM4-80GB"
    result = _invoke("mig", "plan", "--gpu", gpu, "--want", "3g.40gb=1", "--want", "1g.10gb=2")
    assert result.exit_code == 0, result.output
    profiles = [i["profile"] for i in json.loads(result.stdout)["instances"]]
    assert sorted(profiles) == ["1g.10gb", "1g.10gb", "3g.40gb"]
    result = _invoke("mig", "plan", "--gpu", gpu, "--want", "3g.40gb=1", "--want", "3g.40gb=2")
    assert result.exit_code == 2 and "names 3g.40gb twice" in result.stderr
    result = _invoke("mig", "plan", "--gpu", gpu, "--want", "3g.40gb")
    assert result.exit_code == 2
    assert "--want 3g.40gb has no count: write 3g.40gb=COUNT, e.g. 3g.40gb=1" in result.stderr


def _doc_commands() -> list[tuple[str, list[str]]]:
    """Every `llm-scheduler ...` line in the README's and docs' shell blocks, as argv."""
    found = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        blocks = re.findall(r"```sh\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
        for line in "\n".join(blocks).splitlines():
            for part in re.split(r"&&|\|", line):
                words = shlex.split(part, comments=True)
                if not words or not words[0].endswith("llm-scheduler"):
                    continue
                argv = words[1:]
                argv = argv[: argv.index(">")] if ">" in argv else argv
                found.append((f"{doc.name}: {part.strip()}", argv))
    return found


def test_every_command_in_the_docs_parses() -> None:
    commands = _doc_commands()
    assert any(argv[:2] == ["mig", "plan"] for _, argv in commands)
    root = typer.main.get_command(app)
    for where, argv in commands:
        command: Any = root
        args = list(argv)
        while getattr(command, "commands", None) is not None:  # a group: walk to the command
            sub = command.commands.get(args[0]) if args else None
            assert sub is not None, f"{where}: no such command"
            command, args = sub, args[1:]
        try:  # what click checks before running: options, required ones, argument counts
            command.make_context(command.name or "", args)
        except Exception as exc:
            text = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            raise AssertionError(f"{where}: {text}") from exc


# ------------------------------------------------------------------ 9: piped output


def test_piped_tables_keep_one_row_per_line(
    consul_kv: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    prefix = "wide-test/"
    pending = "profile tp4: no node with 4 free H100 GPUs (6 nodes short of GPUs, 2 draining)"
    record = {"desired": 2, "live": 1, "pending": pending, "replicas": [],
              "last_error": "start r-9: Nomad refused the job: " + "x" * 60}  # fmt: skip
    consul_kv.kv.put(prefix + "status/a-model-with-a-long-name", json.dumps(record))  # type: ignore[attr-defined]
    result = _invoke("status", "--prefix", prefix)
    assert result.exit_code == 0, result.output
    row = [ln for ln in result.stdout.splitlines() if "a-model-with-a-long-name" in ln]
    assert len(row) == 1 and pending in row[0] and "x" * 60 in row[0], result.stdout
