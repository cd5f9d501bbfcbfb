"""The dashboard page in headless Chromium (Debian's `chromium` package; .ci/run installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ops_helpers import snapshot_and_plan

from scheduler.ops.dashboard import DashboardObserver, serve_ops

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


def test_dashboard_renders_the_stand_in_fleet(tmp_path: Path) -> None:
    dash = DashboardObserver()
    snap, plan = snapshot_and_plan()
    dash.pass_finished(snap, plan, 0.01, [])
    server = serve_ops(dash, port=0)
    try:
        dom = _chromium("--virtual-time-budget=5000", "--dump-dom", server.url + "/", tmp=tmp_path)
        shots = Path(os.environ.get("LLM_SCHEDULER_SCREENSHOTS", tmp_path))
        shots.mkdir(parents=True, exist_ok=True)
        shot = shots / "dashboard.png"
        _chromium(
            "--virtual-time-budget=5000", "--window-size=1400,1000", f"--screenshot={shot}",
            server.url + "/", tmp=tmp_path,
        )  # fmt: skip
    finally:
        server.stop()
    # The JS ran and drew every node of the stand-ins' fleet, with GPUs coloured by holder.
    for node in snap.nodes:
        assert f'data-node="{node.name}"' in dom
    assert dom.count('data-holder="llama-70b"') == 4
    assert 'data-pending="big-405b"' in dom
    assert "waiting for the first pass" not in dom
    assert shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
