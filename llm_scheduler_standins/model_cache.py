"""The stand-in nodes' model caches: how long a replica takes to be ready on a node that holds
its weights and on one that must download them first, and the caches as the Hugging Face hub
lays them out on disk, for the reporter to scan.

A replica on a node whose cache holds its repository loads the weights from local disk
(`load_gbps`); elsewhere it downloads them first (`download_gbps`), after which the node holds
them: the next replica there starts warm, as on a real node with a model-cache host volume.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_scheduler_standins.fleet_model import CachedWeights, ModelCache, Node

GB = 10**9


@dataclass(frozen=True)
class WeightsTiming:
    """Rates in GB/s; `default_bytes`: the weights of a model no cache entry sizes."""

    download_gbps: float = 1.0
    load_gbps: float = 5.0
    default_bytes: int = 16 * GB

    def ready_after_s(self, weight_bytes: int, cached: bool) -> float:
        load = weight_bytes / GB / self.load_gbps
        return load if cached else weight_bytes / GB / self.download_gbps + load


def model_source(job: dict[str, Any], group_name: str) -> str:
    """The repository a replica serves or a download fetches: vLLM's first argument, SGLang's
    `--model-path`, `hf download`'s repository, else the job's model name (the scheduler's
    jobs always carry one or the other)."""
    group: dict[str, Any] = next(
        (g for g in job.get("TaskGroups") or [] if g.get("Name") == group_name), {}
    )
    for task in group.get("Tasks") or []:
        args = [str(a) for a in ((task.get("Config") or {}).get("args") or [])]
        if args[:1] == ["download"] and len(args) > 1:
            return args[1]
        for flag in ("--model-path", "--model"):
            if flag in args[:-1]:
                return args[args.index(flag) + 1]
        if args and not args[0].startswith("-"):
            return args[0]
    return str((job.get("Meta") or {}).get("llm_scheduler_model") or job.get("ID") or "")


class StandinCaches:
    """Every node's cache, from the fleet, then filled by the downloads replicas make."""

    def __init__(self, fleet: list[Node], timing: WeightsTiming) -> None:
        self.timing = timing
        self._lock = threading.Lock()
        self._caches: dict[str, ModelCache] = {}
        for node in fleet:
            cache = getattr(node, "model_cache", None)
            if cache is not None:
                self._caches[node.id] = cache

    def cache(self, node_id: str) -> ModelCache | None:
        with self._lock:
            return self._caches.get(node_id)

    def _size_of(self, source: str) -> int:
        sizes = [w.bytes for c in self._caches.values() for w in c.weights if w.source == source]
        return max(sizes) if sizes else self.timing.default_bytes

    def start(self, node_id: str, source: str) -> float:
        """Seconds until a replica of `source` is ready on the node; the weights are cached
        there from then on (when the node has a cache with room for them)."""
        with self._lock:
            cache = self._caches.get(node_id)
            size = self._size_of(source)
            if cache is None:
                return self.timing.ready_after_s(size, cached=False)
            held = next((w for w in cache.weights if w.source == source), None)
            now = time.time()
            if held is not None:
                kept = [w for w in cache.weights if w is not held]
                used = held.model_copy(update={"last_used": now})
                self._caches[node_id] = cache.model_copy(update={"weights": [*kept, used]})
                return self.timing.ready_after_s(held.bytes, cached=True)
            if cache.free_bytes >= size:
                commit = hashlib.sha1(source.encode()).hexdigest()
                new = CachedWeights(source=source, commit=commit, bytes=size, last_used=now)
                self._caches[node_id] = cache.model_copy(
                    update={"weights": [*cache.weights, new], "free_bytes": cache.free_bytes - size}
                )
            return self.timing.ready_after_s(size, cached=False)

    def download_s(self, node_id: str, source: str) -> float:
        """Seconds a download job of `source` runs on the node (a prefetch)."""
        with self._lock:
            return self._size_of(source) / GB / self.timing.download_gbps

    def fetched(self, node_id: str, source: str) -> bool:
        """A download of `source` on the node finished: the node's cache holds it from now on.
        False (the download failed) when the node has no cache or no room for it."""
        with self._lock:
            cache = self._caches.get(node_id)
            size = self._size_of(source)
            if cache is None:
                return False
            if any(w.source == source for w in cache.weights):
                return True
            if cache.free_bytes < size:
                return False  # "No space left on device"
            commit = hashlib.sha1(source.encode()).hexdigest()
            new = CachedWeights(source=source, commit=commit, bytes=size, last_used=time.time())
            self._caches[node_id] = cache.model_copy(
                update={"weights": [*cache.weights, new], "free_bytes": cache.free_bytes - size}
            )
            return True


def repo_folder(hub: Path, source: str) -> Path:
    return hub / ("models--" + source.replace("/", "--"))


def write_hub_cache(hub: Path, cache: ModelCache, *, index: bool = True) -> None:
    """Lay the cache out as huggingface_hub does: blobs (sparse files of the weights' size, so a
    stand-in 140 GB model costs no disk), `snapshots/<commit>/` symlinks and `refs/<revision>`.
    With `index`, each snapshot also has a `model.safetensors.index.json` giving total_size."""
    for weights in cache.weights:
        repo = repo_folder(hub, weights.source)
        blobs, snapshot = repo / "blobs", repo / "snapshots" / weights.commit
        blobs.mkdir(parents=True, exist_ok=True)
        snapshot.mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / weights.revision).write_text(weights.commit)
        files: dict[str, bytes | int] = {"model-00001-of-00001.safetensors": weights.bytes}
        if index:
            body = {
                "metadata": {"total_size": weights.bytes},
                "weight_map": {"w": "model-00001-of-00001.safetensors"},
            }
            files["model.safetensors.index.json"] = json.dumps(body).encode()
        for name, content in files.items():
            etag = hashlib.sha256(f"{weights.commit}/{name}".encode()).hexdigest()
            with open(blobs / etag, "wb") as blob:
                if isinstance(content, bytes):
                    blob.write(content)
                else:
                    blob.truncate(content)
            if weights.last_used:  # the scanner's "last used" is the blobs' access time
                os.utime(blobs / etag, (weights.last_used, weights.last_used))
            link = snapshot / name
            if not link.is_symlink():
                link.symlink_to(Path("../../blobs") / etag)
