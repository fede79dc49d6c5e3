"""Emit an `inflight_batcher_llm` Triton model repository, every config.pbtxt built as a
``ModelConfig`` protobuf message and serialised (no text templates, no ``${...}`` can survive).

Models: preprocessing, tensorrt_llm, postprocessing, ensemble, tensorrt_llm_bls. With
``reference=True`` the ``tensorrt_llm`` model is the CPU reference model (Python backend,
PyTorch), with the same inputs and outputs as TensorRT-LLM's C++ backend; it says so in its
parameters, its log and the repository's ``toolchain-repo.json``.

Relocatable layout: no path on the building host (``$TOOLCHAIN_CACHE``, the registry) is written
into a config. The tokenizer is copied into ``preprocessing/tokenizer/`` and the Python models name it relative to
their own directory. The engine is either copied into ``tensorrt_llm/1/engine/`` (hard links where
the filesystem allows) or, with ``engines_root``, referenced as ``<engines_root>/<engine key>``:
the directory an image build or a pod mounts it at (the emit result lists those mounts).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from toolchain.digest import copy_tree
from toolchain.errors import TritonRepoError
from toolchain.outdir import check_output, owned_output
from toolchain.specs.cuda_graphs import tensorrt_cache_size
from toolchain.specs.matrix import Cell
from toolchain.specs.models import Serving
from toolchain.specs.slo import slo_targets
from toolchain.specs.speculative_spec import engine_max_seq_len
from toolchain.triton import speculative as SP
from toolchain.triton import tensors as T

REFERENCE_NOTE = "CPU reference model (PyTorch + transformers), not TensorRT-LLM: same tensors, not the same engine"
MODELS = ("preprocessing", "tensorrt_llm", "postprocessing", "ensemble", "tensorrt_llm_bls")
# Tokenizer files a transformers AutoTokenizer reads (config.json: model_type for the fallback class).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "generation_config.json",
    "config.json",
    "chat_template.jinja",
)
# inside a model directory: Triton takes every top-level directory for a model
TOKENIZER_HOME = "preprocessing/tokenizer"
TOKENIZER_REL = "../" + TOKENIZER_HOME  # from any model's directory
ENGINE_REL = "tensorrt_llm/1/engine"
REFERENCE_MODEL_REL = "1/hf_model"  # from the tensorrt_llm model's directory


def model_sources() -> Path:
    """The Python-backend model sources: inside the installed package (wheel), or the source checkout's
    ``triton_repo/`` (editable install)."""
    here = Path(__file__).resolve().parents[1]
    for d in (here / "triton_repo", here.parent / "triton_repo"):
        if (d / "preprocessing" / "1" / "model.py").is_file():
            return d
    raise TritonRepoError(
        f"the Triton model sources are missing (looked in {here / 'triton_repo'} and {here.parent / 'triton_repo'})",
        "reinstall the toolchain (`pip install --force-reinstall toolchain-*.whl`) or run from its source checkout",
    )


@dataclass(frozen=True)
class EngineInfo:
    """What the repository must agree with: read from an engine's config.json, or predicted."""

    engine_dir: str | None
    max_batch_size: int
    max_beam_width: int
    max_input_len: int
    max_seq_len: int
    world_size: int
    paged_context_fmha: bool
    tokens_per_block: int
    logits_dtype: str
    source: str
    tp_size: int = 1
    pp_size: int = 1
    kv_cache_type: str = "PAGED"
    kv_cache_quant_algo: str | None = None  # pretrained_config.quantization: the engine decides the KV dtype

    @classmethod
    def from_engine_dir(cls, d: Path) -> EngineInfo:
        try:
            cfg = json.loads((d / "config.json").read_text())
            bc, pc = cfg["build_config"], cfg["pretrained_config"]
            plug = bc.get("plugin_config") or {}
            mapping = pc["mapping"]
            kv_algo = (pc.get("quantization") or {}).get("kv_cache_quant_algo")
            kv_type = bc.get("kv_cache_type") or ("PAGED" if plug.get("paged_kv_cache", True) else "CONTINUOUS")
            return cls(
                str(d.resolve()),
                int(bc["max_batch_size"]),
                int(bc.get("max_beam_width", 1)),
                int(bc["max_input_len"]),
                int(bc["max_seq_len"]),
                int(mapping["world_size"]),
                bool(plug.get("use_paged_context_fmha", False)),
                int(plug.get("tokens_per_block", 32)),
                str(pc.get("logits_dtype") or "float32"),
                f"{d}/config.json",
                int(mapping.get("tp_size", mapping["world_size"])),
                int(mapping.get("pp_size", 1)),
                str(kv_type).upper(),
                str(kv_algo).upper() if kv_algo else None,
            )
        except (OSError, KeyError, ValueError, TypeError) as e:
            raise TritonRepoError(
                f"{d} is not a TensorRT-LLM engine directory ({type(e).__name__}: {e})",
                "give --engine a registry key or a directory with config.json and rank*.engine",
            ) from e

    @classmethod
    def predicted(cls, cell: Cell) -> EngineInfo:
        from toolchain.specs.resolve import resolve

        r = resolve(cell)
        return cls(
            None,
            cell.max_batch_size,
            cell.spec.build.max_beam_width,
            cell.max_input_len,
            cell.max_seq_len,
            cell.world_size,
            r.use_paged_context_fmha,
            r.tokens_per_block,
            cell.spec.build.logits_dtype,
            "predicted from the spec (no engine: CPU reference)",
            cell.tp,
            cell.pp,
            r.kv_cache_type.upper(),
        )

    def mismatches(self, cell: Cell) -> list[str]:
        """Where this engine differs from what the cell asks (empty when it is the cell's engine)."""
        b = cell.spec.build
        want: list[tuple[str, object, object]] = [
            ("mapping.tp_size", cell.tp, self.tp_size),
            ("mapping.pp_size", cell.pp, self.pp_size),
            ("mapping.world_size", cell.world_size, self.world_size),
            ("build_config.max_batch_size", cell.max_batch_size, self.max_batch_size),
            ("build_config.max_beam_width", b.max_beam_width, self.max_beam_width),
            ("build_config.max_seq_len", engine_max_seq_len(cell), self.max_seq_len),
            ("build_config.max_input_len", min(cell.max_input_len, cell.max_seq_len), self.max_input_len),
            ("build_config.kv_cache_type", b.kv_cache_type.upper(), self.kv_cache_type),
            ("plugin_config.tokens_per_block", b.tokens_per_block, self.tokens_per_block),
            ("logits_dtype", b.logits_dtype, self.logits_dtype),
        ]
        if b.use_paged_context_fmha is False:
            want.append(("plugin_config.use_paged_context_fmha", False, self.paged_context_fmha))
        out = [f"{k}: cell {w!r}, engine {g!r}" for k, w, g in want if w != g]
        kv = self.kv_mismatch(cell.spec.quantization.kv_cache)
        return [*out, kv] if kv else out

    def kv_mismatch(self, kv_cache: str) -> str | None:
        """The spec's quantization.kv_cache against the engine's KV dtype (None when they agree)."""
        want = KV_QUANT_ALGO.get(kv_cache)
        if want == self.kv_cache_quant_algo:
            return None
        got = self.kv_cache_quant_algo or "none (the model dtype)"
        return (
            f"spec quantization.kv_cache {kv_cache!r} but the engine's config.json has "
            f"quantization.kv_cache_quant_algo {got} (the engine decides the KV dtype)"
        )


