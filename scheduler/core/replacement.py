"""Make-before-break, the one replacement that drains, roll-outs, consolidation and
defragmentation share: a replica stops counting as live, the model grows a replacement, and
the replica is stopped once it is not serving or once enough others run."""

from __future__ import annotations

from scheduler.core.models import Model, Replica
from scheduler.core.pass_state import PassState, StartWhy, StopWhy
from scheduler.core.placement import Placement, commit


def mark(st: PassState, m: Model, movers: list[Replica]) -> None:
    """No longer live: the model grows their replacements in this pass."""
    for r in movers:
        st.ledger.retired.add(r.id)
        st.counts.live[m.name] -= 1


def retire_one(st: PassState, r: Replica, m: Model, why: StopWhy) -> None:
    st.ledger.stop(r.id, m.name, why)
    st.ledger.retired.add(r.id)


def replace(
    st: PassState,
    m: Model,
    movers: list[Replica],
    counting: list[Replica],
    why: tuple[StopWhy, StopWhy],
    whys: dict[str, tuple[StopWhy, StopWhy]] | None = None,
) -> None:
    """`movers` (already not live) are stopped at once when not serving, and otherwise only
    once enough replicas elsewhere run to cover the model's desired count. `why`: the reason
    when it is not serving yet, and the one once others cover for it (`whys`: per replica)."""
    retired = st.ledger.retired
    serving = [r for r in movers if r.state == "running"]
    running_elsewhere = sum(1 for r in counting if r.state == "running" and r.id not in retired)
    spare = running_elsewhere + len(serving) - st.counts.desired[m.name]
    for r in movers:
        said = whys.get(r.id, why) if whys else why
        if r.state != "running":
            retire_one(st, r, m, said[0])
        elif spare > 0:
            spare -= 1
            retire_one(st, r, m, said[1])


def start_move(st: PassState, m: Model, r: Replica, fitted: Placement, why: StartWhy) -> None:
    """Start `r`'s replacement on `fitted`; `r` goes once it runs (a move under way)."""
    commit(m, fitted, st.inv)
    st.ledger.retired.add(r.id)
    rid = st.ledger.new_id(m.name)
    st.ledger.moves[r.id] = rid
    st.ledger.start(m.name, fitted, rid, why)
