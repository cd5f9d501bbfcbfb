"""Reading the node's model cache with huggingface_hub's own scanner.

The volume is mounted as the runtimes' HF_HOME, so the hub cache is `<HF_HOME>/hub`. A
snapshot counts only when it is complete: the scanner lists what is there, not what is
missing, and a download in progress looks like a valid repository with fewer files (the
symlink appears only once a blob is whole). So a repository with `.incomplete` blobs has no
complete snapshot, and a snapshot whose safetensors index names a shard it lacks is not
complete either (the check SGLang makes before it trusts a cache).
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

from huggingface_hub import CachedRevisionInfo, scan_cache_dir
from huggingface_hub.errors import CacheNotFound

from scheduler.reporter.cache_record import CacheReport, SnapshotReport

INDEX = "model.safetensors.index.json"
# The record shares Consul's 512 KB value limit with the GPUs: a few hundred snapshots at most.
REPORTED_SNAPSHOTS = 256
MAX_INDEX_BYTES = 64 * 2**20  # an index lists tensor names; larger is not an index


def _index(revision: CachedRevisionInfo) -> dict[str, object] | None:
    path = revision.snapshot_path / INDEX
    try:
        if path.stat().st_size > MAX_INDEX_BYTES:
            return None
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _total_size(index: dict[str, object] | None) -> int | None:
    metadata = index.get("metadata") if index else None
    size = metadata.get("total_size") if isinstance(metadata, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def _shards_present(revision: CachedRevisionInfo, index: dict[str, object] | None) -> bool:
    weight_map = index.get("weight_map") if index else None
    if not isinstance(weight_map, dict):
        return True
    held = {str(f.file_path.relative_to(revision.snapshot_path)) for f in revision.files}
    return all(str(shard) in held for shard in set(weight_map.values()))


def _snapshot(source: str, revision: CachedRevisionInfo) -> SnapshotReport | None:
    index = _index(revision)
    if not _shards_present(revision, index):
        return None
    used = max((f.blob_last_accessed for f in revision.files), default=0.0)
    return SnapshotReport(
        source=source,
        commit=revision.commit_hash,
        revisions=sorted(revision.refs),
        bytes=revision.size_on_disk,
        weights_bytes=_total_size(index),
        last_used=datetime.fromtimestamp(used, UTC) if used > 0 else None,
    )


def scan_model_cache(hf_home: Path, volume: str, limit: int = REPORTED_SNAPSHOTS) -> CacheReport:
    """The complete model snapshots under `<hf_home>/hub` (the `limit` used last) and the
    volume's free bytes."""
    errors: list[str] = []
    try:
        free: int | None = shutil.disk_usage(hf_home).free
    except OSError as err:
        return CacheReport(volume=volume, errors=[f"{hf_home}: {err.strerror or err}"])
    try:
        info = scan_cache_dir(hf_home / "hub")
    except CacheNotFound:
        return CacheReport(volume=volume, free_bytes=free)  # nothing downloaded yet
    incomplete = {f.file_path.parent.parent for f in info.incomplete_files}
    snapshots: list[SnapshotReport] = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model" or repo.repo_path in incomplete:
            continue
        for revision in sorted(repo.revisions, key=lambda r: r.commit_hash):
            found = _snapshot(repo.repo_id, revision)
            if found is not None:
                snapshots.append(found)
    if len(snapshots) > limit:
        errors.append(f"{len(snapshots)} snapshots; reported the {limit} used last")
        snapshots.sort(key=lambda s: s.last_used or datetime.min.replace(tzinfo=UTC))
        snapshots = snapshots[-limit:]
    errors += [str(w).splitlines()[0] for w in info.warnings][:32]
    return CacheReport(volume=volume, free_bytes=free, snapshots=snapshots, errors=errors)


class CacheScanner:
    """Scans at most every `interval_s` (a scan stats every file of the cache)."""

    def __init__(self, hf_home: Path, volume: str, interval_s: float = 60.0) -> None:
        self.hf_home, self.volume, self.interval_s = hf_home, volume, interval_s
        self._last: tuple[float, CacheReport] | None = None

    def read(self) -> CacheReport:
        now = time.monotonic()
        if self._last is None or now - self._last[0] >= self.interval_s:
            self._last = (now, scan_model_cache(self.hf_home, self.volume))
        return self._last[1]
