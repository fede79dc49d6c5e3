"""Issue 47 (B): a key file that is not what it should be is one line in the user's words, naming the file and the
fix; never a Python exception's name, never a traceback. The inputs are fuzzed: binary garbage, empty, text that is
no PEM, PEM blocks of the wrong type, cosign's JSON wrong in every field, damaged DER, and a keygen directory that
cannot be written."""

from __future__ import annotations

import base64
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli

pytest.importorskip("cryptography")

# a Python exception's class name (UnicodeDecodeError, KeyError, binascii.Error, InvalidSignature, ...)
EXCEPTION_NAME = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception)\b|\bbinascii\b|\bInvalid[A-Z]\w*|Traceback")


def _pem(kind: str, body: bytes) -> str:
    b = base64.encodebytes(body).decode()
    return f"-----BEGIN {kind}-----\n{b}-----END {kind}-----\n"


def _cosign(doc: object) -> str:
    raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return _pem("ENCRYPTED SIGSTORE PRIVATE KEY", raw)


GOOD_DOC: dict[str, Any] = {
    "kdf": {"name": "scrypt", "params": {"N": 32768, "r": 8, "p": 1}, "salt": base64.b64encode(b"s" * 32).decode()},
    "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(b"n" * 24).decode()},
    "ciphertext": base64.b64encode(b"c" * 64).decode(),
}


def _variants() -> Iterator[tuple[str, bytes]]:
    rng = random.Random(47)
    yield "empty", b""
    yield "one-newline", b"\n"
    for i in range(6):
        yield f"garbage-{i}", bytes(rng.randrange(256) for _ in range(rng.randrange(1, 600)))
    yield "latin1", "clé privée".encode("latin-1")
    yield "utf8-not-ascii", "-----BEGIN PUBLIC KEY-----\nmañana\n-----END PUBLIC KEY-----\n".encode()
    yield "plain-text", b"this is not a key\n"
    yield "json", b'{"kdf": 1}\n'
    yield "pem-certificate", _pem("CERTIFICATE", b"\x30\x03\x02\x01\x01").encode()
    yield "pem-rsa-private", _pem("RSA PRIVATE KEY", b"\x30\x03\x02\x01\x01").encode()
    yield "pem-garbage-private", _pem("PRIVATE KEY", bytes(rng.randrange(256) for _ in range(90))).encode()
    yield "pem-garbage-ec-private", _pem("EC PRIVATE KEY", b"\x30\x05\x02\x01\x01\x04\x00").encode()
    yield "pem-garbage-public", _pem("PUBLIC KEY", bytes(rng.randrange(256) for _ in range(91))).encode()
    yield "pem-bad-base64", b"-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----\n"
    yield "cosign-not-json", _cosign(b"\xff\xfe not json").encode()
    yield "cosign-list", _cosign([1, 2]).encode()
    yield "cosign-empty-object", _cosign({}).encode()
    for field in ("kdf", "cipher", "ciphertext"):
        yield f"cosign-missing-{field}", _cosign({k: v for k, v in GOOD_DOC.items() if k != field}).encode()
        yield f"cosign-{field}-wrong-type", _cosign({**GOOD_DOC, field: ["x"]}).encode()
    yield "cosign-params-strings", _cosign({**GOOD_DOC, "kdf": {**GOOD_DOC["kdf"], "params": {"N": "x"}}}).encode()
    yield (
        "cosign-params-huge",
        _cosign(
            json.dumps({**GOOD_DOC, "kdf": {**GOOD_DOC["kdf"], "params": {"N": 0}}})
            .replace('"N": 0', '"N": 1e400')
            .encode()
        ).encode(),
    )
    yield "cosign-salt-not-base64", _cosign({**GOOD_DOC, "kdf": {**GOOD_DOC["kdf"], "salt": "%%%"}}).encode()
    yield "cosign-salt-number", _cosign({**GOOD_DOC, "kdf": {**GOOD_DOC["kdf"], "salt": 5}}).encode()
    yield "cosign-other-kdf", _cosign({**GOOD_DOC, "kdf": {**GOOD_DOC["kdf"], "name": "pbkdf2"}}).encode()
    yield "cosign-kdf-name-list", _cosign({**GOOD_DOC, "kdf": {**GOOD_DOC["kdf"], "name": []}}).encode()
    yield "cosign-wrong-password", _cosign(GOOD_DOC).encode()


VARIANTS = list(_variants())


def _assert_user_words(text: str, path: Path) -> None:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert lines[0].startswith("Error: ") and " — " in lines[0], text
    assert str(path) in lines[0], text
    assert not EXCEPTION_NAME.search(lines[0]), text


@pytest.mark.parametrize(("name", "data"), VARIANTS, ids=[n for n, _ in VARIANTS])
@pytest.mark.parametrize("role", ["signing", "public"])
def test_a_bad_key_file_is_one_line_naming_the_file_and_the_fix(
    cli: Cli, tmp_path: Path, name: str, data: bytes, role: str
) -> None:
    path = tmp_path / f"{name}.key"
    path.write_bytes(data)
    args = (
        ["cache", "sign", "0" * 64, "--sign", path] if role == "signing" else ["cache", "verify", "--public-key", path]
    )
    r = cli(*args, "--registry", tmp_path / "reg") if role == "signing" else cli(*args)
    assert r.exit_code == 2, r.output
    _assert_user_words(r.stderr, path)


@pytest.mark.parametrize("role", ["signing", "public"])
def test_a_key_path_that_is_a_directory_or_missing_says_so(cli: Cli, tmp_path: Path, role: str) -> None:
    flag = ["--sign"] if role == "signing" else ["--public-key"]
    for path in (tmp_path, tmp_path / "nope.key"):
        cmd = ["cache", "sign", "0" * 64] if role == "signing" else ["cache", "verify"]
        r = cli(*cmd, *flag, path)
        assert r.exit_code == 2, r.output
        _assert_user_words(r.stderr, path)


def test_keygen_into_a_file_or_an_unwritable_directory_is_one_line(cli: Cli, tmp_path: Path) -> None:
    a_file = tmp_path / "taken"
    a_file.write_text("x")
    r = cli("cache", "keygen", a_file)
    assert r.exit_code == 2, r.output
    _assert_user_words(r.stderr, a_file)

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if not _can_write(locked):  # root writes anyway: then only the file case above is checked
            r = cli("cache", "keygen", locked)
            assert r.exit_code == 2, r.output
            _assert_user_words(r.stderr, locked)
    finally:
        locked.chmod(0o700)


def _can_write(d: Path) -> bool:
    try:
        (d / ".probe").write_text("")
    except OSError:
        return False
    (d / ".probe").unlink()
    return True
