"""Signed entries: an ECDSA P-256 signature over an entry's record, in cosign's formats (docs/signing.md).

What is signed is a cosign "simple signing" payload (cosign's specs/SIGNATURE_SPEC.md) that names one digest:

- ``oci://``: the digest of the entry's OCI image manifest (the manifest tagged with the entry key). That
  manifest references the record (its config blob) and every file layer, so the digest covers the record,
  every title, digest, size and mode. The signature is a cosign signature manifest under the tag
  ``sha256-<manifest hex>.sig``: one layer per signature, the payload as the layer's blob
  (``application/vnd.dev.cosign.simplesigning.v1+json``) and the base64 signature in its
  ``dev.cosignproject.cosign/signature`` annotation, so ``cosign verify --key cosign.pub`` can check it.
- local, ``s3://``, ``hf://``: the sha256 of the record itself (``manifests/<key>.json``, the file the
  registry restores from). The signature is ``manifests/<key>.sig`` beside it: JSON holding the same
  payload and signature (cosign's ``payload``/``mediaType``/``signature`` properties).

The payload's ``optional`` claims also name the entry key and the record digest. A verifier accepts a
signature only when it verifies with the public key AND names the digest the registry serves now, so a
tampered record, a manifest changed after signing, and a signature copied from another entry all fail.

Keys: a private key is cosign's own ``cosign.key`` (PEM ``ENCRYPTED SIGSTORE PRIVATE KEY``, or the older
``ENCRYPTED COSIGN PRIVATE KEY``: scrypt + NaCl secretbox around PKCS #8, as go-securesystemslib's
``encrypted`` package writes it), or a PEM PKCS #8 (``PRIVATE KEY``, ``ENCRYPTED PRIVATE KEY``) or SEC 1
(``EC PRIVATE KEY``) key; its password comes from ``TOOLCHAIN_SIGNING_PASSWORD`` (else ``COSIGN_PASSWORD``).
A public key is a PEM ``PUBLIC KEY`` (PKIX), which is what ``cosign.pub`` is. Only P-256 keys are accepted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import secrets
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain import settings
from toolchain.errors import ArtifactNotFoundError, SignatureError, SigningKeyError
from toolchain.registry.capabilities import SignedRegistry, StoresSignatures
from toolchain.registry.manifest import parse_manifest

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey, EllipticCurvePublicKey

    from toolchain.registry.manifest import EntryManifest

SIMPLE_SIGNING_MT = "application/vnd.dev.cosign.simplesigning.v1+json"
COSIGN_TYPE = "cosign container image signature"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
CLAIM_KEY = "dev.toolchain.key"
CLAIM_RECORD = "dev.toolchain.record"
CLAIM_SIGNER = "dev.toolchain.signer"  # sha256 of the signer's public key (DER SubjectPublicKeyInfo)
CLAIM_SEQUENCE = "dev.toolchain.sequence"  # grows with every signature of a key: milliseconds since 1970, or more
CLAIM_SIGNED = "dev.toolchain.signed"  # when, UTC (ISO 8601): for people; the sequence is what is compared
PEM_TYPES_COSIGN = ("ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY")
# go-securesystemslib encrypted: the scrypt parameters it accepts (Legacy, Standard, OWASP); Standard for new keys
SCRYPT_PARAMS = ((32768, 8, 1), (65536, 8, 1), (131072, 8, 1))
SCRYPT_NEW = (65536, 8, 1)
MAX_KEY_FILE = 64 * 1024
MAX_SIGNATURES = 64


@dataclass(frozen=True)
class Signer:
    key: EllipticCurvePrivateKey
    path: str


@dataclass(frozen=True)
class Verifier:
    key: EllipticCurvePublicKey
    path: str


# --- NaCl secretbox (XSalsa20-Poly1305), the cipher of cosign.key ------------------------------------

_M = 0xFFFFFFFF
_SIGMA = struct.unpack("<4I", b"expand 32-byte k")


def _rotl(v: int, c: int) -> int:
    return ((v << c) & _M) | (v >> (32 - c))


# column rounds, then row rounds (each a quarter-round over four state words)
_ROUNDS = (
    (0, 4, 8, 12), (5, 9, 13, 1), (10, 14, 2, 6), (15, 3, 7, 11),
    (0, 1, 2, 3), (5, 6, 7, 4), (10, 11, 8, 9), (15, 12, 13, 14),
)  # fmt: skip


def _salsa_rounds(x: list[int]) -> None:
    """The 20 rounds of the Salsa20 core (Bernstein's Salsa20 specification)."""
    for _ in range(10):
        for a, b, c, d in _ROUNDS:
            x[b] ^= _rotl((x[a] + x[d]) & _M, 7)
            x[c] ^= _rotl((x[b] + x[a]) & _M, 9)
            x[d] ^= _rotl((x[c] + x[b]) & _M, 13)
            x[a] ^= _rotl((x[d] + x[c]) & _M, 18)


def _state(key: bytes, middle: bytes) -> list[int]:
    k = struct.unpack("<8I", key)
    n = struct.unpack("<4I", middle)
    return [_SIGMA[0], *k[:4], _SIGMA[1], *n, _SIGMA[2], *k[4:], _SIGMA[3]]


def _hsalsa20(key: bytes, nonce16: bytes) -> bytes:
    x = _state(key, nonce16)
    _salsa_rounds(x)
    return struct.pack("<8I", *(x[i] for i in (0, 5, 10, 15, 6, 7, 8, 9)))


def _salsa20_stream(key: bytes, nonce8: bytes, n: int) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < n:
        x0 = _state(key, nonce8 + struct.pack("<Q", counter))
        x = list(x0)
        _salsa_rounds(x)
        out += struct.pack("<16I", *((a + b) & _M for a, b in zip(x, x0, strict=True)))
        counter += 1
    return bytes(out[:n])


def _secretbox_stream(key: bytes, nonce: bytes, n: int) -> bytes:
    return _salsa20_stream(_hsalsa20(key, nonce[:16]), nonce[16:], n + 32)


def _xor(data: bytes, stream: bytes) -> bytes:
    n = len(data)
    return (int.from_bytes(data, "little") ^ int.from_bytes(stream[:n], "little")).to_bytes(n, "little")


def secretbox_seal(key: bytes, nonce: bytes, message: bytes) -> bytes:
    """NaCl ``crypto_secretbox`` as golang.org/x/crypto/nacl/secretbox.Seal lays it out: tag, then ciphertext."""
    from cryptography.hazmat.primitives.poly1305 import Poly1305

    stream = _secretbox_stream(key, nonce, len(message))
    ct = _xor(message, stream[32:])
    return Poly1305.generate_tag(stream[:32], ct) + ct


def secretbox_open(key: bytes, nonce: bytes, box: bytes) -> bytes | None:
    """The message of a sealed box, or None when the tag does not match (wrong key or altered box)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.poly1305 import Poly1305

    if len(box) < 16 or len(key) != 32 or len(nonce) != 24:
        return None
    tag, ct = box[:16], box[16:]
    stream = _secretbox_stream(key, nonce, len(ct))
    try:
        Poly1305.verify_tag(stream[:32], ct, tag)
    except InvalidSignature:
        return None
    return _xor(ct, stream[32:])


def _scrypt(password: bytes, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, dklen=32, maxmem=2**28)


def encrypt_cosign(plaintext: bytes, password: bytes) -> bytes:
    """go-securesystemslib ``encrypted.Encrypt``: scrypt key, secretbox, as the JSON cosign puts in its PEM."""
    salt, nonce = secrets.token_bytes(32), secrets.token_bytes(24)
    n, r, p = SCRYPT_NEW
    box = secretbox_seal(_scrypt(password, salt, n, r, p), nonce, plaintext)
    doc = {
        "kdf": {"name": "scrypt", "params": {"N": n, "r": r, "p": p}, "salt": base64.b64encode(salt).decode()},
        "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
        "ciphertext": base64.b64encode(box).decode(),
    }
    return json.dumps(doc, separators=(",", ":")).encode()


_DAMAGED = "the file is damaged: make a new pair with `toolchain cache keygen DIR` (or copy cosign.key again)"


def _field(doc: dict[str, Any], path: str, kind: type, where: str) -> Any:
    """``doc``'s value at the dotted ``path``, which must be a ``kind``; a one-line SigningKeyError naming the
    field otherwise."""
    value: Any = doc
    walked: list[str] = []
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            at = f"'{'.'.join(walked)}'" if walked else "its JSON document"
            raise SigningKeyError(f"cosign private key {where}: {at} lacks the field '{part}'", _DAMAGED)
        value = value[part]
        walked.append(part)
    if not isinstance(value, kind) or isinstance(value, bool):
        want = {str: "text", int: "a whole number", dict: "an object"}.get(kind, kind.__name__)
        raise SigningKeyError(f"cosign private key {where}: the field '{path}' is not {want}", _DAMAGED)
    return value


def _b64_field(doc: dict[str, Any], path: str, where: str) -> bytes:
    text = _field(doc, path, str, where)
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error) as e:
        raise SigningKeyError(f"cosign private key {where}: the field '{path}' is not base64", _DAMAGED) from e


def decrypt_cosign(data: bytes, password: bytes, where: str) -> bytes:
    """The inverse of :func:`encrypt_cosign`; SigningKeyError (one line naming the file, the field and the fix)
    for a malformed document or a wrong password."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise SigningKeyError(f"cosign private key {where} does not hold cosign's JSON document", _DAMAGED) from e
    if not isinstance(doc, dict):
        raise SigningKeyError(f"cosign private key {where} holds JSON that is not cosign's (not an object)", _DAMAGED)
    kdf, cipher = _field(doc, "kdf", dict, where), _field(doc, "cipher", dict, where)
    n, r, p = (_field(doc, f"kdf.params.{x}", int, where) for x in ("N", "r", "p"))
    salt = _b64_field(doc, "kdf.salt", where)
    nonce = _b64_field(doc, "cipher.nonce", where)
    box = _b64_field(doc, "ciphertext", where)
    if kdf.get("name") != "scrypt" or cipher.get("name") != "nacl/secretbox":
        raise SigningKeyError(
            f"{where} uses kdf {kdf.get('name')!r} / cipher {cipher.get('name')!r}: cosign keys use "
            "scrypt and nacl/secretbox"
        )
    if (n, r, p) not in SCRYPT_PARAMS:
        raise SigningKeyError(f"{where} has unsupported scrypt parameters N={n} r={r} p={p}", _DAMAGED)
    if len(nonce) != 24:
        raise SigningKeyError(f"cosign private key {where}: the nonce is {len(nonce)} bytes, not 24", _DAMAGED)
    plain = secretbox_open(_scrypt(password, salt, n, r, p), nonce, box)
    if plain is None:
        raise SigningKeyError(
            f"wrong password for {where}",
            "set TOOLCHAIN_SIGNING_PASSWORD (or COSIGN_PASSWORD) to the key's password",
        )
    return plain


# --- keys --------------------------------------------------------------------------------------------


def _pem_blocks(text: str) -> list[tuple[str, bytes]]:
    out = []
    for m in re.finditer(r"-----BEGIN ([A-Z0-9 ]+)-----\s*(.*?)\s*-----END \1-----", text, re.S):
        try:
            out.append((m.group(1), base64.b64decode("".join(m.group(2).split()), validate=True)))
        except (ValueError, binascii.Error):
            continue
    return out


def _read_key_file(path: Path, what: str) -> str:
    """The text of a PEM key file; every way it is not one is a one-line SigningKeyError naming the file."""
    hint = "give cosign.key (to sign) or cosign.pub (to verify): PEM text files"
    try:
        st = path.stat()
        if st.st_size > MAX_KEY_FILE:
            raise SigningKeyError(f"{what} {path} is {st.st_size:,} bytes: not a key file", hint)
        raw = path.read_bytes()
    except FileNotFoundError as e:
        raise SigningKeyError(f"{what} {path} does not exist", "give the path of a PEM key file") from e
    except IsADirectoryError as e:
        raise SigningKeyError(f"{what} {path} is a directory", "give the path of a PEM key file") from e
    except PermissionError as e:
        raise SigningKeyError(f"{what} {path} cannot be read: permission denied", "check the file's mode") from e
    except OSError as e:
        raise SigningKeyError(f"{what} {path} cannot be read: {e.strerror or 'I/O error'}", hint) from e
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError as e:
        raise SigningKeyError(
            f"{what} {path} is not a PEM text file (byte {e.start} is 0x{raw[e.start]:02x}, not ASCII)", hint
        ) from e


def _p256_or_refuse(key: Any, path: Path, what: str) -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    ok = isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)) and isinstance(
        key.curve, ec.SECP256R1
    )
    if not ok:
        kind = getattr(getattr(key, "curve", None), "name", None) or type(key).__name__.lstrip("_")
        raise SigningKeyError(
            f"{what} {path} is a {kind} key; the toolchain signs with ECDSA P-256 (cosign's default) only",
            "make one with `toolchain cache keygen DIR` or `cosign generate-key-pair`",
        )
    return key