# spec quantization.kv_cache -> the engine's pretrained_config.quantization.kv_cache_quant_algo
KV_QUANT_ALGO: dict[str, str | None] = {"auto": None, "fp8": "FP8", "int8": "INT8"}


def _pb() -> Any:
    from toolchain._deps import require

    return require("tritonclient.grpc.model_config_pb2", "triton")


def _io(pb: Any, rows: list[T.T], logits: str, *, output: bool = False, reshape: set[str] | None = None) -> list[Any]:
    out = []
    for name, dtype, dims, optional, ragged in rows:
        dt = logits if dtype == T.LOGITS else dtype
        if output:
            msg = pb.ModelOutput(name=name, data_type=pb.DataType.Value(dt), dims=list(dims))
        else:
            msg = pb.ModelInput(
                name=name,
                data_type=pb.DataType.Value(dt),
                dims=list(dims),
                optional=optional,
                allow_ragged_batch=ragged,
            )
            if reshape and name in reshape:
                msg.reshape.shape[:] = []
                msg.reshape.SetInParent()
        out.append(msg)
    return out


def _params(cfg: Any, values: dict[str, Any]) -> None:
    for k, v in values.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        cfg.parameters[k].string_value = str(v)


def _cpu_group(pb: Any, count: int) -> Any:
    return pb.ModelInstanceGroup(count=count, kind=pb.ModelInstanceGroup.KIND_CPU)


