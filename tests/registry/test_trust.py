"""The registry's trust policy (docs/signing.md "Trust policy") against a real CNCF distribution registry on
127.0.0.1: what a pull vouches for, and what it refuses.

Origin: a toolchain key's manifest must carry the toolchain's record and match it. A manifest forged through
the API (record stripped, config emptied, layers swapped and the content annotation recomputed, or another
client's artifact put under the key) is refused with exit 1 and reported by `cache verify`; an entry pushed
before records is refused with the fix (re-push) unless `--allow-legacy`; a foreign artifact pulls only by its
own manifest digest.

Freshness: a signature names its signer and a sequence; `push --force --sign` retires the older manifest's
signature; a pull refuses a signed manifest older than the newest this cache has seen for the key (exit 6),
and `pull --digest` pins one manifest in a fresh cache.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from toolchain.registry import open_registry
from toolchain.registry.oci.mapping import A_CONTENT, A_RECORD, EMPTY, MANIFEST_MT, TITLE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
KEY = "7" * 64


def _engine(d: Path, salt: bytes = b"") -> Path:
    """Files unique to the test (the session's registry shares blobs across repositories)."""
    salt += os.urandom(16)
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"build_config": {"max_batch_size": 8}, "salt": salt.hex()}))
    (d / "rank0.engine").write_bytes(b"rank0" * 5000 + salt)
    (d / "rank1.engine").write_bytes(b"rank1" * 5000 + salt)
    return d


def _base(oci_url: str) -> str:
    host, repo = oci_url.removeprefix("oci://").split("/", 1)
    return f"http://{host}/v2/{repo}"


def _get(oci_url: str, ref: str) -> tuple[dict[str, Any], bytes]:
    import httpx

    resp = httpx.get(f"{_base(oci_url)}/manifests/{ref}", headers={"Accept": MANIFEST_MT})
    assert resp.status_code == 200, resp.text
    return resp.json(), resp.content


def _put(oci_url: str, ref: str, raw: bytes) -> str:
    import httpx

    resp = httpx.put(f"{_base(oci_url)}/manifests/{ref}", content=raw, headers={"Content-Type": MANIFEST_MT})
    assert resp.status_code == 201, resp.text
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _layer(m: dict[str, Any], title: str) -> dict[str, Any]:
    return next(la for la in m["layers"] if la.get("annotations", {}).get(TITLE) == title)


def _recompute_content(m: dict[str, Any]) -> None:
    """What a forger who knows the layout does: the content annotation made to agree with the forged layers."""
    files = {
        la["annotations"][TITLE]: [la["digest"], la["annotations"].get("dev.toolchain.executable") == "true"]
        for la in m["layers"]
    }
    canon = json.dumps(dict(sorted(files.items())), sort_keys=True, separators=(",", ":"))
    m["annotations"][A_CONTENT] = "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def _strip_record(m: dict[str, Any]) -> None:
    m["annotations"].pop(A_RECORD)
    m["config"] = dict(EMPTY)


def _swap(m: dict[str, Any]) -> None:
    a, b = _layer(m, "rank0.engine"), _layer(m, "rank1.engine")
    a["digest"], b["digest"] = b["digest"], a["digest"]


def _stripped_and_swapped(m: dict[str, Any]) -> None:
    _strip_record(m)
    _swap(m)


def _stripped_and_added(m: dict[str, Any]) -> None:
    _strip_record(m)
    extra = copy.deepcopy(_layer(m, "config.json"))
    extra["annotations"][TITLE] = "extra.json"
    m["layers"].append(extra)


def _forged_record_annotation(m: dict[str, Any]) -> None:
    m["annotations"][A_RECORD] = EMPTY["digest"]
    m["config"] = dict(EMPTY)
    _swap(m)


def _foreign(m: dict[str, Any]) -> None:
    """Another client's (ORAS's) artifact with the entry's files, swapped: no toolchain annotation at all."""
    _swap(m)
    m["config"] = dict(EMPTY)
    m["annotations"] = {"org.opencontainers.image.created": "2025-01-01T00:00:00Z"}
    m["artifactType"] = "application/vnd.example.thing"


