"""Tampered OCI entries against a real CNCF distribution registry on 127.0.0.1: nothing is served.

Two ways in. (1) The registry's storage is edited under it (the manifest blob's bytes change, the tag still
names the old digest, which the registry goes on sending as ``Docker-Content-Digest``). (2) A consistent
manifest is PUT over the tag through the API (its digest is then right, so only the toolchain's record of
the entry, the manifest's config blob, can tell). Each tamper: ``get`` refuses with a one-line error naming
what differs, writes nothing, and ``verify`` counts the entry corrupt.
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

from tests.servers import RegistryServer
from toolchain.errors import ManifestError
from toolchain.registry import open_registry
from toolchain.registry.oci.mapping import A_CONTENT, A_RECORD, MANIFEST_MT, TITLE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
KEY = "e" * 64
OTHER = "f" * 64


def _engine(d: Path, salt: bytes = b"") -> Path:
    """Files unique to the test: the session's registry shares blobs across repositories, and a blob one test
    tampered with must not be another test's."""
    salt += os.urandom(16)
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"build_config": {"max_batch_size": 8}, "salt": salt.hex()}))
    (d / "rank0.engine").write_bytes(b"rank0" * 5000 + salt)
    (d / "rank1.engine").write_bytes(b"rank1" * 5000 + salt)
    return d


def _manifest(oci_url: str, ref: str) -> tuple[dict[str, Any], bytes]:
    import httpx

    b: Any = open_registry(oci_url).backend
    resp = httpx.get(f"{b.base}/manifests/{ref}", headers={"Accept": MANIFEST_MT})
    return resp.json(), resp.content


def _put_manifest(oci_url: str, ref: str, m: dict[str, Any]) -> None:
    import httpx

    b: Any = open_registry(oci_url).backend
    resp = httpx.put(f"{b.base}/manifests/{ref}", content=json.dumps(m).encode(), headers={"Content-Type": MANIFEST_MT})
    assert resp.status_code == 201, resp.text


def _layer(m: dict[str, Any], title: str) -> dict[str, Any]:
    return next(la for la in m["layers"] if la.get("annotations", {}).get(TITLE) == title)


def _retitle(m: dict[str, Any]) -> None:
    _layer(m, "rank0.engine")["annotations"][TITLE] = "moved.engine"


def _swap(m: dict[str, Any]) -> None:
    a, b = _layer(m, "rank0.engine"), _layer(m, "rank1.engine")
    a["digest"], b["digest"] = b["digest"], a["digest"]


def _drop(m: dict[str, Any]) -> None:
    m["layers"].remove(_layer(m, "rank1.engine"))


def _add(m: dict[str, Any]) -> None:
    extra = copy.deepcopy(_layer(m, "config.json"))
    extra["annotations"][TITLE] = "extra.json"
    m["layers"].append(extra)


def _sizes(m: dict[str, Any]) -> None:
    _layer(m, "config.json")["size"] += 1


def _executable(m: dict[str, Any]) -> None:
    _layer(m, "config.json")["annotations"]["dev.toolchain.executable"] = "true"


API_TAMPERS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "retitle": (_retitle, "'moved.engine' is in the manifest but not in the entry's record"),
    "swap-digests": (_swap, "'rank0.engine' has another digest in the manifest"),
    "drop-layer": (_drop, "'rank1.engine' is in the entry's record but not in its manifest"),
    "add-layer": (_add, "'extra.json' is in the manifest but not in the entry's record"),
    "rewrite-size": (_sizes, "'config.json' has another size"),
    "executable-bit": (_executable, "'config.json' has another executable"),
}


def _refused(oci_url: str, tmp_path: Path, match: str, cli: Any) -> None:
    r = open_registry(oci_url)
    with pytest.raises(ManifestError, match=match):
        r.get(KEY, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]  # no partial directory either
    rep = r.verify()
    assert KEY in rep.corrupt, rep
    res = cli("cache", "pull", KEY, tmp_path / "out2", "--registry", oci_url)
    lines = [ln for ln in res.output.splitlines() if ln.startswith("Error: ")]
    assert res.exit_code == 1 and len(lines) == 1 and "Traceback" not in res.output, res.output
    assert not (tmp_path / "out2").exists()