def build_configs(
    cell: Cell,
    engine: EngineInfo,
    *,
    reference: bool,
    gpt_model_path: str = "",
    reference_model_path: str = REFERENCE_MODEL_REL,
) -> dict[str, Any]:
    """The five ModelConfig messages, by model name. Paths: the tokenizer (and the reference model) are
    relative to each model's directory; ``gpt_model_path`` is where the C++ backend will find the engine."""
    pb = _pb()
    s = cell.spec.serving
    logits = "TYPE_FP32" if engine.logits_dtype == "float32" else "TYPE_FP16"
    tmbs = engine.max_batch_size
    pre = _preprocessing_config(pb, s, tmbs, logits)
    llm = pb.ModelConfig(name="tensorrt_llm", backend="python" if reference else "tensorrtllm", max_batch_size=tmbs)
    llm.model_transaction_policy.decoupled = s.decoupled
    llm.input.extend(_io(pb, T.TRTLLM_INPUTS, logits, reshape=T.SCALARS_RESHAPED))
    llm.output.extend(_io(pb, T.TRTLLM_OUTPUTS, logits, output=True))
    _batching(llm, s)
    llm.instance_group.append(_cpu_group(pb, 1))
    _params(llm, _llm_parameters(cell, engine, reference, gpt_model_path, reference_model_path))
    post = _postprocessing_config(pb, s, tmbs, logits)
    ens = _ensemble_config(pb, tmbs, logits)
    bls = _bls_config(pb, s, tmbs, logits)
    if s.gpu_device_ids:
        llm.parameters["gpu_device_ids"].string_value = ";".join(",".join(map(str, g)) for g in s.gpu_device_ids)
    return {"preprocessing": pre, "tensorrt_llm": llm, "postprocessing": post, "ensemble": ens, "tensorrt_llm_bls": bls}


def _batching(cfg: Any, s: Serving) -> None:
    """Dynamic batching with the spec's queue delay and queue size."""
    cfg.dynamic_batching.max_queue_delay_microseconds = s.max_queue_delay_us
    cfg.dynamic_batching.default_queue_policy.max_queue_size = s.max_queue_size


def _preprocessing_config(pb: Any, s: Serving, tmbs: int, logits: str) -> Any:
    """The preprocessing model: tokenizes the prompt with the repository's tokenizer."""
    pre = pb.ModelConfig(name="preprocessing", backend="python", max_batch_size=tmbs)
    pre.input.extend(_io(pb, T.PRE_INPUTS, logits))
    pre.output.extend(_io(pb, T.PRE_OUTPUTS, logits, output=True))
    _batching(pre, s)
    pre.instance_group.append(_cpu_group(pb, s.instances.preprocessing))
    _params(pre, {"tokenizer_dir": TOKENIZER_REL, "add_special_tokens": True})
    return pre


