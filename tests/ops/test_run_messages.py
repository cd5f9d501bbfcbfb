"""`llm-scheduler run` as an operator starts it: a bad setting or a taken port is one line with
the fix (exit 2 and 1), `--version` answers, and the first lines say where it listens and that
it waits as a standby."""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from typer.testing import CliRunner

from scheduler.adapters.kv_layout import KVLayout
from scheduler.cli import app


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """`run` points structlog at the stderr it is given: the runner's, closed after the call.
    Later tests must not log into it."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


def _invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


def test_a_bad_setting_is_one_line_naming_the_variable_and_exits_2() -> None:
    result = _invoke("run", env={"LLM_SCHEDULER_PASS_INTERVAL_S": "abc"})
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: LLM_SCHEDULER_PASS_INTERVAL_S='abc': ")
    assert "unset it for the default (10.0)" in lines[0]


def test_every_bad_setting_gets_its_own_line() -> None:
    env = {"LLM_SCHEDULER_LISTEN_ADDR": "nowhere", "LLM_SCHEDULER_LOG_FORMAT": "yaml"}
    result = _invoke("run", env=env)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert any(line.startswith("error: LLM_SCHEDULER_LISTEN_ADDR='nowhere'") for line in lines)
    assert any(line.startswith("error: LLM_SCHEDULER_LOG_FORMAT='yaml'") for line in lines)


def test_an_unknown_log_format_option_is_refused() -> None:
    result = _invoke("run", "--log-format", "yaml")
    assert result.exit_code == 2
    assert "yaml" in result.stderr and "console" in result.stderr


def test_a_taken_port_is_one_line_with_the_fix_and_exits_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _invoke("run", env={"LLM_SCHEDULER_LISTEN_ADDR": f"127.0.0.1:{port}"})
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in lines[0]
    assert "LLM_SCHEDULER_LISTEN_ADDR" in lines[0]


def test_version_comes_from_the_package_metadata() -> None:
    from importlib.metadata import version

    result = _invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"llm-scheduler {version('llm-scheduler')}"


@pytest.fixture
def lock_held_elsewhere(cluster_env: Any, consul_kv: Any) -> Iterator[str]:
    session = consul_kv.session.create(name="other", ttl=60, lock_delay=0)
    assert consul_kv.kv.put(KVLayout().leader, "other", acquire=session)
    yield session
    consul_kv.session.destroy(session)


def test_start_up_says_where_it_listens_and_that_it_is_a_standby(
    lock_held_elsewhere: str,
) -> None:
    env = {**os.environ, "LLM_SCHEDULER_LISTEN_ADDR": "127.0.0.1:0", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler", "run"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stderr, selectors.EVENT_READ)
            deadline = time.monotonic() + 30
            while not any("standby" in line for line in seen):
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    break
                line = proc.stderr.readline()
                if not line:
                    break
                seen.append(line)
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()
    listening = [line for line in seen if "listening" in line]
    assert listening and "dashboard=http://127.0.0.1:" in listening[0], seen
    assert "127.0.0.1:0/" not in listening[0]  # the port it got, not the one asked for
    standby = [line for line in seen if "standby" in line]
    assert standby and lock_held_elsewhere in standby[0], seen


def test_logs_and_status_name_nodes_by_name_beside_the_id(cluster_env: Any, consul_kv: Any) -> None:
    import json

    prefix = "node-names-test/"
    model = {"name": "named", "owner": "org/a", "scaling": {"min": 1, "max": 1},
             "serve": {"source": "org/x"}, "profiles": [{"name": "one", "gpus": 1}]}  # fmt: skip
    consul_kv.kv.put(prefix + "models/named", json.dumps(model))
    env = {**os.environ, "LLM_SCHEDULER_KV_PREFIX": prefix}
    done = subprocess.run(
        [sys.executable, "-m", "scheduler", "run", "--once", "--log-format", "json"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    names = {n.id: n.name for n in cluster_env.fleet}
    started = [json.loads(x) for x in done.stderr.splitlines() if '"started"' in x]
    assert started, done.stderr[-2000:]
    shard = started[0]["shards"][0]
    assert shard["node_name"] == names[shard["node"]]

    # The next pass sees the replica and writes it into the status record.
    again = subprocess.run(
        [sys.executable, "-m", "scheduler", "run", "--once"], env=env, capture_output=True,
        timeout=120,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]

    status = CliRunner().invoke(app, ["status", "--json", "--prefix", prefix])
    assert status.exit_code == 0, status.output
    (replica,) = json.loads(status.stdout)["models"]["named"]["replicas"]
    assert replica["node_names"] == [names[node] for node in replica["nodes"]]


@pytest.mark.parametrize("command", [["snapshot"], ["dry-run"], ["why", "nothing"]])
def test_commands_that_read_the_settings_name_a_bad_one(
    cluster_env: Any, command: list[str]
) -> None:
    result = _invoke(*command, env={"LLM_SCHEDULER_MAX_VALUE_BYTES": "lots"})
    assert result.exit_code == 2, result.output
    assert "LLM_SCHEDULER_MAX_VALUE_BYTES='lots'" in result.stderr
    assert "Traceback" not in result.output
