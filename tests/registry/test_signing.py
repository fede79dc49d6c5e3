"""Signed entries (docs/signing.md) on every backend: local, S3 (moto) and OCI (Debian's docker-registry),
all on 127.0.0.1.

A pull that requires a signature checks it before anything is written: a good key restores; another key,
an unsigned entry, a signature copied from another entry and a record changed after signing each exit 6
with one line, and neither DEST nor a partial directory beside it appears. Keys are read in cosign's own
format, checked against keys and vectors from cosign's and go-securesystemslib's own tests
(tests/reference/cosign_keys.json); the OCI signature is checked the way cosign's spec says a verifier
finds and checks it, without the product's verifier.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from tests.conftest import REPO
from toolchain.errors import SignatureError, SigningKeyError
from toolchain.registry import open_registry
from toolchain.registry.store import manifest_path

pytestmark = pytest.mark.timeout(300)
REF = json.loads((REPO / "tests" / "reference" / "cosign_keys.json").read_text())
KEY_A = "a" * 64
KEY_B = "b" * 64


def _engine(d: Path) -> Path:
    salt = os.urandom(16)  # the session's OCI registry shares blobs across repositories
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"build_config": {"max_batch_size": 8}, "salt": salt.hex()}))
    (d / "rank0.engine").write_bytes(b"rank0" * 4000 + salt)
    return d


def _pair(d: Path, name: str) -> tuple[Path, Path]:
    """A P-256 key pair as PEM PKCS #8 + PKIX (the unencrypted forms every tool reads)."""
    key = ec.generate_private_key(ec.SECP256R1())
    d.mkdir(parents=True, exist_ok=True)
    priv, pub = d / f"{name}.key", d / f"{name}.pub"
    priv.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    pub.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return priv, pub


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    priv, pub = _pair(tmp_path / "keys", "good")
    _, other = _pair(tmp_path / "keys", "other")
    return {"priv": priv, "pub": pub, "other_pub": other}


def _one_error(res: Any, code: int, match: str) -> None:
    lines = [ln for ln in res.output.splitlines() if ln.startswith("Error: ")]
    assert res.exit_code == code, res.output
    assert len(lines) == 1 and match in lines[0], res.output
    assert "Traceback" not in res.output


def _nothing_written(dest: Path) -> None:
    assert not dest.exists()
    assert not [p for p in dest.parent.iterdir() if p.name.startswith(f".{dest.name}")]  # no partial either


def _push(cli: Any, url: str, src: Path, key: str, priv: Path | None) -> None:
    args = ["cache", "push", src, "--key", key, "--registry", url]
    res = cli(*args, *(["--sign", priv] if priv else []))
    assert res.exit_code == 0, res.output


def _pull(cli: Any, url: str, key: str, dest: Path, pub: Path) -> Any:
    return cli("cache", "pull", key, dest, "--registry", url, "--require-signature", "--public-key", pub)


# --- every backend ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_signed_entry_pulls_with_its_public_key(
    registry_url: str, tmp_path: Path, keys: dict[str, Path], cli: Any
) -> None:
    src = _engine(tmp_path / "e")
    _push(cli, registry_url, src, KEY_A, keys["priv"])
    res = _pull(cli, registry_url, KEY_A, tmp_path / "out", keys["pub"])
    assert res.exit_code == 0, res.output
    assert "signature verified" in res.output
    assert (tmp_path / "out" / "rank0.engine").read_bytes() == (src / "rank0.engine").read_bytes()
    res = cli("cache", "verify", "--registry", registry_url, "--public-key", keys["pub"])
    assert res.exit_code == 0 and "0 without a valid signature" in res.output, res.output


@pytest.mark.slow
def test_another_key_is_refused(registry_url: str, tmp_path: Path, keys: dict[str, Path], cli: Any) -> None:
    _push(cli, registry_url, _engine(tmp_path / "e"), KEY_A, keys["priv"])
    res = _pull(cli, registry_url, KEY_A, tmp_path / "out", keys["other_pub"])
    _one_error(res, 6, "verifies with")
    _nothing_written(tmp_path / "out")
    res = cli("cache", "verify", "--registry", registry_url, "--public-key", keys["other_pub"])
    assert res.exit_code == 6, res.output


