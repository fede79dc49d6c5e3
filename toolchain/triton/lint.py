"""Lint a Triton TensorRT-LLM model repository (ours or hand-written) against its engine and the
upstream backend (docs/upstream-trtllm-1.1.md).

Every finding names the file, the field and the fix. Rules: placeholders left by fill_template,
parameters the C++ backend reads without a default, decoupled streaming, KV reuse / chunked context
vs paged context FMHA, batch and beam limits vs the engine, logits dtype, world size, ensemble wiring,
and every path a model will open: it must exist where lint runs, unless it lies under the engines
root the repository was emitted for (then it is a warning naming the mount).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import TritonRepoError
from toolchain.triton import parameters as P
from toolchain.triton import speculative as SP
from toolchain.triton import tensors as T
from toolchain.triton.emit import EngineInfo
from toolchain.triton.speculative import lint_repository_features


@dataclass(frozen=True)
class Finding:
    file: str
    field: str
    message: str
    fix: str
    severity: str = "error"

    def line(self) -> str:
        return f"{self.severity}: {self.file}: {self.field}: {self.message} — {self.fix}"


def _parse(path: Path) -> tuple[Any | None, Finding | None]:
    from google.protobuf import text_format

    from toolchain._deps import require

    pb = require("tritonclient.grpc.model_config_pb2", "triton")
    text = path.read_text(errors="replace")
    try:
        return text_format.Parse(text, pb.ModelConfig()), None
    except text_format.ParseError as e:
        return None, Finding(
            str(path),
            f"line {e.GetLine()}:{e.GetColumn()}",
            f"does not parse: {e}",
            "fix the protobuf text (field names and types must match Triton's ModelConfig)",
        )


def _param(cfg: Any, key: str) -> str | None:
    return cfg.parameters[key].string_value if key in cfg.parameters else None


def _dtype_name(cfg: Any, tensor: str, outputs: bool = True) -> str | None:
    from tritonclient.grpc import model_config_pb2 as pb

    for t in cfg.output if outputs else cfg.input:
        if t.name == tensor:
            return str(pb.DataType.Name(t.data_type))
    return None


def read_repo_meta(repo: Path) -> dict[str, Any]:
    """The repository's ``toolchain-repo.json`` ({} when absent); a damaged one is a TritonRepoError."""
    p = Path(repo) / "toolchain-repo.json"
    if not p.is_file():
        return {}
    try:
        meta = json.loads(p.read_bytes())
    except OSError as e:
        raise TritonRepoError(f"cannot read {p}: {e.strerror or e}") from e
    except (ValueError, RecursionError) as exc:
        raise TritonRepoError(f"{p} is not JSON") from exc
    engine = meta.get("engine") if isinstance(meta, dict) else None
    if not isinstance(meta, dict) or not isinstance(engine or {}, dict):
        raise TritonRepoError(f"{p} is not the object `toolchain triton emit` writes")
    ws = (engine or {}).get("world_size")
    if ws is not None and (type(ws) is not int or not 1 <= ws <= 1024):
        raise TritonRepoError(f"{p}: engine.world_size {ws!r:.40} is not a rank count")
    return meta


def _resolve(model_dir: Path, value: str) -> Path:
    """How our Python models read a path parameter: relative to the model's directory."""
    p = Path(value)
    return p if p.is_absolute() else (model_dir / p)


def _path_finding(
    file: str, field: str, value: str, exists: bool, meta: dict[str, Any], what: str, fix: str
) -> Finding | None:
    if exists:
        return None
    root = meta.get("engines_root")
    if root and value.startswith(root.rstrip("/") + "/"):
        src = next((f"the {m['what']}" for m in meta.get("mounts", []) if m.get("target") == value), "the artifact")
        return Finding(
            file,
            field,
            f"{value} does not exist here; the repository expects {what} mounted under {root}",
            f"provide {src} at {value} where the server runs (image build or volume mount)",
            "warning",
        )
    if what == "tokenizer":
        return Finding(file, field, f"no tokenizer at {value or '(empty)'}", fix)
    return Finding(file, field, f"{what} {value or '(empty)'} does not exist here", fix)


def lint_repository(repo: Path, *, world_size: int | None = None) -> list[Finding]:
    """Every finding for the repository at ``repo``, errors and warnings, in file order of the checks."""
    repo = Path(repo)
    if not repo.is_dir():
        what = "is not a directory" if repo.exists() else "does not exist"
        raise TritonRepoError(
            f"{repo} {what}", "give the model repository directory (the --out of `toolchain triton emit`)"
        )
    configs, files, out = _read_configs(repo)
    if not configs:
        return [*out, Finding(str(repo), "-", "holds no */config.pbtxt", "point at a Triton model repository")]
    meta = read_repo_meta(repo)
    llm_name = next(
        (
            n
            for n, c in configs.items()
            if c.backend == "tensorrtllm"
            or _param(c, "gpt_model_type")
            or (_param(c, "toolchain_reference") and _param(c, "standin_weights") is None)  # the llmapi stand-in
        ),
        None,
    )
    if llm_name:
        out += _lint_llm(repo, llm_name, configs, files, meta, world_size)
    out += _lint_parameters(repo, configs, files, llm_name)
    out += _lint_engine_inside(repo, configs, files, meta)
    out += _lint_tokenizers(repo, configs, files, meta)
    out += [
        Finding(files.get("tensorrt_llm", str(repo)), "speculative/LoRA", msg, "emit the repository from the spec")
        for msg in lint_repository_features(configs, meta)
    ]
    out += _lint_llmapi(repo, meta)
    out += _lint_models(repo, configs, files)
    out += _lint_loadable(repo, configs, files, llm_name)
    return out


