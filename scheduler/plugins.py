"""Third-party plugins through Python entry points.

Groups: `llm_scheduler.filters`, `llm_scheduler.scorers` (placement plugins handed to the
decision core), `llm_scheduler.demand_sources` (factories `(ServiceConfig) -> DemandSource`)
and `llm_scheduler.templates` (runtime name -> path of a Nomad HCL jobspec).
A plugin that fails to load is logged and skipped, never fatal.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import structlog

from scheduler.adapters.entry_points import load_group

if TYPE_CHECKING:
    from scheduler.core.models import Node
    from scheduler.core.plugins import Plugins, Status
    from scheduler.demand import DemandSource
    from scheduler.demand.signals import SignalSource
    from scheduler.service.config import ServiceConfig

FILTERS = "llm_scheduler.filters"
SCORERS = "llm_scheduler.scorers"
DEMAND_SOURCES = "llm_scheduler.demand_sources"

log = structlog.get_logger("llm-scheduler.plugins")


def placement_plugins() -> Plugins | None:
    """Filters and scorers from entry points (each an object or a class to instantiate), or
    None when there are none: the core then runs its built-in pipeline alone."""
    from scheduler.core.plugins import Plugins, default_filters

    def _instances(group: str) -> list[Any]:
        return [p() if isinstance(p, type) else p for p in load_group(group).values()]

    taken = {f.name for f in default_filters()}
    filters = []
    for f in _instances(FILTERS):
        declared = _declared(f, taken)
        taken.add(declared.name)
        filters.append(declared)
    scorers: list[Any] = [_GuardedScorer(s) for s in _instances(SCORERS)]
    if not filters and not scorers:
        return None
    return Plugins(filters=filters, scorers=scorers)


class _Guarded:
    """A third-party plugin's failures: how many of its calls raised (the first is logged),
    and the last error since the service last took it (take_failures)."""

    name: str
    failures: int = 0
    untaken: str | None = None

    def _failed(self, event: str, node: Any, exc: Exception) -> None:
        self.failures += 1
        self.untaken = repr(exc)
        if self.failures == 1:
            log.warning(
                event,
                name=self.name,
                node=node.node.id,
                node_name=node.node.name,
                error=self.untaken,
            )


class _Plain(_Guarded):
    """A third-party filter as the core's Filter protocol has it: its name (the key its "no"
    is counted under) and whether it is static, as declared or as worked out here. A filter
    that raises refuses the node it was asked about, with the reason that it failed (as the
    Kubernetes scheduler takes a filter's error): a plugin's bug never stops the pass, and
    nothing is placed where it could not say yes."""

    def __init__(self, inner: Any, name: str, static: bool) -> None:
        self.inner = inner
        self.name = name
        self.static = static

    def filter(self, ctx: Any, node: Any, choice: Any) -> str | Status | None:
        try:
            result: str | Status | None = self.inner.filter(ctx, node, choice)
        except Exception as exc:
            self._failed("plugin_filter_failed", node, exc)
            return f"filter failed: {type(exc).__name__}"
        return result


class _GuardedScorer(_Guarded):
    """A third-party scorer whose error (or a score that is no finite number) scores the node
    0, no preference: a plugin's bug never stops the pass."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        name = getattr(inner, "name", None)
        self.name = name if isinstance(name, str) and name else type(inner).__name__

    def score(self, ctx: Any, node: Any, choice: Any) -> float:
        try:
            value = float(self.inner.score(ctx, node, choice))
            if not math.isfinite(value):
                raise ValueError(f"score {value} is not a finite number")
            return value
        except Exception as exc:
            self._failed("plugin_scorer_failed", node, exc)
            return 0.0


class _Keyed(_Plain):
    """A static filter that declares what it reads (core.plugins.Keyed), its declaration
    checked. A shape key that fails or cannot be hashed keys its node alone: that node then
    gets a verdict of its own, as an undeclared filter's nodes do (logged once)."""

    def __init__(self, inner: Any, name: str, fields: tuple[str, ...] | None) -> None:
        super().__init__(inner, name, True)
        self.profile_fields = fields
        self._warned = False

    def shape_key(self, node: Node) -> Hashable:
        try:
            key: Hashable = self.inner.shape_key(node)
            hash(key)
        except Exception as exc:  # a third-party plugin's bug must not stop the pass
            if not self._warned:
                self._warned = True
                log.warning(
                    "plugin_shape_key_failed",
                    name=self.name,
                    node=node.id,
                    node_name=node.name,
                    error=str(exc),
                )
            return (_OWN_VERDICT, node.id)
        return key


def take_failures(plugins: Plugins | None) -> dict[str, str]:
    """Each third-party filter and scorer that raised since the last call, with its last
    error: the service takes them after each pass (metrics, /healthz)."""
    found: dict[str, str] = {}
    for p in [*plugins.filters, *plugins.scorers] if plugins is not None else []:
        if isinstance(p, _Guarded) and p.untaken is not None:
            found[p.name], p.untaken = p.untaken, None
    return found


_OWN_VERDICT = object()  # equal to nothing a plugin returns: the node's verdict is its own


def _declared(f: Any, taken: set[str] | frozenset[str] = frozenset()) -> Any:
    """The filter as the core's Filter protocol has it: `name` a string no other filter has,
    `static` declared as a bool (else dynamic), and a static one's declaration of what it
    reads (`shape_key`, `profile_fields`) checked: a bad one is logged and ignored, so the
    filter is asked once per node, as one that declares nothing."""
    name = getattr(f, "name", None)
    if not isinstance(name, str) or not name:
        name = type(f).__name__
    if name in taken:
        unique = next(f"{name}-{i}" for i in range(2, len(taken) + 3) if f"{name}-{i}" not in taken)
        log.warning("plugin_name_taken", name=name, reported_as=unique)
        name = unique
    static = getattr(f, "static", None)
    if not isinstance(static, bool):
        log.warning("plugin_static_undeclared", name=name)
        return _Plain(f, name, False)
    declares = hasattr(f, "shape_key") or hasattr(f, "profile_fields")
    if not static or not declares:
        return _Plain(f, name, static)
    problem, fields = _profile_fields(getattr(f, "profile_fields", _MISSING))
    if not callable(getattr(f, "shape_key", None)):
        problem = "shape_key is not a method"
    if problem is not None:
        log.warning("plugin_shape_key_ignored", name=name, problem=problem)
        return _Plain(f, name, True)
    return _Keyed(f, name, fields)


def _profile_fields(fields: object) -> tuple[str | None, tuple[str, ...] | None]:
    """(what is wrong with a declared `profile_fields`, or None; the fields as the core
    takes them: sorted names, or None for "the model too")."""
    from scheduler.core.models import Profile

    if fields is None:
        return None, None
    if fields is _MISSING:
        return "profile_fields missing (None: it reads the model)", None
    if not isinstance(fields, tuple | list | set | frozenset):
        return f"profile_fields {fields!r} is not a list of Profile field names", None
    names = [n for n in fields if isinstance(n, str) and n in Profile.field_names()]
    if len(names) != len(fields):
        unknown = ", ".join(sorted(repr(n) for n in fields if n not in names))
        return f"profile_fields names no Profile field: {unknown}", None
    return None, tuple(sorted(names))


_MISSING = object()


def signal_source(config: ServiceConfig) -> SignalSource | None:
    """Where the model servers' own metrics come from, or None."""
    from scheduler.demand.prometheus import PrometheusSignals
    from scheduler.demand.signals import ScrapeSignals

    if config.demand_source == "prometheus" or config.signals == "prometheus":
        window = f"{max(int(config.signal_window_s), 1)}s"
        return PrometheusSignals(config.prometheus_url, window=window)
    if config.signals == "scrape":
        return ScrapeSignals(
            concurrency=config.scrape_concurrency,
            timeout_s=config.scrape_timeout_s,
            window_s=config.signal_window_s,
        )
    return None


def demand_source(config: ServiceConfig) -> DemandSource:
    from scheduler.demand.kv import KVDemandSource

    name = config.demand_source
    # The servers' metrics are signals now (signal_source), read next to the gateway's demand.
    if name in ("consul", "prometheus"):
        return KVDemandSource()
    factories = load_group(DEMAND_SOURCES)
    if name not in factories:
        known = ", ".join(sorted({"consul", "prometheus", *factories}))
        raise ValueError(f"unknown demand source {name!r}; known: {known}")
    source: DemandSource = factories[name](config)
    return source
