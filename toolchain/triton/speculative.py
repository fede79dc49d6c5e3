"""Triton repository pieces for speculative decoding and LoRA (docs/speculative-and-lora.md §3-§4).

- LoRA: the ``lora_cache_*`` parameters of ``tensorrt_llm`` (the ``lora_task_id``/``lora_weights``/
  ``lora_config`` inputs are part of every repository).
- Medusa / EAGLE / lookahead: ``decoding_mode`` of ``tensorrt_llm``; lookahead also its ``(W, N, G)``.
- Draft-target: a second LLM model ``tensorrt_llm_draft`` (a copy of ``tensorrt_llm`` on the draft
  engine), both with KV-cache reuse and input excluded from the output, not decoupled, and the BLS model's
  ``tensorrt_llm_draft_model_name`` naming it; clients call ``tensorrt_llm_bls`` with ``num_draft_tokens``.

``apply_features`` edits the ``ModelConfig`` messages an emitter built; ``lint_features`` checks a written
repository's parameters against the engine's ``build_config`` (the target's and the draft's).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from toolchain.errors import TritonRepoError
from toolchain.specs.matrix import Cell
from toolchain.specs.speculative import lookahead_draft_len

DRAFT_MODEL = "tensorrt_llm_draft"
DECODING_MODE = {"medusa": "medusa", "eagle": "eagle", "lookahead": "lookahead"}
# SpeculativeDecodingMode (IntFlag, auto()) as the engine's build_config may record it: value or name
ENGINE_MODES = {
    1: "NONE",
    2: "DRAFT_TOKENS_EXTERNAL",
    4: "MEDUSA",
    8: "LOOKAHEAD_DECODING",
    16: "EXPLICIT_DRAFT_TOKENS",
    32: "EAGLE",
}
MODE_OF_DECODING = {"medusa": "MEDUSA", "eagle": "EAGLE", "lookahead": "LOOKAHEAD_DECODING"}


def feature_parameters(cell: Cell) -> dict[str, Any]:
    """``tensorrt_llm`` parameters the spec's speculative mode and LoRA need."""
    spec = cell.spec
    out: dict[str, Any] = {}
    lo = spec.lora
    if lo is not None:
        c = lo.cache
        out |= {
            "lora_cache_optimal_adapter_size": c.optimal_adapter_size,
            "lora_cache_max_adapter_size": c.max_adapter_size,
            "lora_cache_gpu_memory_fraction": c.gpu_memory_fraction,
            "lora_cache_host_memory_bytes": c.host_memory_bytes,
        }
    sd = spec.speculative
    if sd is not None:
        if sd.mode in DECODING_MODE:
            out["decoding_mode"] = DECODING_MODE[sd.mode]
        if sd.mode == "lookahead":
            la = sd.lookahead_config
            out |= {
                "lookahead_window_size": la.window_size,
                "lookahead_ngram_size": la.ngram_size,
                "lookahead_verification_set_size": la.verification_set_size,
            }
        if sd.mode == "draft_target":
            out |= {"enable_kv_cache_reuse": True, "exclude_input_in_output": True}
    return out


def _set(cfg: Any, values: dict[str, Any]) -> None:
    for k, v in values.items():
        cfg.parameters[k].string_value = ("true" if v else "false") if isinstance(v, bool) else str(v)


def apply_features(configs: dict[str, Any], cell: Cell, *, draft_model_path: str | None = None) -> dict[str, Any]:
    """Add the features to the emitted ``ModelConfig`` messages (by model name); returns the same dict,
    with ``tensorrt_llm_draft`` added for draft-target. ``draft_model_path`` is what the draft model's
    ``gpt_model_path`` (or the reference model's checkpoint) must say."""
    llm = configs["tensorrt_llm"]
    _set(llm, feature_parameters(cell))
    sd = cell.spec.speculative
    if sd is None or sd.mode != "draft_target":
        return configs
    _check_draft_target_serving(cell)
    llm.model_transaction_policy.decoupled = False
    draft = type(llm)()
    draft.CopyFrom(llm)
    draft.name = DRAFT_MODEL
    for key in ("decoding_mode",):
        if key in draft.parameters:
            del draft.parameters[key]
    if draft_model_path is not None:
        key = "hf_model_dir" if "hf_model_dir" in draft.parameters else "gpt_model_path"
        draft.parameters[key].string_value = draft_model_path
    configs[DRAFT_MODEL] = draft
    bls = configs["tensorrt_llm_bls"]
    bls.model_transaction_policy.decoupled = False
    _set(bls, {"tensorrt_llm_draft_model_name": DRAFT_MODEL})
    return configs