def _lint_loadable(repo: Path, configs: dict[str, Any], files: dict[str, str], llm_name: str | None) -> list[Finding]:
    """What Triton itself needs to load each model (toolchain's server starts with --disable-auto-complete-config,
    so nothing is guessed), and an LLM model for a TensorRT-LLM repository."""
    out: list[Finding] = []
    for name, cfg in configs.items():
        f = Path(files[name])
        if not cfg.backend and not cfg.platform:
            out.append(
                Finding(
                    str(f),
                    "backend",
                    f"model {name} names neither a backend nor a platform, so Triton cannot load it",
                    'set backend: "tensorrtllm" or "python", or platform: "ensemble"',
                )
            )
        if cfg.name and cfg.name != f.parent.name:
            out.append(
                Finding(
                    str(f),
                    "name",
                    f"{cfg.name!r} differs from its directory {f.parent.name!r}; Triton refuses the model",
                    f'set name: "{f.parent.name}" (or rename the directory)',
                )
            )
        if not any(d.is_dir() and d.name.isdigit() for d in f.parent.iterdir()):
            out.append(
                Finding(
                    str(f),
                    "version",
                    f"model {name} has no version directory (e.g. {f.parent.name}/1/), so Triton serves no version",
                    f"create {f.parent.name}/1/",
                )
            )
        if not cfg.platform and not cfg.input and cfg.backend:
            out.append(
                Finding(
                    str(f),
                    "input",
                    f"model {name} declares no inputs (toolchain serves with --disable-auto-complete-config; "
                    "only a Python model's auto_complete_config could add them elsewhere)",
                    "declare the model's inputs and outputs",
                    "error" if cfg.backend == "tensorrtllm" else "warning",
                )
            )
    llmapi = (repo / "tensorrt_llm" / "1" / "model.yaml").is_file()
    if llm_name is None and not llmapi:
        out.append(
            Finding(
                str(repo),
                "-",
                "no TensorRT-LLM model: no config has backend tensorrtllm (or gpt_model_type), and there is no "
                "tensorrt_llm/1/model.yaml",
                "emit the repository with `toolchain triton emit`, or add the tensorrt_llm model",
            )
        )
    return out


def _read_configs(repo: Path) -> tuple[dict[str, Any], dict[str, str], list[Finding]]:
    """Parsed ``*/config.pbtxt`` by model name, their paths, and findings (placeholders, parse errors)."""
    out: list[Finding] = []
    configs: dict[str, Any] = {}
    files: dict[str, str] = {}
    for p in sorted(repo.glob("*/config.pbtxt")):
        text = p.read_text(errors="replace")
        for n, ln in enumerate(text.splitlines(), 1):
            for m in re.finditer(r"\$\{([^}]*)\}", ln):
                out.append(
                    Finding(
                        str(p),
                        f"line {n}",
                        f"unfilled placeholder ${{{m.group(1)}}}",
                        f"set {m.group(1)} (toolchain emits configs with every value filled)",
                    )
                )
        cfg, err = _parse(p)
        if err or cfg is None:
            out.append(err or Finding(str(p), "-", "does not parse", "fix the file"))
            continue
        configs[cfg.name or p.parent.name] = cfg
        files[cfg.name or p.parent.name] = str(p)
    return configs, files, out


