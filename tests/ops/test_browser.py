"""The dashboard page in headless Chromium (Debian's `chromium` package; .ci/run installs it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from llm_scheduler_standins.fleet import builtin_fleet
from scheduler.core.models import ModelStatus, Node, Plan, Replica, Shard, Snapshot
from scheduler.demo import catalog
from scheduler.ops.dashboard import DashboardObserver, natural_key, serve_ops
from scheduler.ops.palette import contrast

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
    ),
]


def _chromium(*args: str, tmp: Path) -> str:
    assert CHROMIUM
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--no-first-run", "--hide-scrollbars", f"--user-data-dir={tmp / 'profile'}", *args,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _demo_fleet_state() -> tuple[Snapshot, Plan]:
    """The demo's ten models spread over the stand-ins' fleet, MIG slices included."""
    nodes = [Node.model_validate(n.model_dump()) for n in builtin_fleet()]
    free = {n.id: [g.id for g in n.gpus if g.mig is None] for n in nodes}
    slices = {(s.profile, s.id): n.id for n in nodes for g in n.gpus for s in g.mig or []}
    replicas = []
    for i, model in enumerate(sorted(catalog.MODELS, key=lambda m: m.name)):
        p = model.profiles[0]
        if p.is_mig:
            sid = next(s for (prof, s) in slices if prof == p.mig_profile)
            node = slices.pop((p.mig_profile, sid))
            shards = [Shard(node=node, gpus=[sid])]
        else:
            node = next(n for n, gpus in free.items() if len(gpus) >= p.gpus)
            take, free[node] = free[node][: p.gpus], free[node][p.gpus :]
            shards = [Shard(node=node, gpus=take)]
        state = "starting" if i % 4 == 3 else "running"
        replicas.append(Replica(id=f"r-{i}", model=model.name, profile=p.name, state=state,
                                created_at=NOW, shards=shards))  # fmt: skip
    snap = Snapshot(now=NOW, nodes=nodes, models=catalog.MODELS, replicas=replicas)
    statuses = {m.name: ModelStatus(desired=1, live=1) for m in catalog.MODELS}
    statuses["gemma-2-27b"] = ModelStatus(desired=2, live=1, pending="profile tp2: no room")
    return snap, Plan(models=statuses)


def _rgb_hex(css: str) -> str:
    r, g, b = (int(v) for v in re.findall(r"\d+", css)[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


def test_dashboard_renders_the_fleet_readably(tmp_path: Path) -> None:
    dash = DashboardObserver()
    snap, plan = _demo_fleet_state()
    dash.pass_finished(snap, plan, 0.01, [])
    server = serve_ops(dash, port=0)
    try:
        page = server.url + "/?check"
        dom = _chromium("--virtual-time-budget=5000", "--dump-dom", page, tmp=tmp_path)
        shots = Path(os.environ.get("LLM_SCHEDULER_SCREENSHOTS", tmp_path))
        shots.mkdir(parents=True, exist_ok=True)
        shot = shots / "dashboard.png"
        _chromium(
            "--virtual-time-budget=5000", "--window-size=1600,1000", f"--screenshot={shot}",
            page, tmp=tmp_path,
        )  # fmt: skip
    finally:
        server.stop()
    assert "waiting for the first pass" not in dom
    # Nodes in the terminal view's order: natural by name, as the state lists them.
    shown = re.findall(r'data-node="([^"]+)"', dom)
    assert shown == [n["name"] for n in dash.state()["nodes"]]
    assert shown == sorted((n.name for n in snap.nodes), key=natural_key)
    # Every model its own colour, one colour per model, and labels that read on it.
    painted = re.findall(r'data-holder="([^"]+)"[^>]*?style="background: (rgb\([^)]*\)); '
                         r'color: (rgb\([^)]*\));"', dom)  # fmt: skip
    by_model: dict[str, set[str]] = {}
    for holder, bg, fg in painted:
        by_model.setdefault(holder, set()).add(_rgb_hex(bg))
        assert contrast(_rgb_hex(bg), _rgb_hex(fg)) >= 4.5, (holder, bg, fg)
    assert set(by_model) == {m.name for m in catalog.MODELS}
    assert all(len(c) == 1 for c in by_model.values()), by_model
    assert len({next(iter(c)) for c in by_model.values()}) == len(by_model)
    # Held GPUs: as many boxes as devices each model holds, whole or MIG.
    for rep in snap.replicas:
        held = sum(len(s.gpus) for s in rep.shards)
        assert dom.count(f'data-holder="{rep.model}"') == held, rep.model
    # No label is cut: not the model names, not the MIG profiles.
    assert 'data-clipped="true"' not in dom
    for node in snap.nodes:
        for gpu in node.gpus:
            for s in gpu.mig or []:
                assert f'<span class="profile">{s.profile}</span>' in dom
    assert 'data-pending="gemma-2-27b"' in dom
    assert shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _everything_state() -> tuple[DashboardObserver, Snapshot]:
    """A retiring model, a replica over two nodes, bad input, a model waiting for 11 minutes,
    and an hour of passes behind them."""
    clock = [NOW.timestamp() - 3600]
    dash = DashboardObserver(clock=lambda: clock[0])
    snap, plan = _demo_fleet_state()
    busy = {d for r in snap.replicas for s in r.shards for d in s.gpus}
    free = {n.id: [g.id for g in n.gpus if g.mig is None and g.id not in busy] for n in snap.nodes}
    h1, h2 = [n for n in snap.nodes if len(free[n.id]) >= 2][:2]
    split = Replica(id="r-multi", model="gemma-2-27b", profile="tp2", state="running",
                    created_at=NOW, shards=[Shard(node=n.id, gpus=free[n.id][:2])
                                            for n in (h1, h2)])  # fmt: skip
    retiring = "qwen-retired-model-7b"
    third = snap.nodes[2]
    old = Replica(id="r-old", model=retiring, profile="p", state="running", created_at=NOW,
                  shards=[Shard(node=third.id, gpus=[third.gpus[-1].id])])  # fmt: skip
    snap = snap.model_copy(update={"replicas": [*snap.replicas, split, old],
                                   "retired": {retiring: NOW}})  # fmt: skip
    errors = ["llm-scheduler/models/broken: class: Input should be 'critical', 'standard' "
              "or 'opportunistic'"]  # fmt: skip
    quiet = plan.model_copy(update={"models": {**plan.models,
        "gemma-2-27b": ModelStatus(desired=2, live=2)}})  # fmt: skip
    for minute in range(60):
        dash.pass_finished(snap, quiet if minute < 48 else plan, 0.02 + minute / 1000, errors)
        clock[0] += 60
    return dash, snap


def test_dashboard_shows_retiring_multi_node_bad_input_and_history_at_800px(
    tmp_path: Path,
) -> None:
    dash, snap = _everything_state()
    server = serve_ops(dash, port=0)
    try:
        page = server.url + "/?check"
        dom = _chromium("--virtual-time-budget=5000", "--window-size=800,2400", "--dump-dom",
                        page, tmp=tmp_path)  # fmt: skip
        shots = Path(os.environ.get("LLM_SCHEDULER_SCREENSHOTS", tmp_path))
        shots.mkdir(parents=True, exist_ok=True)
        shot = shots / "dashboard-800.png"
        _chromium("--virtual-time-budget=5000", "--window-size=800,2400", f"--screenshot={shot}",
                  page, tmp=tmp_path)  # fmt: skip
    finally:
        server.stop()
    # The retiring model: its GPU on the map, its name in the legend and the table.
    assert dom.count('data-holder="qwen-retired-model-7b"') == 1
    assert 'data-legend="qwen-retired-model-7b"' in dom
    assert re.search(r'data-model="qwen-retired-model-7b".*?retiring since 10:00', dom, re.S)
    # The replica over two nodes: one entry naming both, its four GPUs marked as its shards.
    multi = re.search(r'<tr data-multi="r-multi">.*?</tr>', dom, re.S)
    nodes = [n.name for n in snap.nodes for r in snap.replicas if r.id == "r-multi"
             for s in r.shards if s.node == n.id]  # fmt: skip
    assert multi and f"{nodes[0]}: 2 GPUs + {nodes[1]}: 2 GPUs" in multi[0]
    assert len(re.findall(r'data-replica="r-multi" data-shard="1/2"', dom)) == 2
    assert len(re.findall(r'data-replica="r-multi" data-shard="2/2"', dom)) == 2
    # What `status` lists as bad input.
    assert "llm-scheduler/models/broken: class: Input should be" in dom
    # How long the pending model has waited, and an hour of history.
    assert re.search(r'data-pending="gemma-2-27b".*?waiting 11 min', dom, re.S)
    for series in ("gpus_in_use", "pending", "pass_s"):
        assert f'data-series="{series}" data-points="60"' in dom
    # At 800 px no name is broken over lines or cut.
    assert 'data-wrapped="true"' not in dom
    assert 'data-clipped="true"' not in dom
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
