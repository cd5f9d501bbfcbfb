"""`status`, `why MODEL`, `dry-run`: what the scheduler did, why a model waits, what it would do."""

from __future__ import annotations

from typing import Any

import typer

JSON_HELP = "machine-readable output"
PREFIX_HELP = "Consul KV prefix (env LLM_SCHEDULER_KV_PREFIX, default llm-scheduler/)"


def _preflight(nomad_too: bool) -> None:
    """Reach both servers once, so an outage is one clear sentence and not a stack trace."""
    from scheduler.ops.cli_support import call
    from scheduler.ops.connect import consul_client, nomad_client

    call("Consul", lambda: consul_client().kv.get("llm-scheduler-preflight"))
    if nomad_too:
        call("Nomad", lambda: nomad_client().status.leader.get_leader())


def _live() -> Any:
    from scheduler.ops.cli_support import fail, working
    from scheduler.ops.connect import OperatorError
    from scheduler.ops.status_view import decide_live
    from scheduler.service.config import ConfigError

    _preflight(nomad_too=True)
    with working("building a snapshot of the live cluster and deciding"):
        try:
            return decide_live()
        except ConfigError as exc:
            fail("bad settings in the environment:", code=2, details=exc.lines)
        except ImportError as exc:
            raise OperatorError(
                f"this build cannot decide yet ({exc}): reinstall llm-scheduler"
            ) from exc
        except Exception as exc:
            if type(exc).__name__ != "ReadFailed":
                raise
            raise OperatorError(f"cannot read the cluster: {exc}") from exc


def _status(as_json: bool, prefix: str | None) -> None:
    from rich.table import Table

    from scheduler.ops.cli_support import (
        call,
        console,
        err_console,
        esc,
        print_json,
        print_table_or_lines,
        require_read,
        working,
    )
    from scheduler.ops.connect import consul_client, layout
    from scheduler.ops.status_view import read_status

    kv = layout(prefix)
    client = consul_client()
    with working("reading status records from Consul"):
        report = call("Consul", lambda: read_status(client, kv))
        if not report.records and not report.unreadable and not report.general_errors:
            require_read(client, kv.status)
    if as_json:
        print_json(
            {
                "models": {n: r.model_dump(mode="json") for n, r in sorted(report.records.items())},
                "errors": report.general_errors,
                "unreadable": report.unreadable,
            }
        )
        return
    if not report.records:
        console.print(
            f"no status records under {esc(kv.status)}: is the scheduler running with this prefix?",
            highlight=False,
        )
    table = Table(title=f"models ({esc(kv.status)})")
    for col in ("model", "desired", "live", "replicas", "pending", "last error", "updated"):
        # Names and timestamps are never split: the reason columns wrap instead.
        table.add_column(col, no_wrap=col in ("model", "updated"))
    for name, r in sorted(report.records.items()):
        live = f"[green]{r.live}[/]" if r.live >= r.desired else f"[yellow]{r.live}[/]"
        table.add_row(
            esc(name), str(r.desired), live, esc(_replica_states(r)), _pending_cell(r),
            f"[red]{esc(r.last_error)}[/]" if r.last_error else "",
            esc(r.updated_at or ""),
        )  # fmt: skip
    if report.records and print_table_or_lines(table, lambda: _status_lines(report.records)):
        for name, r in sorted(report.records.items()):
            if r.time_to_ready is not None:
                line = f"{esc(name)} time to ready: {esc(r.time_to_ready.sentence())}"
                console.print(line, highlight=False)
            if r.prefetch is not None:
                console.print(
                    f"{esc(name)} prefetch: {esc(r.prefetch.sentence())}", highlight=False
                )
    for line in report.general_errors + report.unreadable:
        err_console.print(f"[yellow]warning:[/] {esc(line)}", highlight=False)


def _live_and_wanted(live: int | None, desired: int | None) -> str:
    """ "2 replicas live, 3 wanted" (never "3 of 0 replicas live")."""
    n = live or 0
    return f"{n} replica{'s' if n != 1 else ''} live, {desired or 0} wanted"


def _replica_states(r: Any) -> str:
    states: dict[str, int] = {}
    for rep in r.replicas:
        states[rep.state] = states.get(rep.state, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(states.items()))