def _lint_llm(
    repo: Path,
    llm_name: str,
    configs: dict[str, Any],
    files: dict[str, str],
    meta: dict[str, Any],
    world_size: int | None,
) -> list[Finding]:
    """The LLM model (``tensorrt_llm``): its type, engine, required and valid parameters, engine limits."""
    llm, f = configs[llm_name], files[llm_name]
    out: list[Finding] = []
    mtype = _param(llm, "gpt_model_type")
    if mtype is None and llm.backend != "tensorrtllm":  # the tensorrtllm backend's own check: _llm_paths
        out.append(
            Finding(
                f,
                "parameters.gpt_model_type",
                "missing: the model the CPU reference stands in for (the tensorrtllm backend) fails to load without it",
                'add parameters { key: "gpt_model_type" value { string_value: "inflight_fused_batching" } }',
            )
        )
    if mtype is not None and mtype not in ("inflight_fused_batching", "inflight_batching", "V1", "v1"):
        out.append(
            Finding(
                f,
                "parameters.gpt_model_type",
                f"is {mtype!r}",
                "set it to inflight_fused_batching (or V1 for static batching)",
            )
        )
    engine, found = _llm_engine(llm, f, meta)
    out += found
    out += _llm_paths(repo, llm_name, llm, f, meta)
    if world_size is not None and engine is not None and world_size != engine.world_size:
        out.append(
            Finding(
                f,
                "world_size",
                f"launch world size {world_size} != engine world size {engine.world_size}",
                f"launch with {engine.world_size} ranks (one per GPU)",
            )
        )
    out += _llm_parameters(llm, f, engine)
    if engine is not None:
        out += _llm_against_engine(llm, f, engine, configs, files)
    streams = any(any(i.name in ("stream", "streaming") for i in c.input) for n, c in configs.items() if n != llm_name)
    draft_target = SP.DRAFT_MODEL in configs  # draft-target is never decoupled (speculative.py)
    if streams and not llm.model_transaction_policy.decoupled and not draft_target:
        out.append(
            Finding(
                f,
                "model_transaction_policy.decoupled",
                "false: requests with stream=true (and requests with batch > 1) are answered with an error",
                "set decoupled: true to serve streaming clients",
                "warning",
            )
        )
    return out


def _llm_engine(llm: Any, f: str, meta: dict[str, Any]) -> tuple[EngineInfo | None, list[Finding]]:
    """The engine the LLM model serves (read from its directory, or as emitted), and findings about it."""
    out: list[Finding] = []
    engine: EngineInfo | None = None
    path = _param(llm, "gpt_model_path") or ""
    if path and Path(path, "config.json").is_file():
        engine = EngineInfo.from_engine_dir(Path(path))
        kv = engine.kv_mismatch(meta["kv_cache"]) if meta.get("kv_cache") else None
        if kv:
            out.append(
                Finding(
                    f, "parameters.gpt_model_path", kv, "re-emit from the spec the engine was built for, or rebuild"
                )
            )
        ranks = len(list(Path(path).glob("rank*.engine")))
        if ranks != engine.world_size:
            out.append(
                Finding(
                    f,
                    "parameters.gpt_model_path",
                    f"engine has {ranks} rank*.engine files for world size {engine.world_size}",
                    "rebuild the engine; every rank must be present",
                )
            )
    elif meta.get("reference") and meta.get("engine"):
        engine = EngineInfo(**meta["engine"])
    elif llm.backend == "tensorrtllm":
        found = _path_finding(
            f,
            "parameters.gpt_model_path",
            path,
            False,
            meta,
            "engine directory",
            "point it at the directory holding config.json and rank*.engine",
        )
        if found is not None:
            out.append(found)
        if found is not None and found.severity == "warning" and meta.get("engine"):
            engine = EngineInfo(**meta["engine"])
    return engine, out


def _llm_paths(repo: Path, llm_name: str, llm: Any, f: str, meta: dict[str, Any]) -> list[Finding]:
    """Parameters the C++ backend cannot do without, and the CPU reference model's checkpoint."""
    out: list[Finding] = []
    if llm.backend == "tensorrtllm":
        for key, value in T.REQUIRED_PARAMETERS.items():
            if _param(llm, key) is None:
                fix = (
                    f'add parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'
                    if value
                    else f'add parameters {{ key: "{key}" value {{ string_value: "" }} }} (empty turns it off)'
                )
                out.append(
                    Finding(
                        f,
                        f"parameters.{key}",
                        "missing: the tensorrtllm backend reads it with no default and fails to load "
                        f"('Cannot find parameter with name: {key}')",
                        fix,
                    )
                )
    if _param(llm, "toolchain_reference") is not None:
        hf = _param(llm, "hf_model_dir") or ""
        hf_path = _resolve(repo / llm_name, hf)
        found = _path_finding(
            f,
            "parameters.hf_model_dir",
            hf,
            bool(hf) and (hf_path / "config.json").is_file(),
            meta,
            "reference model directory",
            "re-emit the repository (the reference checkpoint is copied into tensorrt_llm/1/hf_model)",
        )
        if found is not None:
            out.append(found)
    return out


