"""Catalog commands: `models list|apply -f`, `quotas list|apply -f`, `schema --write|--check`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

PREFIX_HELP = "Consul KV prefix (env LLM_SCHEDULER_KV_PREFIX, default llm-scheduler/)"


def _apply(kind: str, file: str, dry_run: bool, as_json: bool, prefix: str | None) -> None:

    from scheduler.ops import catalog_io
    from scheduler.ops.cli_support import call, fail, working
    from scheduler.ops.connect import consul_client, layout

    try:
        items = catalog_io.parse(catalog_io.load_documents(file), kind)  # type: ignore[arg-type]
    except catalog_io.CatalogError as exc:
        count = len(exc.lines)
        fail(
            f"{file} has {count} problem{'s' if count != 1 else ''}, nothing was written:",
            details=exc.lines,
        )
    client = consul_client()
    kv = layout(prefix)
    with working(f"reading {len(items)} {kind} from Consul"):
        changes = call("Consul", lambda: catalog_io.plan_changes(client, kv, items))
    _write_and_report(kind, client, changes, dry_run, as_json)


def _delete(names: list[str], dry_run: bool, as_json: bool, prefix: str | None) -> None:
    from scheduler.ops import catalog_io
    from scheduler.ops.cli_support import call, fail, working
    from scheduler.ops.connect import consul_client, layout

    client = consul_client()
    kv = layout(prefix)
    with working(f"reading {len(names)} models from Consul"):
        changes = call("Consul", lambda: catalog_io.plan_deletes(client, kv, names))
    missing = [c.name for c in changes if c.old is None]
    if missing:
        fail(f"no such model in Consul: {', '.join(missing)}; nothing was deleted")
    _write_and_report("models", client, changes, dry_run, as_json)


def _write_and_report(
    kind: str, client: Any, changes: list[Any], dry_run: bool, as_json: bool
) -> None:
    from rich.syntax import Syntax
    from rich.table import Table

    from scheduler.ops import catalog_io
    from scheduler.ops.cli_support import (
        call,
        console,
        esc,
        fail,
        json_mode,
        print_json,
        working,
    )

    conflicts: list[str] = []
    if not dry_run:
        with working(f"writing {kind}"):
            conflicts = call("Consul", lambda: catalog_io.write_changes(client, changes))
    if as_json:
        print_json(
            {
                "dry_run": dry_run,
                "changes": [
                    {"key": c.key, "name": c.name, "action": c.action, "old": c.old, "new": c.new}
                    for c in changes
                ],
                "conflicts": conflicts,
            }
        )
    else:
        table = Table(title=f"{kind} ({'dry run' if dry_run else 'applied'})")
        table.add_column("name")
        table.add_column("key")
        table.add_column("change")
        colour = {"create": "green", "update": "yellow", "unchanged": "dim", "delete": "red"}
        for c in changes:
            state = "conflict" if c.key in conflicts else c.action
            table.add_row(esc(c.name), esc(c.key), f"[{colour.get(state, 'red')}]{state}[/]")
        console.print(table)
        for c in changes:
            if c.action != "unchanged":
                console.print(Syntax("\n".join(c.diff()), "diff", theme="ansi_dark"))
        if dry_run:
            console.print("[dim]dry run: nothing was written[/]")
    if conflicts:
        # Under --json the object above already names them: one JSON document on stdout.
        with json_mode(False):
            fail(
                f"{', '.join(conflicts)} changed in Consul while applying (CAS): "
                "run the same command again to see the new diff"
            )


def _list(kind: str, as_json: bool, prefix: str | None) -> None:

    from scheduler.core.models import Quota
    from scheduler.ops import catalog_io
    from scheduler.ops.cli_support import (
        call,
        console,
        err_console,
        esc,
        hidden_by_acl,
        print_json,
        print_table_or_lines,
        require_read,
        working,
    )
    from scheduler.ops.connect import consul_client, layout
    from scheduler.serving.catalog_model import CatalogModel

    client = consul_client()
    kv = layout(prefix)
    # Models as the service reads them (`serve` required, extra flags checked), so a model
    # that the service would refuse is flagged here too.
    cls: Any = CatalogModel if kind == "models" else Quota
    where = kv.models if kind == "models" else kv.quotas
    with working(f"reading {kind} from Consul"):
        items, errors = call("Consul", lambda: catalog_io.read_all(client, where, cls))
        if not items and not errors:
            require_read(client, where)
        hidden = hidden_by_acl(where)
    if as_json:
        print_json(
            {
                kind: [i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in items],
                "errors": errors,
                "hidden_by_acl": hidden,
            }
        )
        return
    if items:
        print_table_or_lines(_table(kind, where, items), lambda: _lines(kind, items))
    else:
        console.print(f"no {kind} under {esc(where)}", highlight=False)
    for line in errors:
        err_console.print(f"[yellow]skipped bad value[/] {esc(line)}", highlight=False)
    if hidden:
        err_console.print(
            f"[yellow]warning:[/] Consul hid some keys under {esc(where)} from this token "
            "(its ACL rules do not let it read them): the list is not complete",
            highlight=False,
        )


def _table(kind: str, where: str, items: list[Any]) -> Any:
    """The catalog's models or quotas as a rich table."""
    from rich.table import Table

    from scheduler.ops.cli_support import esc

    if kind == "models":
        table = Table(title=f"models under {esc(where)}")
        for col in ("name", "owner", "class", "min", "max", "target", "on demand", "profiles"):
            table.add_column(col, no_wrap=col in ("name", "owner"))  # names are never cut
        for m in items:
            s = m.scaling
            table.add_row(
                esc(m.name), esc(m.owner), m.class_, str(s.min), str(s.max),
                f"{s.target_per_replica:g}", "yes" if s.on_demand else "no", esc(_profiles(m)),
            )  # fmt: skip
    else:
        table = Table(title=f"quotas under {esc(where)}")
        for col in ("owner", "guarantee", "limit"):
            table.add_column(col, no_wrap=col == "owner")
        for q in items:
            table.add_row(esc(q.owner), _amount(q.guarantee), _amount(q.limit) if q.limit else "-")
    return table