FORGERIES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "record-stripped-layers-swapped": (_stripped_and_swapped, "carries no record"),
    "record-stripped-layer-added": (_stripped_and_added, "carries no record"),
    "record-annotation-forged": (_forged_record_annotation, "disagree"),
    "foreign-artifact-under-the-key": (_foreign, "is not a toolchain entry"),
}


def _one_error(res: Any, code: int, match: str) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.startswith("Error: ")]
    assert res.exit_code == code, res.output
    assert len(lines) == 1 and match in lines[0], res.output
    assert "Traceback" not in res.output
    return str(lines[0])


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forged_manifest_under_a_toolchain_key_is_refused(name: str, oci_url: str, tmp_path: Path, cli: Any) -> None:
    open_registry(oci_url).put(KEY, _engine(tmp_path / "e"))
    forge, match = FORGERIES[name]
    m, _ = _get(oci_url, KEY)
    forge(m)
    if name != "foreign-artifact-under-the-key":
        _recompute_content(m)
    forged = _put(oci_url, KEY, json.dumps(m).encode())
    res = cli("cache", "pull", KEY, tmp_path / "out", "--registry", oci_url)
    _one_error(res, 1, match)
    assert not (tmp_path / "out").exists()
    rep = open_registry(oci_url).verify()
    assert rep.checked == 1 and match in rep.corrupt[KEY], rep
    res = cli("cache", "verify", "--registry", oci_url)
    assert res.exit_code == 1 and "1 corrupt" in res.output, res.output
    if name == "foreign-artifact-under-the-key":
        # listed (as a manifest that is not an entry, with its digest), and pulled by its own digest only
        res = cli("cache", "ls", "--registry", oci_url)
        assert res.exit_code == 0 and forged in res.output, res.output
        res = cli("cache", "pull", forged, tmp_path / "by-digest", "--registry", oci_url)
        assert res.exit_code == 0, res.output
        assert (tmp_path / "by-digest" / "rank0.engine").read_bytes()[:5] == b"rank1"  # what it holds, as is


def _legacy(oci_url: str, tmp_path: Path) -> Path:
    """An entry as the toolchain pushed it before records: no config record, a content annotation."""
    src = _engine(tmp_path / "e")
    open_registry(oci_url).put(KEY, src)
    m, _ = _get(oci_url, KEY)
    _strip_record(m)
    _put(oci_url, KEY, json.dumps(m).encode())
    return src


def test_an_entry_pushed_before_records_is_refused_unless_allowed(oci_url: str, tmp_path: Path, cli: Any) -> None:
    src = _legacy(oci_url, tmp_path)
    res = cli("cache", "pull", KEY, tmp_path / "out", "--registry", oci_url)
    line = _one_error(res, 1, "carries no record")
    assert "--allow-legacy" in line and "push" in line
    assert not (tmp_path / "out").exists()
    res = cli("cache", "pull", KEY, tmp_path / "out", "--registry", oci_url, "--allow-legacy")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "rank0.engine").read_bytes() == (src / "rank0.engine").read_bytes()
    assert "legacy" in res.output and "no signature" in res.output
    assert cli("cache", "verify", "--registry", oci_url).exit_code == 1
    assert cli("cache", "verify", "--registry", oci_url, "--allow-legacy").exit_code == 0
    # re-pushing (the fix the error names) writes a record: the entry then pulls without the flag
    res = cli("cache", "push", src, "--key", KEY, "--registry", oci_url, "--force")
    assert res.exit_code == 0, res.output
    assert cli("cache", "pull", KEY, tmp_path / "again", "--registry", oci_url).exit_code == 0


def test_an_unsigned_pull_says_it_checked_no_signature(oci_url: str, tmp_path: Path, cli: Any) -> None:
    open_registry(oci_url).put(KEY, _engine(tmp_path / "e"))
    res = cli("cache", "pull", KEY, tmp_path / "out", "--registry", oci_url)
    assert res.exit_code == 0, res.output
    [note] = [ln for ln in res.output.splitlines() if "no signature" in ln]
    assert len(note) <= 80 and "--public-key" in note


# --- freshness ------------------------------------------------------------------------------------------