def _why(e: BaseException) -> str:
    """cryptography's reason, first line, in the user's words: never an exception's name."""
    text = str(e).splitlines()[0].split(". ")[0][:120] if str(e) else ""
    text = re.sub(r"\b[A-Z]\w*(?:Error|Exception)\b[:(]?", "", text).strip(" :()")
    return text or "it does not parse as a key"


def password() -> bytes:
    return (settings.signing_password() or "").encode()


def load_signer(path: Path | str) -> Signer:
    """A private key: cosign's encrypted PEM, or PEM PKCS #8 / SEC 1 (encrypted ones need the password)."""
    from toolchain._deps import require

    require("cryptography", "sign")
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    path = Path(path)
    text = _read_key_file(path, "signing key")
    blocks = _pem_blocks(text)
    if not blocks:
        raise SigningKeyError(f"signing key {path} holds no PEM block", "give cosign.key or a PEM private key")
    kind, der = blocks[0]
    if kind in PEM_TYPES_COSIGN:
        pkcs8 = decrypt_cosign(der, password(), str(path))
        try:
            key = serialization.load_der_private_key(pkcs8, None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as e:
            raise SigningKeyError(f"signing key {path}: the decrypted key is not a PKCS #8 key", _DAMAGED) from e
        return Signer(_p256_or_refuse(key, path, "signing key"), str(path))
    if kind == "PUBLIC KEY":
        raise SigningKeyError(f"{path} is a public key", "sign with the private key (cosign.key), verify with the .pub")
    if kind not in ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "EC PRIVATE KEY"):
        raise SigningKeyError(f"signing key {path} is a PEM {kind!r}, not a private key")
    pw = password() if kind == "ENCRYPTED PRIVATE KEY" else None
    if kind == "ENCRYPTED PRIVATE KEY" and not pw:
        raise SigningKeyError(f"{path} is encrypted and no password is set", "set TOOLCHAIN_SIGNING_PASSWORD")
    try:
        key = serialization.load_pem_private_key(text.encode(), pw)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        if kind == "ENCRYPTED PRIVATE KEY":
            raise SigningKeyError(
                f"wrong password for {path} (or the key is damaged)", "set TOOLCHAIN_SIGNING_PASSWORD to its password"
            ) from e
        raise SigningKeyError(f"signing key {path} is malformed ({_why(e)})", _DAMAGED) from e
    return Signer(_p256_or_refuse(key, path, "signing key"), str(path))