def _lines(kind: str, items: list[Any]) -> list[str]:
    """One line per item, for a terminal too narrow for the table."""
    return [_model_line(m) if kind == "models" else _quota_line(m) for m in items]


def _profiles(m: Any) -> str:
    return ", ".join(
        p.name + (f" ({p.mig_profile})" if p.mig_profile else f" ({p.gpus}x{p.shards})")
        for p in m.profiles
    )


def _model_line(m: Any) -> str:
    from scheduler.ops.cli_support import esc

    s = m.scaling
    return (
        f"[bold]{esc(m.name)}[/] ({esc(m.owner)}, {m.class_}): min {s.min}, max {s.max}, "
        f"target {s.target_per_replica:g}{', on demand' if s.on_demand else ''}; "
        f"profiles {esc(_profiles(m))}"
    )


def _quota_line(q: Any) -> str:
    from scheduler.ops.cli_support import esc

    limit = _amount(q.limit) if q.limit else "-"
    return f"{esc(q.owner)}: guarantee {_amount(q.guarantee)}; limit {limit}"


def _amount(amount: Any) -> str:
    parts = [
        f"{v:g} {label}"
        for label, v in (
            ("GPUs", amount.gpus),
            ("cores", amount.cpu_cores),
            ("GB", amount.memory_gb),
        )
        if v is not None
    ]
    return ", ".join(parts) or "-"


FILE_OPT = typer.Option(
    ..., "-f", "--file", help="YAML or JSON file (one item, a list, or a seed); - for stdin"
)
DRY_OPT = typer.Option(False, "--dry-run", help="validate and show the diff, write nothing")
JSON_OPT = typer.Option(False, "--json", help="machine-readable output")
PREFIX_OPT = typer.Option(None, "--prefix", envvar="LLM_SCHEDULER_KV_PREFIX", help=PREFIX_HELP)


def register(app: typer.Typer) -> None:
    models = typer.Typer(help="The model catalog in Consul KV.", no_args_is_help=True)
    quotas = typer.Typer(help="Per-owner quotas in Consul KV.", no_args_is_help=True)
    app.add_typer(models, name="models")
    app.add_typer(quotas, name="quotas")
    _register_models(models)
    _register_quotas(quotas)
    _register_schema(app)


def _register_models(models: typer.Typer) -> None:
    @models.command("apply")
    def models_apply(
        file: str = FILE_OPT,
        dry_run: bool = DRY_OPT,
        as_json: bool = JSON_OPT,
        prefix: str | None = PREFIX_OPT,
    ) -> None:
        """Validate models from a file, show the diff, and write them with CAS."""
        _guard(lambda: _apply("models", file, dry_run, as_json, prefix), as_json)

    @models.command("delete")
    def models_delete(
        names: list[str] = typer.Argument(..., help="model names"),
        dry_run: bool = DRY_OPT,
        as_json: bool = JSON_OPT,
        prefix: str | None = PREFIX_OPT,
    ) -> None:
        """Delete models (CAS, with the diff); the scheduler drains their replicas after
        settings.retire_grace_s."""
        _guard(lambda: _delete(names, dry_run, as_json, prefix))

    @models.command("list")
    def models_list(as_json: bool = JSON_OPT, prefix: str | None = PREFIX_OPT) -> None:
        """List the models in Consul KV."""
        _guard(lambda: _list("models", as_json, prefix), as_json)


def _register_quotas(quotas: typer.Typer) -> None:
    @quotas.command("apply")
    def quotas_apply(
        file: str = FILE_OPT,
        dry_run: bool = DRY_OPT,
        as_json: bool = JSON_OPT,
        prefix: str | None = PREFIX_OPT,
    ) -> None:
        """Validate quotas from a file, show the diff, and write them with CAS."""
        _guard(lambda: _apply("quotas", file, dry_run, as_json, prefix), as_json)

    @quotas.command("list")
    def quotas_list(as_json: bool = JSON_OPT, prefix: str | None = PREFIX_OPT) -> None:
        """List the quotas in Consul KV."""
        _guard(lambda: _list("quotas", as_json, prefix), as_json)


def _register_schema(app: typer.Typer) -> None:
    @app.command("schema")
    def schema_cmd(
        write: bool = typer.Option(False, "--write", help="regenerate the shipped schema files"),
        check: bool = typer.Option(False, "--check", help="exit 1 if the shipped files are stale"),
        out: Path | None = typer.Option(None, "--out", help="folder to write to (with --write)"),
    ) -> None:
        """JSON Schemas for models, quotas and settings (generated from the pydantic models)."""
        from scheduler.ops import schemas
        from scheduler.ops.cli_support import console, fail, print_json

        if write:
            for path in schemas.write(out):
                console.print(f"wrote {path}", markup=False)
            return
        if check:
            stale = [n for n, t in schemas.generate().items() if schemas.shipped().get(n) != t]
            if stale:
                fail(f"stale schema files: {', '.join(stale)}; run `llm-scheduler schema --write`")
            console.print("schemas are up to date")
            return
        import json

        print_json({name: json.loads(text) for name, text in schemas.generate().items()})


def _guard(body: Any, as_json: bool = False) -> None:
    from scheduler.ops.cli_support import guarded

    guarded(body, as_json)
