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
SignOpt = Annotated[
    Path | None,
    typer.Option(
        "--sign",
        help="Private key to sign the entry with: cosign.key (password from TOOLCHAIN_SIGNING_PASSWORD or "
        "COSIGN_PASSWORD) or a PEM P-256 key [env TOOLCHAIN_SIGNING_KEY]",
    ),
]
AllowLegacyOpt = Annotated[
    bool,
    typer.Option(
        "--allow-legacy",
        help="Trust an oci:// entry pushed before records on its content annotation alone (re-push it instead)",
    ),
]
PublicKeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--public-key",
        help="Public key (cosign.pub, PEM) the entry's signature must verify with [env TOOLCHAIN_VERIFY_KEY]",
    ),
]


@app.command("ls")
def ls_(registry: RegistryOpt = None, json_out: JsonOpt = False) -> None:
    """List entries with size, kind and tags.

    Examples: toolchain cache ls --registry s3://my-bucket/engines
    """
    from rich.table import Table

    from toolchain.cli.render import err, fmt_bytes, out, plural, print_json
    from toolchain.registry import open_registry
    from toolchain.registry.store import entry_summary

    r = open_registry(registry, must_exist=True)
    tags = r.tags()
    entries, skipped = r.listing()
    rows = [entry_summary(m, tags) for m in entries]
    if json_out:
        print_json({"registry": r.url, "entries": rows, "skipped": [{"name": n, "why": w} for n, w in skipped]})
        return
    t = Table(title=f"registry {r.url}")
    for c in ("key", "kind", "files", "size", "created", "tags"):
        t.add_column(c)
    for e in rows:
        t.add_row(e["key"][:16], e["kind"], str(e["files"]), fmt_bytes(e["bytes"]), e["created"], ",".join(e["tags"]))
    out.print(t)
    for name, why in skipped:
        err.print(f"skipped {name}: {why}", highlight=False, markup=False, soft_wrap=True)
    tail = f", {plural(len(skipped), 'manifest')} skipped (above)" if skipped else ""
    err.print(plural(len(rows), "entry", "entries") + tail)


@app.command(short_help="Print an entry's manifest (files, digests, provenance) as JSON.")
def show(ref: RefArg, registry: RegistryOpt = None) -> None:
    """Print an entry's manifest (files, digests, provenance) as JSON; on stderr, the digest that pins it
    (`cache pull --digest`, `deploy --engine-digest`).

    Examples: toolchain cache show tiny-fp8 --registry oci://127.0.0.1:5000/engines
    """
    from toolchain.cli.render import err, print_json
    from toolchain.errors import ToolchainError
    from toolchain.registry import open_registry
    from toolchain.registry.signing import entry_digest

    reg = open_registry(registry, must_exist=True)
    print_json(reg.show(ref).model_dump())
    try:
        pin = f"pin: {entry_digest(reg, ref)} (cache pull --digest, deploy --engine-digest)"
    except ToolchainError as e:  # an entry a pull would refuse anyway (legacy, no record): nothing to pin
        pin = f"pin: none ({e.message})"
    err.print(pin, highlight=False, markup=False)


@app.command(short_help="Restore an entry into DEST, checking every file's digest.")
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
    require_signature: Annotated[
        bool,
        typer.Option(
            "--require-signature",
            help="Refuse the entry unless its signature verifies with --public-key (checked before DEST is written)",
        ),
    ] = False,
    public_key: PublicKeyOpt = None,
    digest: Annotated[
        str | None,
        typer.Option(
            "--digest",
            help="Refuse the entry unless its signed digest (oci://: manifest digest) is this sha256:HEX",
        ),
    ] = None,
    allow_legacy: AllowLegacyOpt = False,
) -> None:
    """Restore an entry into DEST, hashing every restored file against its digest.

    A local registry gives independent copies (reflinks where the file system has them) unless --link.
    With --public-key (or TOOLCHAIN_VERIFY_KEY) the entry must carry a valid signature of that key: an
    unsigned entry, another key, a signature of another digest, or a signature older than the newest this
    machine has seen for the key (a rollback) exits 6 and nothing is written. --digest pins one manifest.

    Examples:
      toolchain cache pull 3f2a9c1d ./engine
      toolchain cache pull 3f2a9c1d ./engine --require-signature --public-key cosign.pub
    """
    from toolchain.cli.render import Stages, err, plural
    from toolchain.digest import pinned_digest
    from toolchain.registry import open_registry
    from toolchain.registry.signing import verifier_for

    pin = pinned_digest(digest, "--digest") if digest is not None else None
    verifier = verifier_for(public_key, require=require_signature)
    r = open_registry(registry, must_exist=True, allow_legacy=allow_legacy)
    stages = r.progress = Stages()
    m = r.get(ref, dest, force=force, link=link, verifier=verifier, pin=pin)
    stages.close()
    signed = f", signature verified with {verifier.path}" if verifier is not None else ""
    err.print(
        f"restored {m.key[:16]} ({plural(len(m.files), 'file')}) from {r.url} to {dest}{signed}",
        highlight=False,
        markup=False,
    )
    if r.served_legacy(m.key):
        err.print("note: legacy entry, no record: trusted on its content annotation only", highlight=False)
    if verifier is None:
        err.print("note: no signature checked (--public-key PUB requires one)", highlight=False)