@pytest.mark.parametrize("name", sorted(API_TAMPERS))
def test_a_consistent_manifest_put_over_the_tag_is_refused_by_the_record(
    name: str, oci_url: str, tmp_path: Path, cli: Any
) -> None:
    open_registry(oci_url).put(KEY, _engine(tmp_path / "e"))
    tamper, match = API_TAMPERS[name]
    m, _ = _manifest(oci_url, KEY)
    tamper(m)
    # a tamperer who knows the layout also rewrites the content annotation: only the record can tell
    files = {
        la["annotations"][TITLE]: [la["digest"], la["annotations"].get("dev.toolchain.executable") == "true"]
        for la in m["layers"]
    }
    canon = json.dumps(dict(sorted(files.items())), sort_keys=True, separators=(",", ":"))
    m["annotations"][A_CONTENT] = "sha256:" + hashlib.sha256(canon.encode()).hexdigest()
    _put_manifest(oci_url, KEY, m)
    _refused(oci_url, tmp_path, match, cli)


def test_the_record_of_another_entry_is_refused(oci_url: str, tmp_path: Path, cli: Any) -> None:
    r = open_registry(oci_url)
    r.put(KEY, _engine(tmp_path / "e"))
    r.put(OTHER, _engine(tmp_path / "o", salt=b"other"))
    m, _ = _manifest(oci_url, KEY)
    other, _ = _manifest(oci_url, OTHER)
    m["config"] = other["config"]
    m["annotations"][A_RECORD] = other["config"]["digest"]
    _put_manifest(oci_url, KEY, m)
    _refused(oci_url, tmp_path, "the record is of entry ffffffffffffffff", cli)


def test_a_record_that_disagrees_with_its_annotation_is_refused(oci_url: str, tmp_path: Path, cli: Any) -> None:
    r = open_registry(oci_url)
    r.put(KEY, _engine(tmp_path / "e"))
    r.put(OTHER, _engine(tmp_path / "o", salt=b"other"))
    m, _ = _manifest(oci_url, KEY)
    m["config"] = _manifest(oci_url, OTHER)[0]["config"]
    _put_manifest(oci_url, KEY, m)
    _refused(oci_url, tmp_path, "annotation disagree", cli)


STORAGE_TAMPERS: dict[str, Callable[[bytes], bytes]] = {
    "retitle": lambda raw: raw.replace(b'"rank0.engine"', b'"moved.engine"'),
    "swap-digests": lambda raw: _swap_bytes(raw),
    "bit-flip-rank0-to-rank1": lambda raw: raw.replace(b'"rank0.engine"', b'"rank1.engine"', 1),
}


def _swap_bytes(raw: bytes) -> bytes:
    m = json.loads(raw)
    _swap(m)
    return json.dumps(m, separators=(",", ":"), sort_keys=True).encode()


@pytest.mark.parametrize("name", sorted(STORAGE_TAMPERS))
def test_a_manifest_edited_in_the_registry_storage_is_refused(
    name: str, oci_url: str, oci_server: RegistryServer, tmp_path: Path, cli: Any
) -> None:
    open_registry(oci_url).put(KEY, _engine(tmp_path / "e"))
    _, raw = _manifest(oci_url, KEY)
    data = oci_server.blob_data("sha256:" + hashlib.sha256(raw).hexdigest())
    assert data.read_bytes() == raw
    new = STORAGE_TAMPERS[name](raw)
    assert new != raw
    data.write_bytes(new)
    _refused(oci_url, tmp_path, "was changed in the registry's storage", cli)


def test_a_record_blob_edited_in_the_registry_storage_is_refused(
    oci_url: str, oci_server: RegistryServer, tmp_path: Path, cli: Any
) -> None:
    open_registry(oci_url).put(KEY, _engine(tmp_path / "e"))
    m, _ = _manifest(oci_url, KEY)
    data = oci_server.blob_data(m["config"]["digest"])
    rec = bytearray(data.read_bytes())
    at = rec.index(b"rank0.engine")
    rec[at + 4] ^= 0x03  # rank0 -> rank3
    data.write_bytes(bytes(rec))
    _refused(oci_url, tmp_path, "record blob .* does not match its digest", cli)


def test_an_untampered_entry_still_pulls_and_verifies(oci_url: str, tmp_path: Path) -> None:
    r = open_registry(oci_url)
    src = _engine(tmp_path / "e")
    r.put(KEY, src)
    r.get(KEY, tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == sorted(os.listdir(src))
    assert r.verify().corrupt == {}