def load_verifier(path: Path | str) -> Verifier:
    """A PEM ``PUBLIC KEY`` (PKIX; ``cosign.pub`` is one), P-256 only."""
    from toolchain._deps import require

    require("cryptography", "sign")
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    path = Path(path)
    text = _read_key_file(path, "public key")
    blocks = _pem_blocks(text)
    if not blocks or blocks[0][0] != "PUBLIC KEY":
        found = f"a PEM {blocks[0][0]!r}" if blocks else "no PEM block"
        hint = "give the .pub file (cosign.pub), not the private key" if blocks and "PRIVATE" in blocks[0][0] else None
        raise SigningKeyError(f"public key {path} holds {found}, not a PEM 'PUBLIC KEY'", hint)
    try:
        key = serialization.load_der_public_key(blocks[0][1])
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise SigningKeyError(
            f"public key {path} is malformed ({_why(e)})", "copy cosign.pub again from the key pair's owner"
        ) from e
    return Verifier(_p256_or_refuse(key, path, "public key"), str(path))


def keygen(out: Path) -> tuple[Path, Path]:
    """Write ``cosign.key`` (cosign's encrypted format, password from TOOLCHAIN_SIGNING_PASSWORD/COSIGN_PASSWORD)
    and ``cosign.pub`` into a new or empty directory ``out`` (toolchain.outdir); never over a key pair or any
    other file."""
    from toolchain._deps import require
    from toolchain.outdir import check_output, owned_output

    require("cryptography", "sign")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    keep = "choose another directory, or move the old key pair away"
    out = check_output(out, force=None, flag="DIR", keep_hint=keep)  # before the (slow) key derivation
    key = ec.generate_private_key(ec.SECP256R1())
    pkcs8 = key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    body = base64.encodebytes(encrypt_cosign(pkcs8, password())).decode().replace("\n", "")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    kind = PEM_TYPES_COSIGN[0]
    pem = f"-----BEGIN {kind}-----\n" + "\n".join(lines) + f"\n-----END {kind}-----\n"
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with owned_output(out, command="cache keygen", force=None, flag="DIR", keep_hint=keep) as tmp:
        fd = os.open(tmp / "cosign.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(pem)
        (tmp / "cosign.pub").write_bytes(pub)
    return out / "cosign.key", out / "cosign.pub"


def signer_for(path: Path | str | None) -> Signer | None:
    """The signing key named by ``--sign``, else by TOOLCHAIN_SIGNING_KEY; None when neither is set."""
    chosen = path or settings.signing_key()
    return load_signer(chosen) if chosen else None


def verifier_for(path: Path | str | None, *, require: bool) -> Verifier | None:
    """The public key named by the flag, else by TOOLCHAIN_VERIFY_KEY; ``require`` without either is a mistake."""
    chosen = path or settings.verify_key()
    if not chosen:
        if require:
            raise SigningKeyError(
                "--require-signature needs the public key to check the signature with",
                "pass --public-key cosign.pub, or set TOOLCHAIN_VERIFY_KEY",
            )
        return None
    return load_verifier(chosen)


# --- payloads ----------------------------------------------------------------------------------------


def fingerprint(key: EllipticCurvePublicKey) -> str:
    """``sha256:`` of a public key's DER SubjectPublicKeyInfo: how a payload names its signer."""
    from cryptography.hazmat.primitives import serialization

    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def payload(
    subject: str, reference: str, key: str, record: str, *, signer: str = "", sequence: int | None = None
) -> bytes:
    """cosign's simple-signing payload naming ``subject`` (``critical.image.docker-manifest-digest``); its
    optional claims name the entry, its record, the signer's key and the signature's sequence."""
    optional: dict[str, str] = {CLAIM_KEY: key, CLAIM_RECORD: record}
    if signer:
        optional[CLAIM_SIGNER] = signer
    if sequence is not None:
        import datetime

        optional[CLAIM_SEQUENCE] = str(sequence)
        when = datetime.datetime.fromtimestamp(sequence / 1000, datetime.timezone.utc)
        optional[CLAIM_SIGNED] = when.isoformat(timespec="seconds")
    doc = {
        "critical": {
            "identity": {"docker-reference": reference},
            "image": {"docker-manifest-digest": subject},
            "type": COSIGN_TYPE,
        },
        "optional": optional,
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def _named(raw: bytes) -> tuple[str | None, dict[str, Any]]:
    """(the digest a payload names, its optional claims); (None, {}) for a payload that is not cosign's."""
    try:
        doc = json.loads(raw)
        crit = doc["critical"]
        if crit.get("type") != COSIGN_TYPE:
            return None, {}
        image = crit["image"]
        # Go's JSON decoding matches keys without case; cosign writes docker-manifest-digest
        digest = next((v for k, v in image.items() if k.lower() == "docker-manifest-digest"), None)
        optional = doc.get("optional") or {}
        return (str(digest) if digest else None), (optional if isinstance(optional, dict) else {})
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, {}


def sign_payload(signer: Signer, data: bytes) -> str:
    """Base64 ASN.1 DER ECDSA-P256-SHA256 signature over ``data`` (what cosign stores in its annotation)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    return base64.b64encode(signer.key.sign(data, ec.ECDSA(hashes.SHA256()))).decode()


def _verifies(verifier: Verifier, data: bytes, sig_b64: str) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        sig = base64.b64decode(sig_b64, validate=True)
        verifier.key.verify(sig, data, ec.ECDSA(hashes.SHA256()))
        return True
    except (InvalidSignature, ValueError, binascii.Error, TypeError):
        return False


# --- where signatures live ---------------------------------------------------------------------------


def signature_path(key: str) -> str:
    return f"manifests/{key}.sig"


def _subject(reg: SignedRegistry, key: str) -> tuple[bytes, str]:
    """(the record's bytes, the digest a signature of this entry names), read in one go from the registry."""
    if isinstance(reg.backend, StoresSignatures):
        return reg.backend.signed_subject(key)
    from toolchain.registry.manifest import manifest_path

    try:
        raw = reg.backend.read_bytes(manifest_path(key))
    except FileNotFoundError as e:
        raise ArtifactNotFoundError(key, reg.url) from e
    return raw, "sha256:" + hashlib.sha256(raw).hexdigest()


def _reference(reg: SignedRegistry) -> str:
    return reg.url.removeprefix("oci://")


def _read_signatures(reg: SignedRegistry, key: str, subject: str) -> list[tuple[bytes, str]]:
    """Every (payload, base64 signature) stored for the entry; [] when it is unsigned."""
    if isinstance(reg.backend, StoresSignatures):
        return list(reg.backend.read_signatures(subject))[:MAX_SIGNATURES]
    try:
        raw = reg.backend.read_bytes(signature_path(key))
    except FileNotFoundError:
        return []
    try:
        doc = json.loads(raw)
        out = []
        for s in doc["signatures"][:MAX_SIGNATURES]:
            if s.get("mediaType", SIMPLE_SIGNING_MT) == SIMPLE_SIGNING_MT:
                out.append((base64.b64decode(s["payload"], validate=True), str(s["signature"])))
        return out
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as e:
        raise SignatureError(
            f"the signature file {signature_path(key)} in {reg.url} is not readable",
            f"sign the entry again (`{sign_command(key, reg.url)}`)",
        ) from e


def _write_signature(
    reg: SignedRegistry, key: str, subject: str, data: bytes, sig: str, keep: list[tuple[bytes, str]] | None = None
) -> None:
    """Store a signature of the entry; ``keep``: the other signers' signatures, kept beside it (on OCI the
    signature manifest's other layers are kept by the backend itself)."""
    if isinstance(reg.backend, StoresSignatures):
        reg.backend.write_signature(subject, data, sig)
        return
    sigs = [*(keep or []), (data, sig)]
    doc = {
        "signatures": [
            {"mediaType": SIMPLE_SIGNING_MT, "payload": base64.b64encode(d).decode(), "signature": s}
            for d, s in sigs[-MAX_SIGNATURES:]
        ]
    }
    reg.backend.write_bytes(signature_path(key), json.dumps(doc, indent=2).encode())


# --- sign and verify an entry ------------------------------------------------------------------------


def sign_entry(reg: SignedRegistry, ref: str, signer: Signer) -> str:
    """Sign the entry as the registry holds it now; returns the digest the signature names. The signature's
    sequence is above every one this machine has seen for the key, and is remembered (``freshness``)."""
    import time

    from toolchain.registry import freshness

    key = reg.resolve(ref)
    raw, subject = _subject(reg, key)
    parse_manifest(raw, f"{reg.url}/manifests/{key}.json")  # never sign a record that would be refused
    record = "sha256:" + hashlib.sha256(raw).hexdigest()
    mine = Verifier(signer.key.public_key(), signer.path)
    me = fingerprint(mine.key)
    try:
        existing = _read_signatures(reg, key, subject)
    except SignatureError:
        existing = []  # an unreadable signature file is replaced
    ours = [d for d, s in existing if _verifies(mine, d, s) and _named(d)[0] == subject]
    if ours:  # already signed by this key: signing again would only add a copy
        freshness.record(reg.url, key, me, max(_sequence(_named(d)[1]) for d in ours), subject)
        return subject
    last = freshness.seen(reg.url, key, me)
    sequence = max(time.time_ns() // 1_000_000, last.sequence + 1 if last else 0)
    data = payload(subject, _reference(reg), key, record, signer=me, sequence=sequence)
    others = [(d, s) for d, s in existing if not _verifies(mine, d, s)]  # other signers' are kept
    _write_signature(reg, key, subject, data, sign_payload(signer, data), others)
    freshness.record(reg.url, key, me, sequence, subject)
    return subject


def _sequence(claims: dict[str, Any]) -> int:
    """A payload's sequence claim; 0 for a signature made before sequences (or an unreadable claim)."""
    try:
        return max(0, int(str(claims.get(CLAIM_SEQUENCE, 0))))
    except ValueError:
        return 0


def current_subject(reg: SignedRegistry, key: str) -> str | None:
    """The digest a signature of the entry would name now; None when there is no such entry, or it is refused."""
    from toolchain.errors import RegistryError

    try:
        return _subject(reg, key)[1]
    except (RegistryError, FileNotFoundError):
        return None


def entry_digest(reg: SignedRegistry, ref: str) -> str:
    """The digest ``pull --digest`` compares against for the entry ``ref`` names, as the registry serves it now:
    the subject a signature of it names (oci://: its manifest digest; elsewhere the sha256 of its record).
    ArtifactNotFoundError when the registry holds no such entry."""
    return _subject(reg, reg.resolve(ref))[1]


def retire_signatures(reg: SignedRegistry, key: str, subject: str) -> None:
    """Remove every signature of ``subject``, a manifest entry ``key`` no longer is (``push --force``), so a tag
    re-pointed at it finds no signature."""
    if isinstance(reg.backend, StoresSignatures):
        reg.backend.drop_signatures(subject)
        return
    try:
        existing = _read_signatures(reg, key, subject)
    except SignatureError:
        return
    keep = [(d, s) for d, s in existing if _named(d)[0] != subject]
    if len(keep) == len(existing):
        return
    if not keep:
        reg.backend.delete(signature_path(key))
        return
    doc = {
        "signatures": [
            {"mediaType": SIMPLE_SIGNING_MT, "payload": base64.b64encode(d).decode(), "signature": s} for d, s in keep
        ]
    }
    reg.backend.write_bytes(signature_path(key), json.dumps(doc, indent=2).encode())


def _check_pin(pin: str | None, subject: str, where: str) -> None:
    if pin is not None and pin != subject:
        raise SignatureError(
            f"{where} is {subject[:23]}..., not the pinned {pin[:23]}... (--digest)",
            "pull the digest you trust, or drop --digest if the entry was replaced on purpose",
        )


def pinned_entry(reg: SignedRegistry, ref: str, pin: str) -> EntryManifest:
    """The entry's record, parsed from the very bytes whose digest (the subject a signature would name) is
    ``pin``; SignatureError (exit 6) when the registry serves anything else."""
    key = reg.resolve(ref)
    raw, subject = _subject(reg, key)
    _check_pin(pin, subject, f"entry {key[:16]} in {reg.url}")
    return _parsed(reg, key, raw)


def _parsed(reg: SignedRegistry, key: str, raw: bytes) -> EntryManifest:
    m = parse_manifest(raw, f"{reg.url}/manifests/{key}.json")
    if m.key != key:
        from toolchain.errors import ManifestError

        raise ManifestError(f"manifest {key} names key {m.key}")
    return m


def verified_entry(reg: SignedRegistry, ref: str, verifier: Verifier, *, pin: str | None = None) -> EntryManifest:
    """The entry's record, parsed from the very bytes whose signature was checked; SignatureError (exit 6)
    when it is unsigned, signed with another key, its signature names another digest, it is older than the
    newest signature this machine has seen for the key (a rollback), or it is not ``pin``."""
    from toolchain.registry import freshness

    key = reg.resolve(ref)
    raw, subject = _subject(reg, key)
    where = f"entry {key[:16]} in {reg.url}"
    m = _parsed(reg, key, raw)
    _check_pin(pin, subject, where)
    claims = check_signatures(_read_signatures(reg, key, subject), subject, key, verifier, where, registry=reg.url)
    sequence = _sequence(claims)
    signer = fingerprint(verifier.key)
    last = freshness.seen(reg.url, key, signer)
    if last is not None and (sequence < last.sequence or (sequence == last.sequence and subject != last.subject)):
        raise SignatureError(
            f"{where} is signed at sequence {sequence}, older than {last.sequence} ({last.subject[:19]}...) "
            "seen here before: a rollback",
            f"do not use it; ask the signer, or pin what you trust with --digest {last.subject[:19]}...",
        )
    freshness.record(reg.url, key, signer, sequence, subject)
    return m


def sign_command(key: str, registry: str | None) -> str:
    """The command that signs ``key`` where it is (the registry named, so it is not the default one)."""
    return f"toolchain cache sign {key[:16]} --sign cosign.key" + (f" --registry {registry}" if registry else "")


def check_signatures(
    sigs: list[tuple[bytes, str]],
    subject: str,
    key: str,
    verifier: Verifier,
    where: str,
    *,
    registry: str | None = None,
) -> dict[str, Any]:
    """The optional claims of the newest signature of ``subject`` that verifies with ``verifier``;
    SignatureError (exit 6) when none does."""
    if not sigs:
        raise SignatureError(
            f"{where} carries no signature of {subject[:23]} (it is unsigned, or it changed after it was "
            "signed), and a signature is required",
            f"sign it (`{sign_command(key, registry)}`), or pull an entry that is signed",
        )
    others: list[str] = []
    good: list[dict[str, Any]] = []
    signer = fingerprint(verifier.key)
    for data, sig in sigs:
        if not _verifies(verifier, data, sig):
            continue
        named, claims = _named(data)
        if named == subject and claims.get(CLAIM_KEY, key) == key and claims.get(CLAIM_SIGNER, signer) == signer:
            good.append(claims)
            continue
        others.append(str(named or "no digest"))
    if good:
        return max(good, key=_sequence)
    if others:
        raise SignatureError(
            f"the signature of {where} is of {others[0][:23]}, not of the entry's {subject[:23]}: it was copied "
            "from another entry, or the entry changed after it was signed",
            "do not use this entry; push and sign it again from a trusted copy",
        )
    raise SignatureError(
        f"no signature of {where} verifies with {verifier.path} (signed with another key, or altered)",
        "check --public-key / TOOLCHAIN_VERIFY_KEY names the signer's public key",
    )


def verify_signatures(reg: SignedRegistry, verifier: Verifier) -> dict[str, str]:
    """Check every entry's signature: key -> why it fails (an empty dict: every entry is signed and valid)."""
    from toolchain.errors import RegistryError

    bad: dict[str, str] = {}
    entries = reg.keys()
    for key in entries:
        try:
            verified_entry(reg, key, verifier)
        except RegistryError as e:  # unsigned, another key or digest, or a record that is refused
            bad[key] = e.message
    return bad