@app.command(short_help="Store a directory as one entry (--sign signs it).")
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
    sign: SignOpt = None,
) -> None:
    """Store a directory as one entry (blobs first, manifest last); an existing key keeps its content
    unless --force. With --sign the entry is signed as stored (docs/signing.md).

    Examples:
      toolchain cache push ./engine --key 0c767363 --registry s3://bucket/engines
      toolchain cache push ./engine --key $(toolchain spec expand SPEC --json | jq -r .cells[0].engine_key)
      toolchain cache push ./engine --sign cosign.key --registry oci://registry.example.com/llm/engines
    """
    from toolchain.cli.render import Stages, err, out, plural
    from toolchain.errors import UserInputError
    from toolchain.registry import open_registry
    from toolchain.registry.signing import signer_for
    from toolchain.registry.store import key_for_push

    if not src.is_dir():
        raise UserInputError(f"{src} is not a directory")
    signer = signer_for(sign)  # a wrong password or a bad key file fails before anything is uploaded
    r = open_registry(registry)
    stages = r.progress = Stages()
    full = key_for_push(key, r) if key else None
    m = r.put(full, src, kind=kind, provenance={"pushed_from": str(src.resolve())}, force=force, signer=signer)
    stages.close()  # the bars end their line before the key is printed on its own
    out.print(m.key, highlight=False)
    signed = f", signed with {signer.path}" if signer is not None else ""
    err.print(f"stored {plural(len(m.files), 'file')} in {r.url}{signed}", highlight=False, markup=False)


@app.command("sign", short_help="Sign an entry the registry holds (cosign format).")
def sign_(ref: RefArg, sign: SignOpt = None, registry: RegistryOpt = None) -> None:
    """Sign an entry the registry holds (a cosign signature on oci://, manifests/KEY.sig elsewhere).

    Examples: toolchain cache sign 3f2a9c1d --sign cosign.key --registry oci://registry.example.com/llm/engines
    """
    from toolchain.cli.render import err
    from toolchain.errors import UserInputError
    from toolchain.registry import open_registry
    from toolchain.registry.signing import sign_entry, signer_for

    signer = signer_for(sign)
    if signer is None:
        raise UserInputError("no signing key given", "pass --sign cosign.key, or set TOOLCHAIN_SIGNING_KEY")
    r = open_registry(registry, must_exist=True)
    digest = sign_entry(r, ref, signer)
    err.print(f"signed {digest} in {r.url} with {signer.path}", highlight=False, markup=False)


@app.command(short_help="Make an ECDSA P-256 key pair: cosign.key and cosign.pub.")
def keygen(out_dir: Annotated[Path, typer.Argument(help="Directory to write cosign.key and cosign.pub into")]) -> None:
    """Make an ECDSA P-256 key pair in cosign's format: cosign.key (encrypted with TOOLCHAIN_SIGNING_PASSWORD
    or COSIGN_PASSWORD) and cosign.pub.

    Examples: TOOLCHAIN_SIGNING_PASSWORD=... toolchain cache keygen ./keys
    """
    from toolchain import settings
    from toolchain.cli.render import err
    from toolchain.registry.signing import keygen as make_pair

    priv, pub = make_pair(out_dir)
    err.print(f"wrote {priv} (private, mode 600) and {pub} (public)", highlight=False, markup=False)
    if not settings.signing_password():
        err.print(
            "warning: the private key is encrypted with an empty password (set TOOLCHAIN_SIGNING_PASSWORD)",
            highlight=False,
            markup=False,
        )


