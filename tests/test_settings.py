"""Every environment variable is read through toolchain.settings, at call time."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from toolchain import settings

PACKAGE = Path(__file__).resolve().parents[1] / "toolchain"


def _env_reads(tree: ast.AST) -> list[int]:
    """Lines that read the environment: os.environ / os.getenv / environ.get."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
            lines.append(node.lineno)
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(a.name in ("environ", "getenv") for a in node.names)
        ):
            lines.append(node.lineno)
    return lines


def test_only_settings_reads_the_environment() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "settings.py" and path.parent == PACKAGE:
            continue
        text = path.read_text()
        for line in _env_reads(ast.parse(text)):
            src = text.splitlines()[line - 1]
            if "dict(os.environ)" in src:  # a child process inherits the environment; nothing is read
                continue
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {src.strip()}")
    assert offenders == [], "read the environment through toolchain.settings"


def test_settings_are_read_at_call_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLCHAIN_CACHE", str(tmp_path / "a"))
    assert settings.cache_home() == tmp_path / "a"
    monkeypatch.setenv("TOOLCHAIN_CACHE", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert settings.cache_home() == tmp_path / "home" / ".cache" / "toolchain"
    monkeypatch.setenv("TRTLLM_ROOT", str(tmp_path / "trtllm"))
    assert settings.trtllm_root() == tmp_path / "trtllm"
    monkeypatch.delenv("TRTLLM_ROOT")
    assert settings.trtllm_root() == Path("/app/tensorrt_llm")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://a")
    assert settings.s3_endpoint_url() == "http://a"
    monkeypatch.setenv("TOOLCHAIN_S3_ENDPOINT_URL", "http://b")
    assert settings.s3_endpoint_url() == "http://b"


def test_every_setting_is_documented() -> None:
    doc = settings.__doc__ or ""
    for s in settings.ALL:
        if s.name.startswith("TOOLCHAIN_") or s.name == "TRTLLM_ROOT":
            assert f"``{s.name}``" in doc, s.name


def test_registry_url_from_the_environment_when_no_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolchain.registry import open_registry

    monkeypatch.setenv("TOOLCHAIN_REGISTRY", str(tmp_path / "reg"))
    assert Path(open_registry(None).url).resolve() == (tmp_path / "reg").resolve()
    monkeypatch.delenv("TOOLCHAIN_REGISTRY")
    monkeypatch.setenv("TOOLCHAIN_CACHE", str(tmp_path / "cache"))
    assert Path(open_registry(None).url) == (tmp_path / "cache" / "registry").resolve()