def _pending_cell(r: Any) -> str:
    from scheduler.ops.cli_support import esc

    return "; ".join(
        [*([f"[yellow]{esc(r.pending)}[/]"
            + (f" ({esc(r.pending_code)})" if r.pending_code else "")]
           if r.pending else []),
         *[f"[red]stopped {esc(t.replica)}[/] ({esc(t.code)})" for t in r.timed_out],
         *([f"[cyan]{esc(r.rollout)}[/]"] if r.rollout else [])]
    )  # fmt: skip


def _status_lines(records: dict[str, Any]) -> list[str]:
    """Status one model at a time, for a terminal too narrow for the table."""
    from scheduler.ops.cli_support import esc

    lines = []
    for name, r in sorted(records.items()):
        states = _replica_states(r)
        lines.append(
            f"[bold]{esc(name)}[/]: {_live_and_wanted(r.live, r.desired)}"
            + (f" ({esc(states)})" if states else "")
            + (f", updated {esc(r.updated_at)}" if r.updated_at else "")
        )
        if r.pending or r.rollout or r.timed_out:
            lines.append(f"  pending: {_pending_cell(r)}")
        if r.last_error:
            lines.append(f"  last error: [red]{esc(r.last_error)}[/]")
        if r.time_to_ready is not None:
            lines.append(f"  time to ready: {esc(r.time_to_ready.sentence())}")
        if r.prefetch is not None:
            lines.append(f"  prefetch: {esc(r.prefetch.sentence())}")
    return lines


def _why(model: str, as_json: bool, prefix: str | None) -> None:
    from scheduler.ops.cli_support import call, print_json, working
    from scheduler.ops.connect import OperatorError, consul_client, layout
    from scheduler.ops.status_view import read_status, why_not_pending

    kv = layout(prefix)
    client = consul_client()
    with working(f"reading the status of {model}"):
        report = call("Consul", lambda: read_status(client, kv))
    record = report.records.get(model)
    source = "status record"
    tried = record.tried if record else None
    pending = record.pending if record else None
    code = record.pending_code if record else None
    timed_out = record.timed_out if record else []
    scaling = record.why if record else None
    desired, live = (record.desired, record.live) if record else (None, None)
    starting = sum(1 for r in record.replicas if r.state == "starting") if record else 0
    actions: list[Any] = []
    # A record from before `tried` was written (None) says too little: decide again.
    if record is None or (record.pending and record.tried is None):
        decision = _live()
        status = decision.plan.models.get(model)
        if status is None:
            known = sorted(decision.plan.models)
            raise OperatorError(
                f"{model} is not in the catalog under {kv.models}"
                + (f" (known: {', '.join(known)})" if known else "")
                + ": add it with `llm-scheduler models apply -f FILE`"
            )
        source = "live decision"
        tried, pending, desired, live = status.tried, status.pending, status.desired, status.live
        code, timed_out = status.pending_code, status.timed_out
        scaling = status.why
        actions = [a for a in decision.plan.actions if a.model == model]
    trials = tried or []
    ready = record.time_to_ready if record else None
    state = None if pending else why_not_pending(desired or 0, live or 0, starting, actions)
    if as_json:
        print_json(
            {
                "model": model, "desired": desired, "live": live, "pending": pending,
                "pending_code": code,
                "timed_out": [t.model_dump(mode="json") for t in timed_out],
                "state": state, "source": source, "why": scaling,
                "tried": [t.model_dump(mode="json") for t in trials],
                "last_error": record.last_error if record else None,
                "time_to_ready": ready.model_dump(mode="json") if ready else None,
                "prefetch": record.prefetch.model_dump(mode="json")
                if record and record.prefetch
                else None,
            }
        )  # fmt: skip
        return
    _print_why(model, record, live, desired, scaling, pending, state, code, timed_out, trials)