@app.command(short_help="Re-hash every blob; with --public-key, check signatures.")
def verify(
    registry: RegistryOpt = None,
    repair: Annotated[bool, typer.Option("--repair", help="Remove corrupt entries and blobs")] = False,
    public_key: PublicKeyOpt = None,
    json_out: JsonOpt = False,
    allow_legacy: AllowLegacyOpt = False,
) -> None:
    """Re-hash every blob of every entry; exit 1 when any entry is corrupt (unless repaired): a blob that
    does not match, or (oci://) a manifest that lacks or contradicts its record. With --public-key every
    entry must also carry a valid signature of that key: exit 6 when one does not.

    Examples: toolchain cache verify --public-key cosign.pub --registry oci://registry.example.com/llm/engines
    """
    from toolchain.cli.render import err, plural, print_json
    from toolchain.errors import CorruptArtifactError, SignatureError
    from toolchain.registry import open_registry
    from toolchain.registry.signing import verifier_for, verify_signatures

    verifier = verifier_for(public_key, require=False)
    r = open_registry(registry, must_exist=True, allow_legacy=allow_legacy)
    rep = r.verify(repair=repair)
    unsigned = verify_signatures(r, verifier) if verifier is not None else {}
    if json_out:
        doc = {"checked": rep.checked, "corrupt": rep.corrupt, "removed": rep.removed}
        print_json({**doc, "signatures": unsigned} if verifier is not None else doc)
    for k, why in rep.corrupt.items():
        err.print(f"corrupt {k[:16]}: {why}" + (" (removed)" if k in rep.removed else ""), highlight=False)
    for k, why in unsigned.items():
        err.print(f"signature {k[:16]}: {why}", highlight=False, markup=False)
    tail = f", {len(unsigned)} without a valid signature" if verifier is not None else ""
    err.print(f"checked {plural(rep.checked, 'entry', 'entries')}, {len(rep.corrupt)} corrupt{tail}", highlight=False)
    if rep.corrupt and not repair:
        raise CorruptArtifactError(f"{len(rep.corrupt)} corrupt entries")
    if unsigned:
        raise SignatureError(
            f"{len(unsigned)} of {rep.checked} entries have no valid signature of {verifier.path if verifier else ''}",
            f"sign them (`toolchain cache sign REF --sign cosign.key --registry {r.url}`) or remove them",
        )


@app.command(short_help="Remove unreferenced blobs, stale uploads, dangling tags.")
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
    """Remove unreferenced blobs, temp files of killed pushes, stale multipart uploads, dangling tags, and the
    staging directories killed pulls left on this machine: shows the plan, asks unless --yes. Blobs younger than
    --grace are kept (a push may be using them); a staging directory a live pull holds is kept."""
    from toolchain.cli.render import err, fmt_bytes, print_json
    from toolchain.registry import open_registry

    r = open_registry(registry, must_exist=True)
    plan = r.gc_plan(grace_s=grace)
    summary = {
        "blobs": len(plan.blobs),
        "tmp": len(plan.tmp),
        "uploads": len(plan.uploads),
        "tags": len(plan.tags),
        "staging": len(plan.staging),
        "bytes": plan.bytes,
    }
    if json_out:
        print_json({**summary, "dry_run": dry_run, "note": plan.note})
    err.print(
        f"gc plan for {r.url}: {len(plan.blobs)} unreferenced blobs, {len(plan.tmp)} stale temp files, "
        f"{len(plan.uploads)} unfinished uploads, {len(plan.tags)} dangling tags, {len(plan.staging)} staging "
        f"directories of killed pulls; frees {fmt_bytes(plan.bytes)}",
        highlight=False,
        markup=False,
    )
    if plan.note:
        err.print(f"note: {plan.note}", highlight=False, markup=False)
    for path, size in plan.staging:
        err.print(f"  staging {path} ({fmt_bytes(size)})", highlight=False, markup=False)
    if dry_run or not (plan.blobs or plan.tmp or plan.tags or plan.uploads or plan.staging):
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