def _check_draft_target_serving(cell: Cell) -> None:
    """The values draft-target writes are the spec's own (specs.speculative refuses the others); a spec that
    skipped validation is refused here rather than emitted with values it did not ask for."""
    s = cell.spec.serving
    wrong = [
        name
        for name, ok in (
            ("enable_prefix_caching: true", s.enable_prefix_caching),
            ("exclude_input_in_output: true", s.exclude_input_in_output),
            ("decoupled: false", not s.decoupled),
            ("streaming: false", not s.streaming),
        )
        if not ok
    ]
    if wrong:
        raise TritonRepoError(
            f"cell {cell.id} is draft-target, which needs serving {', '.join(wrong)}",
            "set them in the spec (`toolchain spec validate` explains why)",
        )


def _param(cfg: Any, key: str) -> str | None:
    return cfg.parameters[key].string_value if key in cfg.parameters else None


def _engine_mode(build_config: dict[str, Any]) -> str:
    v = build_config.get("speculative_decoding_mode")
    if isinstance(v, int):
        return ENGINE_MODES.get(v, str(v))
    if isinstance(v, str):
        return v.upper().removeprefix("SPECULATIVEDECODINGMODE.")
    return "NONE"


def lint_features(
    configs: dict[str, Any], build_config: dict[str, Any], draft_build_config: dict[str, Any] | None = None
) -> list[str]:
    """Problems between a repository's speculative/LoRA settings and the engine(s) it serves."""
    out: list[str] = []
    llm = configs.get("tensorrt_llm")
    if llm is None:
        return ["no tensorrt_llm model"]
    mode = _engine_mode(build_config)
    draft_len = int(build_config.get("max_draft_len") or 0)
    decoding = _param(llm, "decoding_mode") or ""
    if decoding in MODE_OF_DECODING and mode != MODE_OF_DECODING[decoding]:
        out.append(f"tensorrt_llm decoding_mode {decoding} needs an engine built for it; the engine's mode is {mode}")
    if mode in ("MEDUSA", "EAGLE", "LOOKAHEAD_DECODING") and decoding not in MODE_OF_DECODING:
        out.append(f"the engine is built for {mode}; tensorrt_llm decoding_mode must be {mode.split('_')[0].lower()}")
    if decoding == "lookahead":
        try:
            w, n, g = (
                int(_param(llm, k) or "")
                for k in ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")
            )
        except ValueError:
            out.append("decoding_mode lookahead needs lookahead_window_size, _ngram_size and _verification_set_size")
        else:
            if lookahead_draft_len(w, n, g) != draft_len:
                out.append(
                    f"lookahead ({w}, {n}, {g}) needs an engine with max_draft_len {lookahead_draft_len(w, n, g)}; "
                    f"the engine has {draft_len}"
                )
    lora_params = [k for k in llm.parameters if k.startswith("lora_cache_")]
    has_lora = bool(build_config.get("lora_config")) and (build_config.get("plugin_config") or {}).get(
        "lora_plugin"
    ) not in (None, False, "disable")
    if lora_params and not has_lora:
        out.append("tensorrt_llm sets lora_cache_* but the engine was built without the LoRA plugin")
    draft = configs.get(DRAFT_MODEL)
    bls = configs.get("tensorrt_llm_bls")
    if draft is not None:
        if mode != "DRAFT_TOKENS_EXTERNAL" or draft_len < 1:
            out.append(f"{DRAFT_MODEL} is present but the target engine is not built for draft_tokens_external")
        if bls is None or _param(bls, "tensorrt_llm_draft_model_name") != DRAFT_MODEL:
            out.append(f"tensorrt_llm_bls must name {DRAFT_MODEL} in tensorrt_llm_draft_model_name")
        for cfg in (llm, draft):
            if _param(cfg, "enable_kv_cache_reuse") != "true":
                out.append(f"{cfg.name}: draft-target needs enable_kv_cache_reuse true")
            if cfg.model_transaction_policy.decoupled:
                out.append(f"{cfg.name}: draft-target models are not decoupled (the BLS calls them per step)")
        if draft_build_config is not None:
            if _engine_mode(draft_build_config) != "NONE":
                out.append("the draft engine is itself built for speculative decoding")
            if int(draft_build_config.get("max_batch_size", 0)) < int(build_config.get("max_batch_size", 0)):
                out.append("the draft engine's max_batch_size is below the target's")
    elif mode == "DRAFT_TOKENS_EXTERNAL":
        out.append(f"the engine expects external draft tokens; the repository has no {DRAFT_MODEL} model")
    return out