def _llm_parameters(llm: Any, f: str, engine: EngineInfo | None = None) -> list[Finding]:
    """What the CUDA-graph knobs do together (each key's own values: ``_lint_parameters``)."""
    out: list[Finding] = []
    mode = P.parse_bool("cpp_bool", _param(llm, "cuda_graph_mode") or "")
    size = _param(llm, "cuda_graph_cache_size")
    n = int(size) if size is not None and P.INT_RE.fullmatch(size) else None
    if not mode and n:
        out.append(
            Finding(
                f,
                "parameters.cuda_graph_cache_size",
                "set while cuda_graph_mode is off (no effect)",
                "set cuda_graph_mode: true or drop the cache size",
                "warning",
            )
        )
    if mode and n == 0:  # negative: _lint_parameters' range error says it
        out.append(
            Finding(
                f,
                "parameters.cuda_graph_cache_size",
                f"{n} with cuda_graph_mode on: the runtime keeps a single graph, so every change in the decode "
                "batch evicts it and captures again",
                "set it to the number of decode batch sizes to keep (toolchain emits one per power of 2 up to "
                "the engine's max batch size)",
                "warning",
            )
        )
    if _param(llm, "cross_kv_cache_fraction") and not _param(llm, "encoder_model_path"):
        out.append(
            Finding(
                f,
                "parameters.cross_kv_cache_fraction",
                "set for a decoder-only model: the runtime refuses to start ('Do not set crossKvCacheFraction "
                "for decoder-only model')",
                "remove it (it is for encoder-decoder models)",
            )
        )
    onboard = P.parse_bool("cpp_bool", _param(llm, "kv_cache_onboard_blocks") or "")
    if onboard is False and engine is not None and engine.paged_context_fmha:
        out.append(
            Finding(
                f,
                "parameters.kv_cache_onboard_blocks",
                "false with an engine built with paged context FMHA: the runtime refuses to start ('KV cache "
                "blocks need to be onboarded if context FMHA')",
                "set it to true (or remove it)",
            )
        )
    if mode and n is not None and engine is not None and n > engine.max_batch_size:
        out.append(
            Finding(
                f,
                "parameters.cuda_graph_cache_size",
                f"{n} > engine max_batch_size {engine.max_batch_size}: the runtime keeps at most "
                f"{engine.max_batch_size} graphs",
                f"set it <= {engine.max_batch_size}",
                "warning",
            )
        )
    return out


def _table_model(name: str, cfg: Any, llm_name: str | None) -> str | None:
    """Which model of the reference table a config is (None: not one of inflight_batcher_llm's)."""
    if cfg.backend == "tensorrtllm" or name == llm_name or _param(cfg, "gpt_model_type") is not None:
        return "tensorrt_llm"
    if name in ("preprocessing", "postprocessing", "tensorrt_llm_bls") and cfg.backend == "python":
        return name
    return None


def _lint_parameters(repo: Path, configs: dict[str, Any], files: dict[str, str], llm_name: str | None) -> list[Finding]:
    """Every parameter key against what its model reads (TensorRT-LLM 1.1, triton.parameters): unknown keys,
    values the model cannot parse, deprecated and rejected keys, guided decoding without its tokenizer info."""
    out: list[Finding] = []
    models = set(configs)
    for name, cfg in configs.items():
        which = _table_model(name, cfg, llm_name)
        if which is None:
            continue
        known = P.keys(which)
        extra = (
            P.REFERENCE_KEYS if which == "tensorrt_llm" and _param(cfg, "toolchain_reference") is not None else set()
        )
        f = files[name]
        for key in cfg.parameters:
            value = cfg.parameters[key].string_value
            field = f"parameters.{key}"
            if key in extra:
                continue
            spec = known.get(key)
            if spec is None:
                why = "the tensorrtllm backend" if which == "tensorrt_llm" else f"the {which} model"
                out.append(
                    Finding(
                        f,
                        field,
                        f"unknown key: {why} never reads it, so it has no effect",
                        P.did_you_mean(key, [*known, *extra]),
                    )
                )
                continue
            if "rejected" in spec:
                out.append(Finding(f, field, spec["rejected"], "remove it"))
                continue
            if "deprecated" in spec:
                out.append(Finding(f, field, f"deprecated: {spec['deprecated']}", "remove it", "warning"))
                continue
            if value == "" and spec["type"] not in ("path", "string", "enum", "model_name"):
                default = spec.get("default")
                out.append(
                    Finding(
                        f,
                        field,
                        f"empty: the model uses its default ({default})",
                        "give a value or remove the key",
                        "warning",
                    )
                )
                continue
            problem = P.value_problem(which, key, value, spec, models)
            if problem is not None:
                values = spec.get("values")
                fix = f"use one of {', '.join(repr(v) for v in values)}" if values else _type_fix(spec)
                if spec["type"] == "model_name":
                    fix = "name a model of this repository"
                out.append(Finding(f, field, problem, fix))
        if which != "tensorrt_llm" and not _is_toolchain_model(repo, name):
            for key, spec in known.items():
                if spec.get("mandatory_upstream") and key not in cfg.parameters:
                    out.append(
                        Finding(
                            f,
                            f"parameters.{key}",
                            f"missing: the upstream {which} model.py reads it with no default (KeyError at load)",
                            f'add parameters {{ key: "{key}" value {{ string_value: "" }} }}',
                        )
                    )
        if which == "tensorrt_llm":
            out += _guided_decoding(f, cfg)
    return out


# What each parameter type of the reference table is, in the words of someone editing config.pbtxt.
TYPE_WORDS = {
    "int32": "a whole number",
    "uint32": "a whole number >= 0",
    "uint64": "a whole number >= 0",
    "digits": "a whole number >= 0 (digits only)",
    "float": "a number",
    "cpp_bool": "a boolean (true or false)",
    "python_bool": "a boolean (true or false)",
    "bls_bool": "a boolean (true or false)",
    "device_ids": "a list of GPU ids (e.g. 0,1 for one instance on two GPUs; 0;1 for two instances)",
    "int_list": "a comma-separated list of whole numbers (e.g. 1,2,4)",
    "choices": "a list of choices such as {1,2},{3}",
    "path": "a path",
    "string": "a string",
}


