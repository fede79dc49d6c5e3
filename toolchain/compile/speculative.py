"""Build steps for speculative decoding and LoRA (docs/speculative-and-lora.md §1-§2, §5).

- ``trtllm-build`` flags: ``--speculative_decoding_mode``/``--max_draft_len`` for the target engine,
  ``--lora_plugin``/``--lora_target_modules``/``--max_lora_rank`` for LoRA.
- Conversion: Medusa and EAGLE heads are converted together with the base model by their own
  ``examples/{medusa,eagle}/convert_checkpoint.py``; draft-target converts (or quantizes) each model on its
  own, and the draft is built as an engine of its own (``toolchain.specs.speculative_spec.draft_cell``).
- What the engine's ``build_config`` records after TensorRT-LLM's adjustments: ``max_seq_len`` grows by
  ``max_draft_len`` (EAGLE: also by its layer count), ``max_num_tokens`` is at least
  ``max_batch_size × (max_draft_len + 1)``.
- LLM-API options for the PyTorch runtime (``speculative_config``, ``lora_config``): ``toolchain.specs.llmapi``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from toolchain.errors import CheckpointError, CompatibilityError
from toolchain.specs.matrix import Cell
from toolchain.specs.speculative_spec import engine_max_seq_len

HEAD_CONVERTERS = {
    "medusa": ("examples/medusa/convert_checkpoint.py", "--medusa_model_dir", "--num_medusa_heads"),
    "eagle": ("examples/eagle/convert_checkpoint.py", "--eagle_model_dir", "--num_eagle_layers"),
}
# architecture a converted checkpoint records (tensorrt_llm/models MODEL_MAP names)
HEAD_ARCHITECTURES = {"medusa": "MedusaForCausalLM", "eagle": "EagleForCausalLM"}


def feature_args(cell: Cell) -> list[str]:
    """Flags appended to the cell's ``trtllm-build`` command for speculative decoding and LoRA."""
    spec = cell.spec
    args: list[str] = []
    sd = spec.speculative
    if sd is not None:
        args += ["--speculative_decoding_mode", sd.build_mode, "--max_draft_len", str(sd.draft_len)]
    lo = spec.lora
    if lo is not None:
        # "auto" = the model dtype (plugin.py); the module list wins over what an adapter dir declares
        args += ["--lora_plugin", "auto", "--lora_target_modules", *lo.target_modules]
        args += ["--max_lora_rank", str(lo.max_rank)]
    return args


def adjusted_shape(cell: Cell, max_num_tokens: int) -> tuple[int, int]:
    """(max_seq_len, max_num_tokens) as TensorRT-LLM records them for this cell's speculative mode."""
    sd = cell.spec.speculative
    if sd is None:
        return cell.max_seq_len, max_num_tokens
    return engine_max_seq_len(cell), max(max_num_tokens, cell.max_batch_size * (sd.draft_len + 1))


def expected_feature_config(cell: Cell) -> dict[str, Any]:
    """``build_config`` fields the features set (merged into the drift check)."""
    out: dict[str, Any] = {}
    sd = cell.spec.speculative
    if sd is not None:
        out["max_draft_len"] = sd.draft_len
    lo = cell.spec.lora
    if lo is not None:
        out["lora_config"] = {"max_lora_rank": lo.max_rank, "lora_target_modules": list(lo.target_modules)}
    return out


def heads_convert_args(cell: Cell, hf_dir: Path, heads_dir: Path, out_dir: Path, trtllm_root: Path) -> list[str]:
    """The Medusa/EAGLE converter: base model and heads into one TensorRT-LLM checkpoint."""
    sd = cell.spec.speculative
    if sd is None or sd.heads is None or sd.mode not in HEAD_CONVERTERS:
        raise ValueError("heads_convert_args needs a medusa or eagle spec")
    if cell.pp > 1:
        raise CompatibilityError(
            f"the {sd.mode} converter splits by tensor parallelism only (its examples show --tp_size)",
            "set parallelism.pp: 1",
        )
    script, heads_flag, count_flag = HEAD_CONVERTERS[sd.mode]
    cmd = [
        sys.executable,
        str(trtllm_root / script),
        "--model_dir",
        str(hf_dir),
        heads_flag,
        str(heads_dir),
        "--output_dir",
        str(out_dir),
        "--dtype",
        cell.spec.model.dtype,
        count_flag,
        str(sd.heads.count),
    ]
    if sd.mode == "eagle":
        cmd += ["--max_draft_len", str(sd.draft_len)]
    return [*cmd, "--tp_size", str(cell.tp), "--workers", str(cell.world_size)]


def heads_architecture(cell: Cell) -> str | None:
    """The architecture a Medusa/EAGLE converted checkpoint records (None for other specs)."""
    sd = cell.spec.speculative
    return HEAD_ARCHITECTURES.get(sd.mode) if sd is not None else None


def heads_dir(cell: Cell) -> Path | None:
    """The local Medusa/EAGLE heads checkpoint of a heads spec (None for other specs)."""
    sd = cell.spec.speculative
    if sd is None or sd.heads is None or sd.mode not in HEAD_CONVERTERS:
        return None
    if sd.heads.source.startswith("hf://"):
        from toolchain.artifacts.source import source_dir
        from toolchain.specs.models import ModelSource

        return source_dir(cell.spec.model_copy(update={"model": ModelSource(source=sd.heads.source)}))
    p = Path(sd.heads.source).expanduser()
    p = p if p.is_absolute() else (cell.spec.base_dir / p).resolve()
    if not p.is_dir():
        raise CheckpointError(f"{sd.mode} heads checkpoint {p} is not a directory", "fix speculative.heads.source")
    return p