def _llm_parameters(
    cell: Cell, engine: EngineInfo, reference: bool, gpt_model_path: str, reference_model_path: str
) -> dict[str, Any]:
    """The tensorrt_llm model's parameters (the reference model's own ones added with ``reference``)."""
    s = cell.spec.serving
    cg = s.cuda_graphs
    p: dict[str, Any] = {
        **T.REQUIRED_PARAMETERS,
        "gpt_model_type": s.batching,
        "gpt_model_path": gpt_model_path,
        "max_beam_width": cell.spec.build.max_beam_width,
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "kv_cache_free_gpu_mem_fraction": s.kv_cache_free_gpu_mem_fraction,
        "enable_kv_cache_reuse": s.enable_prefix_caching,
        "enable_chunked_context": s.enable_chunked_prefill,
        "batch_scheduler_policy": s.scheduler_policy,
        "cuda_graph_mode": cg.enabled,
        # graphs kept: one per decode batch size the spec asks for (specs.cuda_graphs)
        "cuda_graph_cache_size": tensorrt_cache_size(cell),
        "exclude_input_in_output": s.exclude_input_in_output,
        "normalize_log_probs": True,
    }
    if s.max_tokens_in_paged_kv_cache is not None:
        p["max_tokens_in_paged_kv_cache"] = s.max_tokens_in_paged_kv_cache
    if reference:
        p.update(
            {
                "toolchain_reference": REFERENCE_NOTE,
                "hf_model_dir": reference_model_path,
                "tokens_per_block": engine.tokens_per_block,
            }
        )
    return p


def _postprocessing_config(pb: Any, s: Serving, tmbs: int, logits: str) -> Any:
    """The postprocessing model: detokenizes the output with the repository's tokenizer."""
    post = pb.ModelConfig(name="postprocessing", backend="python", max_batch_size=tmbs)
    post.input.extend(_io(pb, T.POST_INPUTS, logits))
    post.output.extend(_io(pb, T.POST_OUTPUTS, logits, output=True))
    post.dynamic_batching.SetInParent()
    post.instance_group.append(_cpu_group(pb, s.instances.postprocessing))
    _params(post, {"tokenizer_dir": TOKENIZER_REL, "skip_special_tokens": True})
    return post


def _ensemble_config(pb: Any, tmbs: int, logits: str) -> Any:
    """The ensemble: preprocessing, tensorrt_llm and postprocessing wired in a row."""
    ens = pb.ModelConfig(name="ensemble", platform="ensemble", max_batch_size=tmbs)
    ens.input.extend(_io(pb, T.ENSEMBLE_INPUTS, logits))
    ens.output.extend(_io(pb, T.ENSEMBLE_OUTPUTS, logits, output=True))
    for model, mi, mo in (
        ("preprocessing", T.PRE_MAP_IN, T.PRE_MAP_OUT),
        ("tensorrt_llm", T.LLM_MAP_IN, T.LLM_MAP_OUT),
        ("postprocessing", T.POST_MAP_IN, T.POST_MAP_OUT),
    ):
        step = ens.ensemble_scheduling.step.add(model_name=model, model_version=-1)
        for k, v in mi.items():
            step.input_map[k] = v
        for k, v in mo.items():
            step.output_map[k] = v
    return ens


def _bls_config(pb: Any, s: Serving, tmbs: int, logits: str) -> Any:
    """The tensorrt_llm_bls model: the Python alternative to the ensemble."""
    bls = pb.ModelConfig(name="tensorrt_llm_bls", backend="python", max_batch_size=tmbs)
    bls.model_transaction_policy.decoupled = s.decoupled
    bls.input.extend(_io(pb, T.BLS_INPUTS, logits))
    bls.output.extend(_io(pb, T.BLS_OUTPUTS, logits, output=True))
    bls.instance_group.append(_cpu_group(pb, s.instances.bls))
    _params(
        bls,
        {"accumulate_tokens": False, "tensorrt_llm_model_name": "tensorrt_llm", "tensorrt_llm_draft_model_name": ""},
    )
    return bls


