"""`toolchain cache ls|show|pull|push|verify|gc|tag`: the engine registry."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolchain.cli.options import DryRunOpt, ForceOpt, JsonOpt, RegistryOpt, YesOpt

app = typer.Typer(help="The content-addressed engine registry (local dir, s3://, hf://, oci://).", no_args_is_help=True)

RefArg = Annotated[
    str, typer.Argument(help="Entry key, unique key prefix (>= 8 hex), tag, or digest (sha256:HEX, @sha256:HEX)")
]


@app.command("ls")
def ls_(registry: RegistryOpt = None, json_out: JsonOpt = False) -> None:
    """List entries with size, kind and tags.

    Examples: toolchain cache ls --registry s3://my-bucket/engines
    """
    from rich.table import Table

    from toolchain.cli.render import err, fmt_bytes, out, print_json
    from toolchain.registry import open_registry
    from toolchain.registry.store import entry_summary

    r = open_registry(registry, must_exist=True)
    tags = r.tags()
    rows = [entry_summary(m, tags) for m in r.ls()]
    if json_out:
        print_json({"registry": r.url, "entries": rows})
        return
    t = Table(title=f"registry {r.url}")
    for c in ("key", "kind", "files", "size", "created", "tags"):
        t.add_column(c)
    for e in rows:
        t.add_row(e["key"][:16], e["kind"], str(e["files"]), fmt_bytes(e["bytes"]), e["created"], ",".join(e["tags"]))
    out.print(t)
    err.print(f"{len(rows)} entries")


@app.command()
def show(ref: RefArg, registry: RegistryOpt = None) -> None:
    """Print an entry's manifest (files, digests, provenance) as JSON."""
    from toolchain.cli.render import print_json
    from toolchain.registry import open_registry

    print_json(open_registry(registry, must_exist=True).show(ref).model_dump())


@app.command()
def pull(
    ref: RefArg,
    dest: Annotated[Path, typer.Argument(help="Destination directory (must not exist)")],
    registry: RegistryOpt = None,
    force: ForceOpt = False,
    link: Annotated[
        bool,
        typer.Option(
            "--link", help="Hardlink the read-only blobs of a local registry instead of copying (shared with it)"
        ),
    ] = False,
) -> None:
    """Restore an entry into DEST, hashing every restored file against its digest.

    A local registry gives independent copies (reflinks where the file system has them) unless --link.

    Examples: toolchain cache pull 3f2a9c1d ./engine
    """
    from toolchain.cli.render import Stages, err
    from toolchain.registry import open_registry

    r = open_registry(registry, must_exist=True)
    stages = r.progress = Stages()
    m = r.get(ref, dest, force=force, link=link)
    stages.close()
    err.print(f"restored {m.key[:16]} ({len(m.files)} files) from {r.url} to {dest}", highlight=False, markup=False)


@app.command()
def push(
    src: Annotated[Path, typer.Argument(help="Directory to store")],
    key: Annotated[
        str,
        typer.Option(
            "--key",
            help="Entry key: 64 hex, or a short key or tag of an entry the local registry holds [default: digest]",
        ),
    ] = "",
    kind: Annotated[str, typer.Option("--kind")] = "engine",
    registry: RegistryOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an entry that holds different content under the same key")
    ] = False,
) -> None:
    """Store a directory as one entry (blobs first, manifest last); an existing key keeps its content
    unless --force.

    Examples:
      toolchain cache push ./engine --key 0c767363 --registry s3://bucket/engines
      toolchain cache push ./engine --key $(toolchain spec expand SPEC --json | jq -r .cells[0].engine_key)
    """
    from toolchain.cli.render import Stages, err, out
    from toolchain.errors import UserInputError
    from toolchain.registry import open_registry
    from toolchain.registry.store import key_for_push

    if not src.is_dir():
        raise UserInputError(f"{src} is not a directory")
    r = open_registry(registry)
    stages = r.progress = Stages()
    full = key_for_push(key, r) if key else None
    m = r.put(full, src, kind=kind, provenance={"pushed_from": str(src.resolve())}, force=force)
    stages.close()  # the bars end their line before the key is printed on its own
    out.print(m.key, highlight=False)
    err.print(f"stored {len(m.files)} files in {r.url}", highlight=False)


@app.command()
def verify(
    registry: RegistryOpt = None,
    repair: Annotated[bool, typer.Option("--repair", help="Remove corrupt entries and blobs")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Re-hash every blob of every entry; exit 1 when any entry is corrupt (unless repaired)."""
    from toolchain.cli.render import err, print_json
    from toolchain.errors import CorruptArtifactError
    from toolchain.registry import open_registry

    rep = open_registry(registry, must_exist=True).verify(repair=repair)
    if json_out:
        print_json({"checked": rep.checked, "corrupt": rep.corrupt, "removed": rep.removed})
    for k, why in rep.corrupt.items():
        err.print(f"corrupt {k[:16]}: {why}" + (" (removed)" if k in rep.removed else ""), highlight=False)
    err.print(f"checked {rep.checked} entries, {len(rep.corrupt)} corrupt")
    if rep.corrupt and not repair:
        raise CorruptArtifactError(f"{len(rep.corrupt)} corrupt entries")


@app.command()
def gc(
    registry: RegistryOpt = None,
    yes: YesOpt = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    grace: Annotated[
        float,
        typer.Option("--grace", min=0, help="Keep unreferenced blobs and uploads younger than this (seconds)"),
    ] = 3600.0,
) -> None:
    """Remove unreferenced blobs, temp files of killed pushes, stale multipart uploads and dangling tags:
    shows the plan, asks unless --yes. Blobs younger than --grace are kept (a push may be using them)."""
    from toolchain.cli.render import err, fmt_bytes, print_json
    from toolchain.registry import open_registry

    r = open_registry(registry, must_exist=True)
    plan = r.gc_plan(grace_s=grace)
    summary = {
        "blobs": len(plan.blobs),
        "tmp": len(plan.tmp),
        "uploads": len(plan.uploads),
        "tags": len(plan.tags),
        "bytes": plan.bytes,
    }
    if json_out:
        print_json({**summary, "dry_run": dry_run, "note": plan.note})
    err.print(
        f"gc plan for {r.url}: {len(plan.blobs)} unreferenced blobs, {len(plan.tmp)} stale temp files, "
        f"{len(plan.uploads)} unfinished uploads, {len(plan.tags)} dangling tags; frees {fmt_bytes(plan.bytes)}",
        highlight=False,
        markup=False,
    )
    if plan.note:
        err.print(f"note: {plan.note}", highlight=False, markup=False)
    if dry_run or not (plan.blobs or plan.tmp or plan.tags or plan.uploads):
        return
    if not yes and not typer.confirm("Delete these?", err=True):
        raise typer.Exit(1)
    freed = r.gc(plan)
    err.print(f"freed {fmt_bytes(freed)}")


@app.command()
def tag(ref: RefArg, name: Annotated[str, typer.Argument(help="Tag name")], registry: RegistryOpt = None) -> None:
    """Point tag NAME at an entry.

    Examples: toolchain cache tag 3f2a9c1d llama8b-h100-prod
    """
    from toolchain.cli.render import err
    from toolchain.registry import open_registry

    key = open_registry(registry, must_exist=True).tag(ref, name)
    err.print(f"{name} -> {key}")


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="cache")