def _pair(d: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    d.mkdir(parents=True, exist_ok=True)
    priv, pub = d / "k.key", d / "k.pub"
    priv.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    pub.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return priv, pub


@pytest.fixture
def rolled_back(oci_url: str, tmp_path: Path, cli: Any) -> dict[str, Any]:
    """v1 pushed and signed, v2 pushed over it with --force --sign, then tag KEY re-pointed at v1's manifest."""
    priv, pub = _pair(tmp_path / "keys")
    for v in ("v1", "v2"):
        res = cli(
            "cache", "push", _engine(tmp_path / v), "--key", KEY, "--registry", oci_url, "--sign", priv, "--force"
        )
        assert res.exit_code == 0, res.output
        _, raw = _get(oci_url, KEY)
        if v == "v1":
            v1_raw = raw
            v1 = "sha256:" + hashlib.sha256(raw).hexdigest()
            v1_sig = _get(oci_url, v1.replace(":", "-") + ".sig")[1]
    v2 = "sha256:" + hashlib.sha256(raw).hexdigest()
    _put(oci_url, KEY, v1_raw)
    return {"pub": pub, "v1": v1, "v2": v2, "v1_sig": v1_sig}


def test_force_sign_retires_the_older_signature(
    rolled_back: dict[str, Any], oci_url: str, tmp_path: Path, cli: Any
) -> None:
    import httpx

    sig_tag = rolled_back["v1"].replace(":", "-") + ".sig"
    assert httpx.head(f"{_base(oci_url)}/manifests/{sig_tag}", headers={"Accept": MANIFEST_MT}).status_code == 404
    res = cli("cache", "pull", KEY, tmp_path / "out", "--registry", oci_url, "--public-key", rolled_back["pub"])
    _one_error(res, 6, "carries no signature")
    assert not (tmp_path / "out").exists()


def test_a_replayed_older_signature_is_refused_as_a_rollback(
    rolled_back: dict[str, Any], oci_url: str, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the attacker kept v1's signature manifest and puts it back beside v1's manifest
    _put(oci_url, rolled_back["v1"].replace(":", "-") + ".sig", rolled_back["v1_sig"])
    pub = rolled_back["pub"]
    res = cli("cache", "pull", KEY, tmp_path / "out", "--registry", oci_url, "--public-key", pub)
    line = _one_error(res, 6, "older than")
    assert not (tmp_path / "out").exists()
    assert "rollback" in line
    # a fresh cache has seen nothing: the signature verifies, and only a pin refuses v1
    fresh = tmp_path / "fresh-cache"
    monkeypatch.setenv("TOOLCHAIN_CACHE", str(fresh))
    res = cli("cache", "pull", KEY, tmp_path / "pinned", "--registry", oci_url, "--digest", rolled_back["v2"])
    _one_error(res, 6, rolled_back["v2"][:19])
    assert not (tmp_path / "pinned").exists()
    res = cli("cache", "pull", KEY, tmp_path / "fresh", "--registry", oci_url, "--public-key", pub)
    assert res.exit_code == 0, res.output
    # and once it has seen v2, v1 is refused there too
    _put(oci_url, KEY, _get(oci_url, rolled_back["v2"])[1])
    assert cli("cache", "pull", KEY, tmp_path / "out-v2", "--registry", oci_url, "--public-key", pub).exit_code == 0
    _put(oci_url, KEY, _get(oci_url, rolled_back["v1"])[1])
    res = cli("cache", "pull", KEY, tmp_path / "out-v1", "--registry", oci_url, "--public-key", pub)
    _one_error(res, 6, "older than")


def test_a_pin_accepts_the_manifest_it_names(oci_url: str, tmp_path: Path, cli: Any) -> None:
    open_registry(oci_url).put(KEY, _engine(tmp_path / "e"))
    digest = "sha256:" + hashlib.sha256(_get(oci_url, KEY)[1]).hexdigest()
    res = cli("cache", "pull", KEY, tmp_path / "out", "--registry", oci_url, "--digest", digest)
    assert res.exit_code == 0, res.output
    res = cli("cache", "pull", KEY, tmp_path / "bad", "--registry", oci_url, "--digest", "sha256:12")
    _one_error(res, 2, "--digest")
