"""Third-party filters meet the core's Filter protocol: `static` is declared, never guessed."""

from __future__ import annotations

from bench.fleetgen import steady_snapshot
from scheduler.core.decide import decide
from scheduler.core.plugins import Plugins
from scheduler.plugins import _declared


class Undeclared:
    """Says nothing of what it reads, and refuses every node."""

    name = "undeclared"

    def __init__(self) -> None:
        self.calls = 0

    def filter(self, ctx: object, node: object, choice: object) -> str | None:
        self.calls += 1
        return "refused by a plugin"


class DeclaredStatic(Undeclared):
    static = True


def test_a_filter_that_does_not_declare_static_is_asked_on_every_visit() -> None:
    inner = Undeclared()
    f = _declared(inner)
    assert f.static is False and f.name == "undeclared"
    plan = decide(steady_snapshot(60, seed=0), Plugins(filters=[f]))
    assert inner.calls > 0
    assert not [a for a in plan.actions if a.op == "start"]
    tried = [t for s in plan.models.values() for t in s.tried]
    # Its "no" is counted under its name, with its words (issue 15).
    said = [t.reasons["undeclared"] for t in tried if "undeclared" in t.short]
    assert said and all(list(s) == ["refused by a plugin"] for s in said)


def test_a_declared_filter_is_handed_on_as_it_is() -> None:
    f = DeclaredStatic()
    assert _declared(f) is f
