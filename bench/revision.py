"""Another revision of this repository as a tree of files, for the benches and tools that
run an older core beside this one (`--against`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def tree_of(against: str, root: Path) -> Iterator[Path]:
    """The folder `against` itself when it is a checkout, else the revision `against` of the
    repository at `root` exported (`git archive`) into a temporary folder, removed after."""
    if (Path(against) / "scheduler" / "core" / "decide.py").is_file():
        yield Path(against).resolve()
        return
    with tempfile.TemporaryDirectory(prefix="llm-scheduler-rev-") as tmp:
        archive = Path(tmp) / "tree.tar"
        with archive.open("wb") as f:
            done = subprocess.run(["git", "-C", str(root), "archive", against], stdout=f)
        if done.returncode != 0:
            raise SystemExit(f"--against {against}: not a revision of this repository")
        tree = Path(tmp) / "tree"
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        yield tree


def commit_of(root: Path, revision: str = "HEAD") -> str | None:
    """The short commit of `revision` (a folder: its HEAD), or None outside git."""
    where, rev = (revision, "HEAD") if Path(revision).is_dir() else (str(root), revision)
    done = subprocess.run(
        ["git", "-C", where, "rev-parse", "--short", rev],
        capture_output=True,
        text=True,
        check=False,
    )
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def run_in(tree: Path, child: str, arg: Any, env: dict[str, str], failed: str) -> Any:
    """Run the script `child` with this interpreter in `tree`, `arg` as its JSON argument and
    `env` over this process's environment; what it printed last, as JSON. A failure exits
    with `failed` and the end of its stderr."""
    done = subprocess.run(
        [sys.executable, "-c", child, json.dumps(arg)],
        cwd=tree,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {failed}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