def _type_fix(spec: dict[str, Any]) -> str:
    t = str(spec["type"])
    lo, hi = spec.get("min"), spec.get("max")
    bounds = f" in [{lo}, {hi}]" if lo is not None and hi is not None else (f" >= {lo}" if lo is not None else "")
    words = TYPE_WORDS.get(t, "a valid value")
    return f"give {words}{bounds if t in ('int32', 'uint32', 'uint64', 'float') else ''}"


def _lint_engine_inside(
    repo: Path, configs: dict[str, Any], files: dict[str, str], meta: dict[str, Any]
) -> list[Finding]:
    """A repository emitted with its engine inside must serve that engine: after ``cp -a repo copy`` the
    absolute ``gpt_model_path`` still names ``repo``'s engine, and ``copy`` would serve it."""
    if not meta or meta.get("engines_root") or meta.get("reference"):
        return []
    here = repo.resolve()
    out = []
    for name, cfg in configs.items():
        path = _param(cfg, "gpt_model_path") or ""
        if cfg.backend != "tensorrtllm" or not path.startswith("/"):
            continue
        p = Path(path).resolve()
        if p != here and here not in p.parents:
            inside = here / name / "1" / "engine"
            out.append(
                Finding(
                    files[name],
                    "parameters.gpt_model_path",
                    f"{path} lies outside this repository ({here}), which was emitted with its engine inside: "
                    "a copied repository serves the original's engine",
                    f"re-emit the repository at its new place (`toolchain triton emit ... --out {here} --force`), "
                    f"or set gpt_model_path to {inside}",
                )
            )
    return out


def _is_toolchain_model(repo: Path, name: str) -> bool:
    """Whether ``name``'s 1/model.py is the toolchain's own (which reads only the keys it documents)."""
    from toolchain.triton.emit import model_sources

    mine = repo / name / "1" / "model.py"
    try:
        return mine.read_bytes() == (model_sources() / name / "1" / "model.py").read_bytes()
    except (OSError, TritonRepoError):
        return False


def _guided_decoding(f: str, llm: Any) -> list[Finding]:
    backend = _param(llm, "guided_decoding_backend") or ""
    info = _param(llm, "xgrammar_tokenizer_info_path") or ""
    if not backend or backend.startswith("${"):
        return []
    if not info or info.startswith("${"):
        return [
            Finding(
                f,
                "parameters.guided_decoding_backend",
                f"{backend!r} without xgrammar_tokenizer_info_path: the backend silently turns guided decoding off",
                "set xgrammar_tokenizer_info_path to the tokenizer-info JSON (encoded_vocab, tokenizer_str, "
                "stop_token_ids), or empty guided_decoding_backend",
            )
        ]
    if not Path(info).is_file():
        return [
            Finding(
                f,
                "parameters.xgrammar_tokenizer_info_path",
                f"{info} does not exist here (the backend fails to load: 'Xgrammar's tokenizer info path ... does "
                "not exist')",
                "give the absolute path of the tokenizer-info JSON where the server runs",
            )
        ]
    return []


def _llm_against_engine(
    llm: Any, f: str, engine: EngineInfo, configs: dict[str, Any], files: dict[str, str]
) -> list[Finding]:
    """What the engine was built for bounds what the repository may ask of it."""
    out: list[Finding] = []
    reuse = _param(llm, "enable_kv_cache_reuse") in ("true", "True", "TRUE", "1")
    chunked = _param(llm, "enable_chunked_context") in ("true", "True", "TRUE", "1")
    if (reuse or chunked) and not engine.paged_context_fmha:
        what = "enable_kv_cache_reuse" if reuse else "enable_chunked_context"
        out.append(
            Finding(
                f,
                f"parameters.{what}",
                "the engine was built without paged context FMHA",
                "rebuild with `trtllm-build --use_paged_context_fmha enable`, or set it to false",
            )
        )
    if llm.max_batch_size > engine.max_batch_size:
        out.append(
            Finding(
                f,
                "max_batch_size",
                f"{llm.max_batch_size} > engine max_batch_size {engine.max_batch_size}",
                f"set max_batch_size <= {engine.max_batch_size}",
            )
        )
    beam = _param(llm, "max_beam_width")
    if beam and beam.isdigit() and int(beam) > engine.max_beam_width:
        out.append(
            Finding(
                f,
                "parameters.max_beam_width",
                f"{beam} > engine max_beam_width {engine.max_beam_width}",
                f"set it <= {engine.max_beam_width}",
            )
        )
    want = "TYPE_FP32" if engine.logits_dtype == "float32" else "TYPE_FP16"
    for name, cfg in configs.items():
        got = _dtype_name(cfg, "context_logits")
        if got is not None and got != want:
            out.append(
                Finding(
                    files[name],
                    "output context_logits.data_type",
                    f"{got} but the engine's logits are {engine.logits_dtype}",
                    f"set logits_datatype to {want}",
                )
            )
    ids = _param(llm, "gpu_device_ids")
    for inst in ids.split(";") if ids else []:
        if len(inst.split(",")) != engine.world_size:
            out.append(
                Finding(
                    f,
                    "parameters.gpu_device_ids",
                    f"instance '{inst}' has {len(inst.split(','))} GPUs, the engine needs {engine.world_size}",
                    "give each instance as many GPUs as the engine has ranks",
                )
            )
    return out