def to_pbtxt(cfg: Any) -> str:
    from google.protobuf import text_format

    return str(text_format.MessageToString(cfg))


def copy_tokenizer(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)


def engine_target(engines_root: str, identity: dict[str, Any], engine: EngineInfo) -> str:
    """Where the engine must be mounted for a repository emitted with ``engines_root``."""
    name = identity.get("engine_key") or Path(engine.engine_dir or "engine").name
    return f"{engines_root.rstrip('/')}/{name}"


def emit_repository(
    cell: Cell,
    engine: EngineInfo,
    tokenizer_dir: Path,
    out: Path,
    *,
    identity: dict[str, Any],
    reference: bool,
    reference_model_dir: Path | None = None,
    force: bool = False,
    engines_root: str | None = None,
    draft_dir: Path | None = None,
) -> Path:
    """Write a relocatable repository to a temp dir beside ``out`` and rename it into place.

    ``engines_root``: None copies the engine into the repository (``tensorrt_llm/1/engine``, hard links
    where possible) and writes the absolute path it has at ``out``; an absolute directory such as
    ``/engines`` writes ``<engines_root>/<engine key>`` instead and copies nothing: the image or the pod
    must provide the engine there (``toolchain-repo.json`` lists the mounts).
    """
    out = Path(out).resolve()
    _check_emit_inputs(cell, engine, tokenizer_dir, engines_root)
    local_reference = reference and engines_root is None
    # with an engines root too: the checkpoint's mount needs a source
    if reference and (reference_model_dir is None or not (reference_model_dir / "config.json").is_file()):
        raise TritonRepoError(
            "the CPU reference model needs a local Hugging Face checkpoint", "point model.source at a local directory"
        )
    out = check_output(out, force=force)
    gpt_path, reference_path, mounts = _engine_paths(
        out, engine, identity, reference, reference_model_dir, engines_root
    )
    configs = build_configs(
        cell, engine, reference=reference, gpt_model_path=gpt_path, reference_model_path=reference_path
    )
    # speculative decoding / LoRA parameters, and draft-target's tensorrt_llm_draft (triton.speculative)
    draft_path = SP.draft_model_path(cell, draft_dir, reference=reference, out=out, engines_root=engines_root)
    SP.apply_features(configs, cell, draft_model_path=draft_path)
    sources = model_sources()
    with owned_output(out, command="triton emit", force=force) as tmp:
        _write_models(tmp, configs, sources, tokenizer_dir)
        _stage_engine(tmp, sources, engine, reference, reference_model_dir if local_reference else None, engines_root)
        (tmp / "ensemble" / "1" / ".keep").write_text("")
        if draft_dir is not None and draft_path is not None:
            SP.stage_draft(tmp, draft_dir, reference=reference, sources=sources)
        meta = _repo_meta(cell, engine, identity, reference, gpt_path, engines_root, mounts)
        (tmp / "toolchain-repo.json").write_text(json.dumps(meta, indent=2))
    return out


def _check_emit_inputs(cell: Cell, engine: EngineInfo, tokenizer_dir: Path, engines_root: str | None) -> None:
    """Refuse a relative engines root, a directory with no tokenizer and serving options the engine cannot do."""
    if engines_root is not None and not engines_root.startswith("/"):
        raise TritonRepoError(
            f"engines root {engines_root!r} is not an absolute path",
            "give the directory the engines are mounted at where the server runs, e.g. --engines-root /engines",
        )
    if not (tokenizer_dir / "tokenizer_config.json").is_file() and not (tokenizer_dir / "tokenizer.json").is_file():
        raise TritonRepoError(
            f"no tokenizer in {tokenizer_dir}",
            "the checkpoint directory must hold tokenizer.json/tokenizer_config.json",
        )
    if cell.spec.serving.streaming and not cell.spec.serving.decoupled:
        raise TritonRepoError("streaming needs decoupled mode", "set serving.decoupled: true")
    wants = cell.spec.serving.enable_prefix_caching or cell.spec.serving.enable_chunked_prefill
    if wants and not engine.paged_context_fmha:
        raise TritonRepoError(
            f"the engine ({engine.source}) was built without paged context FMHA, so KV-cache reuse and chunked "
            "context cannot work",
            "rebuild with `trtllm-build --use_paged_context_fmha enable` "
            "or disable serving.enable_prefix_caching/enable_chunked_prefill",
        )