def test_an_unsigned_entry_is_refused_when_a_signature_is_required(
    registry_url: str, tmp_path: Path, keys: dict[str, Path], cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _push(cli, registry_url, _engine(tmp_path / "e"), KEY_A, None)
    res = _pull(cli, registry_url, KEY_A, tmp_path / "out", keys["pub"])
    _one_error(res, 6, "carries no signature")
    _nothing_written(tmp_path / "out")
    # the environment's key requires it just the same (a deployment sets it once)
    monkeypatch.setenv("TOOLCHAIN_VERIFY_KEY", str(keys["pub"]))
    res = cli("cache", "pull", KEY_A, tmp_path / "out", "--registry", registry_url)
    _one_error(res, 6, "carries no signature")
    _nothing_written(tmp_path / "out")
    res = cli("cache", "verify", "--registry", registry_url)
    assert res.exit_code == 6 and "1 of 1 entries" in res.output, res.output


def test_a_signature_copied_from_another_entry_is_refused(
    registry_url: str, tmp_path: Path, keys: dict[str, Path], cli: Any
) -> None:
    from toolchain.registry import signing

    _push(cli, registry_url, _engine(tmp_path / "a"), KEY_A, keys["priv"])
    _push(cli, registry_url, _engine(tmp_path / "b"), KEY_B, None)
    r = open_registry(registry_url)
    _, subject_a = signing._subject(r, KEY_A)
    _, subject_b = signing._subject(r, KEY_B)
    assert subject_a != subject_b
    [(data, sig)] = signing._read_signatures(r, KEY_A, subject_a)
    signing._write_signature(r, KEY_B, subject_b, data, sig)  # A's signature, stored where B's belongs
    res = _pull(cli, registry_url, KEY_B, tmp_path / "out", keys["pub"])
    _one_error(res, 6, f"is of {subject_a[:23]}, not of the entry's {subject_b[:23]}")
    _nothing_written(tmp_path / "out")
    assert _pull(cli, registry_url, KEY_A, tmp_path / "out-a", keys["pub"]).exit_code == 0


def test_a_record_changed_after_signing_is_refused(
    registry_url: str, tmp_path: Path, keys: dict[str, Path], cli: Any
) -> None:
    """A consistent rewrite of the record (every content check still passes: only the provenance differs)
    is served without a signature requirement, and refused with one."""
    _push(cli, registry_url, _engine(tmp_path / "e"), KEY_A, keys["priv"])
    r = open_registry(registry_url)
    record = json.loads(r.backend.read_bytes(manifest_path(KEY_A)))
    record["provenance"] = {"gpu": {"name": "NVIDIA H100 80GB HBM3"}, "pushed_from": "/somewhere/else"}
    r.backend.write_bytes(manifest_path(KEY_A), json.dumps(record).encode())
    plain = cli("cache", "pull", KEY_A, tmp_path / "plain", "--registry", registry_url)
    assert plain.exit_code == 0, plain.output  # the content is intact: only the signature can tell
    res = _pull(cli, registry_url, KEY_A, tmp_path / "out", keys["pub"])
    _one_error(res, 6, "changed after it was signed")
    _nothing_written(tmp_path / "out")


def test_the_library_refuses_before_writing(registry_url: str, tmp_path: Path, keys: dict[str, Path]) -> None:
    from toolchain.registry.signing import load_verifier

    r = open_registry(registry_url)
    r.put(KEY_A, _engine(tmp_path / "e"))
    with pytest.raises(SignatureError, match="carries no signature"):
        r.get(KEY_A, tmp_path / "out", verifier=load_verifier(keys["pub"]))
    _nothing_written(tmp_path / "out")


# --- OCI: the cosign layout, checked as cosign's spec says a verifier does -----------------------------


def _cosign_key(tmp_path: Path) -> tuple[Path, Path]:
    """cosign's own test key (written by cosign, password 'hello') and its public key."""
    priv = tmp_path / "cosign.key"
    priv.write_text(REF["cosign_key"]["pem"])
    from toolchain.registry.signing import decrypt_cosign

    body = "".join(REF["cosign_key"]["pem"].strip().splitlines()[1:-1])
    der = decrypt_cosign(base64.b64decode(body), REF["cosign_key"]["password"].encode(), "ref")
    key = serialization.load_der_private_key(der, None)
    pub = tmp_path / "cosign.pub"
    pub.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return priv, pub


@pytest.mark.slow
def test_the_oci_signature_is_where_and_what_cosign_verifies(
    oci_url: str, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx

    priv, pub = _cosign_key(tmp_path)
    monkeypatch.setenv("COSIGN_PASSWORD", REF["cosign_key"]["password"])
    _push(cli, oci_url, _engine(tmp_path / "e"), KEY_A, priv)
    b: Any = open_registry(oci_url).backend
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
    digest = httpx.head(f"{b.base}/manifests/{KEY_A}", headers=accept).headers["Docker-Content-Digest"]
    # tag-based discovery: sha256:<hex> -> sha256-<hex>.sig (SIGNATURE_SPEC.md "Tag-based Discovery")
    resp = httpx.get(f"{b.base}/manifests/{digest.replace(':', '-')}.sig", headers=accept)
    assert resp.status_code == 200, resp.text
    [layer] = resp.json()["layers"]
    assert layer["mediaType"] == "application/vnd.dev.cosign.simplesigning.v1+json"
    data = httpx.get(f"{b.base}/blobs/{layer['digest']}").content
    assert "sha256:" + hashlib.sha256(data).hexdigest() == layer["digest"] and len(data) == layer["size"]
    sig = base64.b64decode(layer["annotations"]["dev.cosignproject.cosign/signature"])
    key = serialization.load_pem_public_key(pub.read_bytes())
    assert isinstance(key, ec.EllipticCurvePublicKey)
    key.verify(sig, data, ec.ECDSA(hashes.SHA256()))  # raises unless the signature is good
    payload = json.loads(data)
    assert payload["critical"]["type"] == "cosign container image signature"
    assert payload["critical"]["image"]["docker-manifest-digest"] == digest
    # the signature manifest is neither an entry nor a tag of the toolchain's, and gc leaves it alone
    r = open_registry(oci_url)
    assert r.keys() == [KEY_A] and r.tags() == {}
    assert r.verify().corrupt == {} and r.gc_plan().tags == []
    res = _pull(cli, oci_url, KEY_A, tmp_path / "out", pub)
    assert res.exit_code == 0, res.output


@pytest.mark.slow
def test_a_second_signer_keeps_the_first_signature(
    registry_url: str, tmp_path: Path, keys: dict[str, Path], cli: Any
) -> None:
    from toolchain.registry import signing

    priv2, pub2 = _pair(tmp_path / "keys", "second")
    src = _engine(tmp_path / "e")
    _push(cli, registry_url, src, KEY_A, keys["priv"])
    for _ in range(2):  # signing again with the same key adds nothing
        assert cli("cache", "sign", KEY_A, "--sign", priv2, "--registry", registry_url).exit_code == 0
    _push(cli, registry_url, src, KEY_A, keys["priv"])  # the same content pushed and signed again: nothing added
    for pub in (keys["pub"], pub2):
        assert _pull(cli, registry_url, KEY_A, tmp_path / f"out-{pub.stem}", pub).exit_code == 0
    r = open_registry(registry_url)
    _, subject = signing._subject(r, KEY_A)
    assert len(signing._read_signatures(r, KEY_A, subject)) == 2


def test_the_environment_signs_every_put_and_requires_every_get(
    tmp_path: Path, keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TOOLCHAIN_SIGNING_KEY / TOOLCHAIN_VERIFY_KEY reach the library, so `build` and every other restore
    (not only `cache push` / `cache pull`) sign and check."""
    r = open_registry(str(tmp_path / "reg"))
    r.put(KEY_B, _engine(tmp_path / "b"))  # unsigned
    monkeypatch.setenv("TOOLCHAIN_SIGNING_KEY", str(keys["priv"]))
    r.put(KEY_A, _engine(tmp_path / "a"))
    monkeypatch.delenv("TOOLCHAIN_SIGNING_KEY")
    monkeypatch.setenv("TOOLCHAIN_VERIFY_KEY", str(keys["pub"]))
    assert r.get(KEY_A, tmp_path / "out-a").key == KEY_A
    with pytest.raises(SignatureError, match="carries no signature"):
        r.get(KEY_B, tmp_path / "out-b")
    _nothing_written(tmp_path / "out-b")


# --- keys -------------------------------------------------------------------------------------------


def test_go_securesystemslib_vectors_decrypt() -> None:
    from toolchain.registry.signing import decrypt_cosign

    vec = REF["encrypted_vectors"]
    for case in vec["cases"]:
        assert decrypt_cosign(case["document"].encode(), vec["passphrase"].encode(), "v").decode() == case["plaintext"]
    with pytest.raises(SigningKeyError, match="wrong password"):
        decrypt_cosign(vec["cases"][0]["document"].encode(), b"supersecreT", "v")
    with pytest.raises(SigningKeyError, match="unsupported scrypt parameters"):
        decrypt_cosign(vec["unsupported"].encode(), vec["passphrase"].encode(), "v")


def test_cosigns_own_key_loads_with_its_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any) -> None:
    from toolchain.registry.signing import load_signer

    priv, _ = _cosign_key(tmp_path)
    monkeypatch.setenv("TOOLCHAIN_SIGNING_PASSWORD", "hello")
    assert load_signer(priv).key.curve.name == "secp256r1"
    monkeypatch.setenv("TOOLCHAIN_SIGNING_PASSWORD", "wrong")
    res = cli("cache", "push", _engine(tmp_path / "e"), "--sign", priv, "--registry", tmp_path / "reg")
    _one_error(res, 2, "wrong password")
    assert not (tmp_path / "reg" / "manifests").exists()  # the key is read before anything is stored


def test_keygen_writes_a_cosign_key_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any) -> None:
    from toolchain.registry.signing import decrypt_cosign

    monkeypatch.setenv("TOOLCHAIN_SIGNING_PASSWORD", "s3cret")
    res = cli("cache", "keygen", tmp_path / "k")
    assert res.exit_code == 0, res.output
    text = (tmp_path / "k" / "cosign.key").read_text()
    assert text.startswith("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    assert (tmp_path / "k" / "cosign.key").stat().st_mode & 0o077 == 0
    doc = json.loads(base64.b64decode("".join(text.strip().splitlines()[1:-1])))
    assert doc["kdf"]["name"] == "scrypt" and doc["cipher"]["name"] == "nacl/secretbox"
    assert len(base64.b64decode(doc["kdf"]["salt"])) == 32 and len(base64.b64decode(doc["cipher"]["nonce"])) == 24
    der = decrypt_cosign(json.dumps(doc).encode(), b"s3cret", "k")
    key = serialization.load_der_private_key(der, None)
    pub = serialization.load_pem_public_key((tmp_path / "k" / "cosign.pub").read_bytes())
    assert key.public_key().public_numbers() == pub.public_numbers()  # type: ignore[union-attr]
    _one_error(cli("cache", "keygen", tmp_path / "k"), 2, "not empty")


def test_key_mistakes_are_one_line_exit_2(tmp_path: Path, keys: dict[str, Path], cli: Any) -> None:
    src = _engine(tmp_path / "e")
    reg = tmp_path / "reg"
    bad = tmp_path / "bad.key"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    _one_error(cli("cache", "push", src, "--sign", bad, "--registry", reg), 2, "is malformed")
    _one_error(cli("cache", "push", src, "--sign", tmp_path / "nope.key", "--registry", reg), 2, "does not exist")
    _one_error(cli("cache", "push", src, "--sign", keys["pub"], "--registry", reg), 2, "is a public key")
    edkey = tmp_path / "ed.key"
    edkey.write_bytes(
        ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    _one_error(cli("cache", "push", src, "--sign", edkey, "--registry", reg), 2, "ECDSA P-256")
    assert cli("cache", "push", src, "--registry", reg).exit_code == 0
    dest = tmp_path / "out"
    _one_error(cli("cache", "pull", "e" * 12, dest, "--registry", reg, "--require-signature"), 2, "--public-key")
    _one_error(cli("cache", "pull", "e" * 12, dest, "--registry", reg, "--public-key", bad), 2, "not a PEM 'PUBLIC")
    garbled = tmp_path / "garbled.pub"
    garbled.write_text("-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n")
    _one_error(cli("cache", "pull", "e" * 12, dest, "--registry", reg, "--public-key", garbled), 2, "is malformed")
    _nothing_written(dest)


def test_an_encrypted_pkcs8_key_needs_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: dict[str, Path], cli: Any
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    enc = tmp_path / "enc.key"
    enc.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")
        )
    )
    src, reg = _engine(tmp_path / "e"), tmp_path / "reg"
    _one_error(cli("cache", "push", src, "--sign", enc, "--registry", reg), 2, "no password is set")
    monkeypatch.setenv("TOOLCHAIN_SIGNING_PASSWORD", "nope")
    _one_error(cli("cache", "push", src, "--sign", enc, "--registry", reg), 2, "wrong password")
    monkeypatch.setenv("TOOLCHAIN_SIGNING_PASSWORD", "pw")
    monkeypatch.setenv("TOOLCHAIN_SIGNING_KEY", str(enc))  # the environment's key, no flag
    res = cli("cache", "push", src, "--key", KEY_A, "--registry", reg)
    assert res.exit_code == 0 and "signed with" in res.output, res.output
    assert (reg / "manifests" / f"{KEY_A}.sig").is_file()


def test_the_hub_backend_keeps_the_signature_beside_the_record(tmp_path: Path, keys: dict[str, Path]) -> None:
    """hf:// (a fake HfApi at the boundary, as tests/registry/test_local.py does): the signature is one more
    file of the repo, and a copied one is refused."""
    from toolchain.registry import signing
    from toolchain.registry.backends import HFBackend
    from toolchain.registry.store import Registry

    class EntryNotFoundError(Exception):
        pass

    class FakeHub:
        def __init__(self) -> None:
            self.files: dict[str, bytes] = {}

        def file_exists(self, repo: str, path: str) -> bool:
            return path in self.files

        def create_commit(self, repo: str, operations: list[Any], commit_message: str) -> None:
            for op in operations:
                src = op.path_or_fileobj
                self.files[op.path_in_repo] = src if isinstance(src, bytes) else Path(src).read_bytes()

        def hf_hub_download(self, repo: str, path: str, **kw: Any) -> str:  # etag_timeout: the deadline
            if path not in self.files:
                raise EntryNotFoundError(path)
            out = tmp_path / "hub-cache" / path
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(self.files[path])
            return str(out)

    hub = FakeHub()
    r = Registry(HFBackend("org/engines", api=hub))
    signer, verifier = signing.load_signer(keys["priv"]), signing.load_verifier(keys["pub"])
    r.put(KEY_A, _engine(tmp_path / "a"), signer=signer)
    r.put(KEY_B, _engine(tmp_path / "b"))
    assert f"manifests/{KEY_A}.sig" in hub.files and f"manifests/{KEY_B}.sig" not in hub.files
    assert r.get(KEY_A, tmp_path / "out-a", verifier=verifier).key == KEY_A
    hub.files[f"manifests/{KEY_B}.sig"] = hub.files[f"manifests/{KEY_A}.sig"]
    with pytest.raises(SignatureError, match="copied from another entry"):
        r.get(KEY_B, tmp_path / "out-b", verifier=verifier)
    _nothing_written(tmp_path / "out-b")


def test_the_sign_hint_names_the_registry(cli: Any, tmp_path: Path, engine_dir: Path, monkeypatch: Any) -> None:
    """Taken literally, the hint must sign the entry where it is, not in the default registry."""
    monkeypatch.setenv("COSIGN_PASSWORD", "")
    assert cli("cache", "keygen", tmp_path / "k").exit_code == 0
    reg = str(tmp_path / "reg")
    assert cli("cache", "push", engine_dir, "--key", "5" * 64, "--registry", reg).exit_code == 0
    r = cli("cache", "pull", "5" * 64, tmp_path / "o", "--registry", reg, "--require-signature",
            "--public-key", tmp_path / "k" / "cosign.pub")  # fmt: skip
    assert r.exit_code == 6, r.output
    assert f"toolchain cache sign {'5' * 16} --sign cosign.key --registry {reg}" in r.output