# What AutoTokenizer.from_pretrained needs besides tokenizer_config.json (transformers: a fast tokenizer's
# tokenizer.json, or a slow tokenizer's vocabulary), which preprocessing/postprocessing call at initialize.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")


def _lint_tokenizers(repo: Path, configs: dict[str, Any], files: dict[str, str], meta: dict[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    for name in ("preprocessing", "postprocessing"):
        if name in configs:
            tok = _param(configs[name], "tokenizer_dir") or ""
            tp = _resolve(repo / name, tok)
            found = _path_finding(
                files[name],
                "parameters.tokenizer_dir",
                tok,
                bool(tok) and any((tp / n).is_file() for n in (*TOKENIZER_FILES, "tokenizer_config.json")),
                meta,
                "tokenizer",
                "point it at a directory with the tokenizer files (relative paths: from the model's directory)",
            )
            if found is not None:
                out.append(found)
            elif tok and tp.is_dir() and not any((tp / n).is_file() for n in TOKENIZER_FILES):
                out.append(
                    Finding(
                        files[name],
                        "parameters.tokenizer_dir",
                        f"{tok} holds no tokenizer.json (nor a vocabulary: {', '.join(TOKENIZER_FILES[1:])}): "
                        f"AutoTokenizer.from_pretrained fails in {name}'s initialize, so the model does not load",
                        "copy the checkpoint's tokenizer.json there (or re-emit the repository)",
                    )
                )
    return out


def _lint_models(repo: Path, configs: dict[str, Any], files: dict[str, str]) -> list[Finding]:
    """Ensemble wiring, and a model.py for every Python-backend model."""
    out: list[Finding] = []
    for name, cfg in configs.items():
        if cfg.max_batch_size < 0:
            out.append(
                Finding(
                    files[name],
                    "max_batch_size",
                    f"{cfg.max_batch_size}: Triton refuses the model ('max_batch_size' must be non-negative)",
                    "set it to the batch the model accepts (0: the model does not batch)",
                )
            )
        if name == "tensorrt_llm_bls" and cfg.backend == "python":
            out += _lint_bls(files[name], cfg, configs, files)
        if cfg.platform == "ensemble":
            out += _lint_ensemble(files[name], cfg, configs, files)
        if cfg.backend == "python" and not (repo / name / "1" / "model.py").is_file():
            out.append(
                Finding(
                    files[name],
                    "backend",
                    "python backend without 1/model.py",
                    "add the model source (toolchain emits it)",
                )
            )
    return out


def _lint_bls(file: str, bls: Any, configs: dict[str, Any], files: dict[str, str]) -> list[Finding]:
    """The BLS model passes each request tensor on, unchanged, to preprocessing or tensorrt_llm under the
    ensemble's wiring (TensorRT-LLM 1.1 tensorrt_llm_bls/1/lib/decode.py; toolchain's model.py does the same),
    and clients send it the ensemble's request. Triton loads a BLS whose input types differ (it checks no BLS
    call); the first request then fails, so each input must have its callee's and the ensemble's data type."""
    out: list[Finding] = []
    ens = configs.get("ensemble")
    ens_types = {i.name: _dtype(i) for i in ens.input} if ens is not None and ens.platform == "ensemble" else {}
    for i in bls.input:
        mine = _dtype(i)
        callees = [("preprocessing", k) for k, v in T.PRE_MAP_IN.items() if v == i.name]
        callees += [("tensorrt_llm", k) for k, v in T.LLM_MAP_IN.items() if v == i.name]
        for model, k in callees:
            target = configs.get(model)
            want = next((_dtype(t) for t in target.input if t.name == k), None) if target is not None else None
            if want is not None and want != mine:
                out.append(
                    Finding(
                        file,
                        f"input {i.name}.data_type",
                        f"{mine}, but the BLS passes it on as {model} input {k}, which is {want}: Triton loads the "
                        f"model, then a request with the standard {want.removeprefix('TYPE_')} {i.name} fails "
                        f"('expects {mine.removeprefix('TYPE_')}')",
                        f"set data_type: {want}",
                    )
                )
                break
        else:
            want = ens_types.get(i.name)
            if want is not None and want != mine:
                out.append(
                    Finding(
                        file,
                        f"input {i.name}.data_type",
                        f"{mine}, but the ensemble's {i.name} is {want}: a request that works on the ensemble "
                        f"fails on the BLS ('expects {mine}')",
                        f"set data_type: {want}",
                    )
                )
    return out


def _lint_llmapi(repo: Path, meta: dict[str, Any]) -> list[Finding]:
    """model.yaml's checkpoint, draft model and LoRA adapters: each a directory beside it (or mounted), or a
    Hugging Face repo id; a host path outside the engines root is flagged."""
    import yaml

    p = repo / "tensorrt_llm" / "1" / "model.yaml"
    if not p.is_file():
        return []
    try:
        opts = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        return [Finding(str(p), "-", f"does not parse: {e}", "fix the YAML")]
    if not isinstance(opts, dict):
        return [Finding(str(p), "-", "is not a mapping of LLM-API options", "re-emit the repository")]
    out = []
    for field, value, marker, what in _llmapi_paths(opts):
        found = _llmapi_path_finding(p, meta, field, value, marker, what)
        if found is not None:
            out.append(found)
    return out


def _llmapi_paths(opts: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(field, value, file the directory must hold, what it is) of every path-valued LLM-API option."""
    out = [("model", str(opts.get("model") or ""), "config.json", "checkpoint directory")]
    sc = opts.get("speculative_config")
    if isinstance(sc, dict) and sc.get("speculative_model"):
        out.append(("speculative_config.speculative_model", str(sc["speculative_model"]), "config.json", "draft model"))
    lc = opts.get("lora_config")
    dirs = lc.get("lora_dir") if isinstance(lc, dict) else None
    for i, d in enumerate(dirs if isinstance(dirs, list) else []):
        out.append((f"lora_config.lora_dir[{i}]", str(d), "adapter_config.json", "LoRA adapter"))
    return out


def _llmapi_path_finding(
    p: Path, meta: dict[str, Any], field: str, value: str, marker: str, what: str
) -> Finding | None:
    local = _resolve(p.parent, value)
    carried = value in (meta.get("carried") or [])
    hub_id = not carried and not value.startswith(("/", ".")) and value.count("/") == 1 and not local.exists()
    if hub_id:
        return None
    root = meta.get("engines_root")
    if Path(value).is_absolute() and local.is_dir() and not (root and value.startswith(root.rstrip("/") + "/")):
        return Finding(
            str(p),
            field,
            f"{what} {value} is a path on this host; the server host must have it at the same place",
            "re-emit the repository (it carries local drafts and adapters beside model.yaml)",
            "warning",
        )
    return _path_finding(
        str(p),
        field,
        value,
        bool(value) and (local / marker).is_file(),
        meta,
        what,
        "re-emit the repository, or name a Hugging Face repo id or a directory with " + marker,
    )


def _dims(dims: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in dims)


def _dims_match(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Triton's CompareDimsWithWildcard: same rank, and each dimension equal or -1 on either side."""
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class _Tensor:
    """An ensemble tensor as Triton infers it: from the model that first declares it (core ensemble_utils.cc)."""

    model: str
    where: str
    dtype: str
    dims: tuple[int, ...]
    batching: bool

    @property
    def full(self) -> tuple[int, ...]:
        return ((-1,) if self.batching else ()) + self.dims


def _dtype(t: Any) -> str:
    from tritonclient.grpc import model_config_pb2 as pb

    return str(pb.DataType.Name(t.data_type))


# The TensorRT-LLM 1.1 template's tensors of each inflight_batcher_llm model: (inputs, outputs).
def _template(model: str, output: bool) -> dict[str, str]:
    rows = {
        "preprocessing": (T.PRE_INPUTS, T.PRE_OUTPUTS),
        "tensorrt_llm": (T.TRTLLM_INPUTS, T.TRTLLM_OUTPUTS),
        SP.DRAFT_MODEL: (T.TRTLLM_INPUTS, T.TRTLLM_OUTPUTS),
        "postprocessing": (T.POST_INPUTS, T.POST_OUTPUTS),
        "ensemble": (T.ENSEMBLE_INPUTS, T.ENSEMBLE_OUTPUTS),
        "tensorrt_llm_bls": (T.BLS_INPUTS, T.BLS_OUTPUTS),
    }.get(model, ([], []))
    return {r[0]: r[1] for r in rows[1 if output else 0]}


def _off_template(t: _Tensor) -> str | None:
    """The template's data type for ``t`` when ``t`` differs from it (None: same, or not a template tensor)."""
    model, kind, name = t.where.split(" ", 2)
    want = _template(model, kind == "output").get(name)
    return want if want not in (None, T.LOGITS, t.dtype) else None


def _meet(
    files: dict[str, str],
    file: str,
    field: str,
    tensors: dict[str, _Tensor],
    name: str,
    mine: _Tensor,
    out: list[Finding],
) -> None:
    """An ensemble tensor met again must agree with where it was first seen; met first, it is recorded."""
    if name not in tensors:
        tensors[name] = mine
    elif (bad := _consistent(files, file, field, name, tensors[name], mine)) is not None:
        out.append(bad)


def _consistent(files: dict[str, str], file: str, field: str, name: str, a: _Tensor, b: _Tensor) -> Finding | None:
    """Triton's ValidateTensorConsistency: one data type, and dims equal up to -1 (with or without the batch).
    The finding goes to the config that departs from the TensorRT-LLM template, when one does."""
    if a.dtype != b.dtype:
        bad = next((t for t in (b, a) if _off_template(t)), None)
        if bad is not None:
            fix = f"set {bad.where} data_type: {_off_template(bad)} (the TensorRT-LLM 1.1 template's type)"
            where = files.get(bad.model, file)
        else:
            fix, where = f"give {a.where} and {b.where} the same data_type", file
        return Finding(
            where,
            f"{bad.where.split(' ', 1)[1]}.data_type" if bad is not None and where != file else field,
            f"ensemble tensor {name} is {a.dtype} in {a.where} but {b.dtype} in {b.where}: Triton refuses the "
            "ensemble ('inconsistent data type')",
            fix,
        )
    if not _dims_match(a.dims, b.dims) and not _dims_match(a.full, b.full):
        return Finding(
            file,
            field,
            f"ensemble tensor {name} has dims {list(a.dims)} in {a.where} but {list(b.dims)} in {b.where}: Triton "
            "refuses the ensemble ('inconsistent shape')",
            "give both the same dims (-1 matches any size)",
        )
    return None


def _lint_ensemble(file: str, ens: Any, configs: dict[str, Any], files: dict[str, str]) -> list[Finding]:
    """Triton's ValidateEnsembleConfig (triton-inference-server/core src/ensemble_scheduler/ensemble_utils.cc),
    run on the configs as written: composing models' batch sizes, every mapped tensor's name, data type and
    dims, unmapped required inputs, and outputs no step produces."""
    out: list[Finding] = []
    batching = ens.max_batch_size > 0
    tensors: dict[str, _Tensor] = {}
    for i in ens.input:
        dims = _dims(i.reshape.shape if i.HasField("reshape") else i.dims)
        tensors[i.name] = _Tensor("ensemble", f"ensemble input {i.name}", _dtype(i), dims, batching)
    produced = set(tensors)
    for o in ens.output:
        dims = _dims(o.reshape.shape if o.HasField("reshape") else o.dims)
        tensors.setdefault(o.name, _Tensor("ensemble", f"ensemble output {o.name}", _dtype(o), dims, batching))
    for n, step in enumerate(ens.ensemble_scheduling.step):
        model = configs.get(step.model_name)
        where = f"ensemble_scheduling.step[{n}] ({step.model_name})"
        if model is None:
            out.append(
                Finding(file, where, f"model {step.model_name} is not in the repository", "add it or fix model_name")
            )
            continue
        if 0 < model.max_batch_size < ens.max_batch_size:  # < 0: refused on its own (_lint_models)
            out.append(
                Finding(
                    file,
                    "max_batch_size",
                    f"ensemble allows batch {ens.max_batch_size} but step {step.model_name} allows only "
                    f"{model.max_batch_size}: Triton refuses the ensemble",
                    f"set max_batch_size <= {model.max_batch_size} here, or raise {step.model_name}'s to "
                    f"{ens.max_batch_size}",
                )
            )
        mb = model.max_batch_size > 0
        inputs = {i.name: i for i in model.input}
        mapped = set(step.input_map)
        for k, v in step.input_map.items():
            field = f"{where}.input_map[{k}]"
            if k not in inputs:
                out.append(Finding(file, field, f"{step.model_name} has no input {k}", "use the model's input name"))
                continue
            if v not in produced:
                out.append(
                    Finding(
                        file,
                        field,
                        f"{v} is neither an ensemble input nor an earlier step's output",
                        "fix the tensor name",
                    )
                )
            t = inputs[k]
            mine = _Tensor(step.model_name, f"{step.model_name} input {k}", _dtype(t), _dims(t.dims), mb)
            _meet(files, file, field, tensors, v, mine, out)
        for k, t in inputs.items():
            if k not in mapped and not t.optional:
                out.append(
                    Finding(
                        file,
                        where,
                        f"required input {k} of {step.model_name} is not mapped: Triton refuses the ensemble",
                        f'add input_map {{ key: "{k}" value: "<ensemble tensor>" }} (or mark {k} optional)',
                    )
                )
        outputs = {o.name: o for o in model.output}
        for k, v in step.output_map.items():
            field = f"{where}.output_map[{k}]"
            if k not in outputs:
                out.append(Finding(file, field, f"{step.model_name} has no output {k}", "use the model's output name"))
                continue
            t = outputs[k]
            mine = _Tensor(step.model_name, f"{step.model_name} output {k}", _dtype(t), _dims(t.dims), mb)
            _meet(files, file, field, tensors, v, mine, out)
            produced.add(v)
    for o in ens.output:
        if o.name not in produced:
            out.append(Finding(file, f"output {o.name}", "no step produces it", "map a step output to it"))
    return out
