"""`llm-scheduler mig plan|apply`: MIG layouts from NVIDIA's geometry tables.

`plan` is offline: it prints a layout (profile and placement start of every GPU instance) as
JSON, exit 0, or the reason none exists, exit 1. `apply` re-partitions an idle GPU of this node
through NVML, and only with --apply; without it, it prints what it would do. Bad --want, or a
--gpu that matches several tables ("A100": 40 and 80 GB): exit 2.
"""

from __future__ import annotations

import typer

WANT_HELP = (
    "PROFILE=COUNT[,PROFILE=COUNT...], e.g. 3g.40gb=2,1g.10gb=1; may be given more than once"
)


def _want(texts: list[str]) -> dict[str, int]:
    """Every --want together (a profile named twice is an error, never silently the last)."""
    from scheduler.core.mig_geometry import parse_want

    try:
        return parse_want(",".join(texts))
    except ValueError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(2) from None


def _one_table(gpu: str) -> None:
    """Refuse a --gpu that names a family with several MIG tables ("A100": 40 and 80 GB), which
    would otherwise silently get one of them; exit 2 listing the matches."""
    from scheduler.core.mig_geometry import GEOMETRIES, geometry_for

    text = gpu.strip().upper()
    if any(text in (g.key.upper(), g.display_name.upper()) for g in GEOMETRIES):
        return
    matches = [g for g in GEOMETRIES if text in g.display_name.upper() or text in g.key.upper()]
    resolved = geometry_for(gpu)
    if resolved is not None:
        family, size = resolved.key.upper().split("-", 1)
        if size not in text.replace(" ", ""):
            matches = [g for g in GEOMETRIES if g.key.upper().startswith(family + "-")]
    if len(matches) > 1:
        names = ", ".join(f'"{g.display_name}" ({g.key})' for g in matches)
        typer.echo(f"--gpu {gpu!r} matches more than one MIG table: {names}; name one", err=True)
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    mig = typer.Typer(help="Plan and apply MIG layouts.", no_args_is_help=True)
    app.add_typer(mig, name="mig")

    @mig.command("plan")
    def plan_cmd(
        gpu: str = typer.Option(..., "--gpu", help='GPU model, e.g. "NVIDIA A100-SXM4-80GB"'),
        want: list[str] = typer.Option(..., "--want", help=WANT_HELP),
    ) -> None:
        """Print a MIG layout holding the wanted instances, as JSON."""
        from scheduler.core.mig_geometry import LayoutError, plan_layout

        _one_table(gpu)
        result = plan_layout(gpu, _want(want))
        if isinstance(result, LayoutError):
            typer.echo(result.reason, err=True)
            raise typer.Exit(1)
        typer.echo(result.model_dump_json(indent=2))

    @mig.command("profiles")
    def profiles_cmd(
        gpu: str = typer.Option(..., "--gpu", help='GPU model, e.g. "NVIDIA H200"'),
    ) -> None:
        """Print the MIG profiles of a GPU model: slices, maximum count, placement starts."""
        _one_table(gpu)
        _print_profiles(gpu)

    @mig.command("apply")
    def apply_cmd(
        gpu_index: int = typer.Option(..., "--gpu-index", help="NVML index of the GPU"),
        want: list[str] = typer.Option(..., "--want", help=WANT_HELP),
        apply: bool = typer.Option(False, "--apply", help="really change the GPU"),
        fake: str | None = typer.Option(None, "--fake-nvml", hidden=True),
    ) -> None:
        """Re-partition an idle MIG GPU of this node into the planned layout (needs root)."""
        from scheduler.commands.reporter import FAKE_FLEETS, fake_nvml
        from scheduler.reporter.mig_apply import MigApplyError, apply_mig_layout

        wanted = _want(want)
        if fake is not None and fake not in FAKE_FLEETS:
            typer.echo(f"--fake-nvml must be one of {', '.join(FAKE_FLEETS)}", err=True)
            raise typer.Exit(2)
        try:
            result = apply_mig_layout(
                gpu_index, wanted, apply=apply, nvml=fake_nvml(fake) if fake else None
            )
        except MigApplyError as err:
            typer.echo(str(err), err=True)
            raise typer.Exit(1) from None
        for step in result.steps:
            typer.echo(step)
        if apply:
            typer.echo(f"{result.gpu} is now {result.layout.describe()}")
        else:
            typer.echo(f"dry run: nothing changed on {result.gpu}; add --apply to do it")


def _print_profiles(gpu: str) -> None:
    import json

    from scheduler.core.mig_geometry import geometry_for

    geometry = geometry_for(gpu)
    if geometry is None:
        typer.echo(f"no MIG geometry is known for GPU {gpu!r}", err=True)
        raise typer.Exit(1)
    rows = [
        {
            "profile": p.name,
            "compute_slices": p.compute_slices,
            "memory_slices": p.memory_slices,
            "max_count": p.max_count,
            "starts": list(p.starts),
        }
        for p in geometry.profiles
    ]
    body = {"geometry": geometry.key, "confirmed": geometry.confirmed, "profiles": rows}
    typer.echo(json.dumps(body, indent=2))