def predicted_build_config(cell: Cell) -> dict[str, Any]:
    """The speculative/LoRA part of the ``build_config`` the cell's engine records (the CPU reference model
    has no engine: its repository is linted against this)."""
    sd, lo = cell.spec.speculative, cell.spec.lora
    mode = {"draft_target": 2, "medusa": 4, "lookahead": 8, "eagle": 32}[sd.mode] if sd else 1
    out: dict[str, Any] = {
        "max_batch_size": cell.max_batch_size,
        "speculative_decoding_mode": mode,
        "max_draft_len": sd.draft_len if sd else 0,
    }
    if lo is not None:
        out["lora_config"] = {"max_lora_rank": lo.max_rank, "lora_target_modules": list(lo.target_modules)}
        out["plugin_config"] = {"lora_plugin": cell.spec.model.dtype}
    return out


DRAFT_ENGINE_REL = f"{DRAFT_MODEL}/1/engine"
DRAFT_REFERENCE_REL = "1/hf_model"  # the CPU reference model's checkpoint, from the draft model's directory


def draft_model_path(
    cell: Cell, draft_dir: Path | None, *, reference: bool, out: Path, engines_root: str | None
) -> str | None:
    """What the draft model's config must name (None when the cell is not draft-target)."""
    sd = cell.spec.speculative
    if sd is None or sd.mode != "draft_target":
        return None
    if draft_dir is None:
        raise TritonRepoError(
            f"cell {cell.id} is draft-target: its repository needs the draft engine too",
            "build it (`toolchain build SPEC --cell ID` builds both) and emit from the registry",
        )
    if engines_root is not None:
        raise TritonRepoError(
            "a draft-target repository carries its draft engine; --engines-root is not supported for it yet",
            "emit without --engines-root",
        )
    return DRAFT_REFERENCE_REL if reference else str(out / DRAFT_ENGINE_REL)


def stage_draft(tmp: Path, draft_dir: Path, *, reference: bool, sources: Path) -> None:
    """Copy the draft engine (or, for the CPU reference model, the draft checkpoint and model source)."""
    from toolchain.digest import copy_tree

    if reference:
        shutil.copyfile(sources / "tensorrt_llm_cpu_reference" / "1" / "model.py", tmp / DRAFT_MODEL / "1" / "model.py")
        copy_tree(draft_dir, tmp / DRAFT_MODEL / DRAFT_REFERENCE_REL)
    else:
        copy_tree(draft_dir, tmp / DRAFT_ENGINE_REL)


def lint_repository_features(configs: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """``lint_features`` against the engines' build_config (config.json beside the engine) or, without an
    engine (CPU reference), the build_config the spec predicts (recorded in toolchain-repo.json)."""
    import json

    def engine_config(cfg: Any) -> dict[str, Any] | None:
        path = _param(cfg, "gpt_model_path") or ""
        f = Path(path, "config.json")
        if path and f.is_file():
            bc = json.loads(f.read_text()).get("build_config")
            return bc if isinstance(bc, dict) else None
        return None

    llm = configs.get("tensorrt_llm")
    if llm is None:
        return []
    bc = engine_config(llm) or meta.get("features_build_config")
    if not isinstance(bc, dict):
        return []
    draft = configs.get(DRAFT_MODEL)
    draft_bc = engine_config(draft) if draft is not None else None
    if draft is not None and draft_bc is None and meta.get("reference"):
        draft_bc = {"speculative_decoding_mode": 1, "max_draft_len": 0, "max_batch_size": bc.get("max_batch_size", 0)}
    return lint_features(configs, bc, draft_bc)