def _engine_paths(
    out: Path,
    engine: EngineInfo,
    identity: dict[str, Any],
    reference: bool,
    reference_model_dir: Path | None,
    engines_root: str | None,
) -> tuple[str, str, list[dict[str, str]]]:
    """The configs' engine path and reference model path, and the mounts the server must provide."""
    mounts: list[dict[str, str]] = []
    reference_path = REFERENCE_MODEL_REL
    if reference:
        gpt_path = ""
        if engines_root is not None:
            reference_path = engine_target(engines_root, identity, engine)
            mounts.append({"source": str(reference_model_dir), "target": reference_path, "what": "checkpoint"})
    elif engines_root is not None:
        gpt_path = engine_target(engines_root, identity, engine)
        mounts.append({"source": str(engine.engine_dir), "target": gpt_path, "what": "engine"})
    else:
        gpt_path = str(out / ENGINE_REL)
    return gpt_path, reference_path, mounts


def _write_models(tmp: Path, configs: dict[str, Any], sources: Path, tokenizer_dir: Path) -> None:
    """Every model's config.pbtxt and version directory, the Python models' sources and the tokenizer."""
    for name, cfg in configs.items():
        d = tmp / name
        (d / "1").mkdir(parents=True)
        (d / "config.pbtxt").write_text(to_pbtxt(cfg))
    for name in ("preprocessing", "postprocessing", "tensorrt_llm_bls"):
        shutil.copyfile(sources / name / "1" / "model.py", tmp / name / "1" / "model.py")
    copy_tokenizer(tokenizer_dir, tmp / TOKENIZER_HOME)


def _stage_engine(
    tmp: Path,
    sources: Path,
    engine: EngineInfo,
    reference: bool,
    local_reference_dir: Path | None,
    engines_root: str | None,
) -> None:
    """What the tensorrt_llm model runs: the CPU reference model (with its local checkpoint, if copied in),
    or the engine copied into the repository (nothing with ``engines_root``)."""
    if reference:
        shutil.copyfile(
            sources / "tensorrt_llm_cpu_reference" / "1" / "model.py", tmp / "tensorrt_llm" / "1" / "model.py"
        )
        if local_reference_dir is not None:
            copy_tree(local_reference_dir, tmp / "tensorrt_llm" / REFERENCE_MODEL_REL)
    elif engines_root is None:
        assert engine.engine_dir is not None
        copy_tree(Path(engine.engine_dir), tmp / ENGINE_REL)


def _repo_meta(
    cell: Cell,
    engine: EngineInfo,
    identity: dict[str, Any],
    reference: bool,
    gpt_path: str,
    engines_root: str | None,
    mounts: list[dict[str, str]],
) -> dict[str, Any]:
    """toolchain-repo.json: where the repository came from, the engine it serves and what must be mounted."""
    return {
        **identity,
        "features_build_config": SP.predicted_build_config(cell),
        "reference": reference,
        "reference_note": REFERENCE_NOTE if reference else None,
        "slo": slo_targets(cell.spec),  # `bench --repo` measures against them without the spec
        "kv_cache": cell.spec.quantization.kv_cache,
        "engine": {
            **asdict(engine),
            "engine_dir": gpt_path or None,
            "source": f"{gpt_path}/config.json" if gpt_path else engine.source,
        },
        "engines_root": engines_root,
        "mounts": [{k: v for k, v in m.items() if k != "source"} for m in mounts],  # no host path inside
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