def _print_why(
    model: str,
    record: Any,
    live: int | None,
    desired: int | None,
    scaling: str | None,
    pending: str | None,
    state: str | None,
    code: str | None,
    timed_out: list[Any],
    trials: list[Any],
) -> None:
    """`why MODEL` as text: live and wanted, what set the count, why pending, what was tried."""
    from scheduler.ops.cli_support import console, esc
    from scheduler.ops.status_view import explain_trials

    where = "status record" if record else "no status record yet: what the next pass would do"
    console.print(
        f"[bold]{esc(model)}[/]: {_live_and_wanted(live, desired)} ({where})", highlight=False
    )
    if scaling:
        console.print(f"scaling: {esc(scaling)}", highlight=False)
    if not pending:
        console.print(f"[green]not pending[/]: {esc(state)}", highlight=False)
    else:
        label = f"pending ({esc(code)})" if code else "pending"
        console.print(f"[yellow]{label}:[/] {esc(pending)}", highlight=False)
    for t in timed_out:
        console.print(f"[red]stopped {esc(t.replica)} ({esc(t.code)}):[/] {esc(t.reason)}")
    for line in explain_trials(trials):
        console.print(f"  tried {esc(line)}", highlight=False)
    if record and record.last_error:
        console.print(f"[red]last error:[/] {esc(record.last_error)}", highlight=False)
    if record and record.time_to_ready:
        console.print(f"time to ready: {esc(record.time_to_ready.sentence())}", highlight=False)
    if record and record.prefetch:
        console.print(f"prefetch: {esc(record.prefetch.sentence())}", highlight=False)


def _dry_run(as_json: bool) -> None:
    from rich.table import Table

    from scheduler.core.models import StartAction
    from scheduler.ops.cli_support import console, err_console, esc, print_json

    decision = _live()
    plan = decision.plan
    if as_json:
        print_json(
            {
                "plan": plan.model_dump(mode="json", by_alias=True),
                "input_errors": decision.input_errors,
                "warnings": decision.warnings,
            }
        )
        return
    nodes = {n["id"]: n["name"] for n in decision.snapshot_json.get("nodes", [])}
    table = Table(title="what the next pass would do (nothing is changed)")
    for col in ("op", "model", "replica", "where", "reason"):
        table.add_column(col, overflow="fold")
    for a in plan.actions:
        if isinstance(a, StartAction):
            where = "; ".join(f"{nodes.get(s.node, s.node)}: {len(s.gpus)} dev" for s in a.shards)
            table.add_row("[green]start[/]", esc(a.model), a.replica, esc(where), esc(a.reason))
        else:
            table.add_row("[red]stop[/]", esc(a.model), a.replica, "", esc(a.reason))
    if plan.actions:
        console.print(table)
    else:
        console.print("nothing to do: every model has what it can get")
    for name, s in sorted(plan.models.items()):
        if s.pending:
            console.print(f"[yellow]{esc(name)}[/] pending: {esc(s.pending)}", highlight=False)
        if s.rollout:
            console.print(f"[cyan]{esc(name)}[/] {esc(s.rollout)}", highlight=False)
    for line in plan.advice:
        console.print(f"[cyan]advice:[/] {esc(line)}", highlight=False)
    for line in decision.input_errors + decision.warnings:
        err_console.print(f"[yellow]warning:[/] {esc(line)}", highlight=False)


def register(app: typer.Typer) -> None:
    from scheduler.ops.cli_support import guarded

    json_opt = typer.Option(False, "--json", help=JSON_HELP)
    prefix_opt = typer.Option(None, "--prefix", envvar="LLM_SCHEDULER_KV_PREFIX", help=PREFIX_HELP)

    @app.command("status")
    def status_cmd(as_json: bool = json_opt, prefix: str | None = prefix_opt) -> None:
        """Every model: desired, live and pending, from the scheduler's status records."""
        guarded(lambda: _status(as_json, prefix), as_json)

    @app.command("why")
    def why_cmd(
        model: str = typer.Argument(..., help="model name"),
        as_json: bool = json_opt,
        prefix: str | None = prefix_opt,
    ) -> None:
        """Why a model is pending: per profile, what was tried and what was short where."""
        guarded(lambda: _why(model, as_json, prefix), as_json)

    @app.command("dry-run")
    def dry_run_cmd(as_json: bool = json_opt) -> None:
        """Build a snapshot of the live cluster and print what the next pass would do."""
        guarded(lambda: _dry_run(as_json), as_json)
