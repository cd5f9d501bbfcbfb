"""The model-cache part of the nodes' reports, parsed into the snapshot's cache facts.

A node's cache counts only when its report is well formed and the node still advertises the
volume the report is about; otherwise the node is cold (`cache` None), one warning names the
key and the field, and nothing else changes: a bad report never makes a node infeasible and
never touches what runs there. Snapshots of repositories that no catalog model serves are
left out of the facts (the core only asks about catalog models).

    node, warnings = node_cache(node, record.cache, key, sources)
"""

from __future__ import annotations

from collections.abc import Collection

from pydantic import JsonValue, ValidationError

from scheduler.core.fleet import CachedSnapshot, Node, NodeCache
from scheduler.reporter.cache_record import CacheReport, SnapshotReport


def _field(err: ValidationError) -> tuple[str, str]:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(the whole value)"
    return where, first["msg"]


def parse_cache(key: str, raw: JsonValue | None) -> CacheReport | str | None:
    """The report's cache part, None when there is none, or one warning line."""
    if raw is None:
        return None
    try:
        return CacheReport.model_validate(raw)
    except ValidationError as err:
        where, msg = _field(err)
        return f"cache report {key} is malformed: field cache.{where}: {msg}; node counted as cold"


def _fact(snapshot: SnapshotReport) -> CachedSnapshot:
    return CachedSnapshot(
        source=snapshot.source,
        commit=snapshot.commit,
        revisions=list(snapshot.revisions),
        bytes=snapshot.bytes,
        weights_bytes=snapshot.weights_bytes,
        last_used=snapshot.last_used,
    )


def node_cache(
    node: Node, raw: JsonValue | None, key: str, sources: Collection[str]
) -> tuple[Node, list[str]]:
    """The node with its cache facts from the report's `cache` part, and warning lines."""
    parsed = parse_cache(key, raw)
    if parsed is None:
        return node, []
    if isinstance(parsed, str):
        return node, [parsed]
    where = f"node {node.name} ({node.id})"
    if parsed.volume not in node.host_volumes:
        return node, [
            f"cache report {key}: field cache.volume: {where} no longer advertises host volume "
            f"{parsed.volume!r}; node counted as cold (its replicas are left running)"
        ]
    warnings: list[str] = []
    unknown = [i for i, s in enumerate(parsed.snapshots) if s.source not in sources]
    if unknown:
        first = parsed.snapshots[unknown[0]].source
        more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
        warnings.append(
            f"cache report {key}: field cache.snapshots.{unknown[0]}.source: {first!r}{more} "
            "is no model in the catalog; left out"
        )
    facts = [_fact(s) for s in parsed.snapshots if s.source in sources]
    cache = NodeCache(volume=parsed.volume, free_bytes=parsed.free_bytes, snapshots=facts)
    return node.model_copy(update={"cache": cache}), warnings
