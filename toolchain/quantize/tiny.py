"""A tiny random-weight decoder with a locally trained BPE tokenizer: no download, deterministic.

Llama by default; ``family`` picks another decoder family the toolchain names (``FAMILIES``), built
with that family's own Transformers class, so its parameters are the real ones (biases, q/k norms,
extra norms, shared experts) and the family tests exercise what a real checkpoint of it holds.

Hidden and intermediate sizes are multiples of 128 so every format ModelOpt exports (AWQ uses
128-wide groups along the input dimension) works; 4 attention heads over 2 KV heads is GQA.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from toolchain._deps import require
from toolchain.errors import OutputExistsError
from toolchain.progress import Progress, importing, prefixed, silent
from toolchain.quantize.calib import BUILTIN_TEXT

TINY = {
    "vocab_size": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
}
# About 160M parameters (305 MiB in bf16): large enough that imports do not dominate memory and time
# figures (benchmarks/quantize_bench.py); the same builder, only the sizes differ.
LLAMA_160M = {
    "vocab_size": 32000,
    "hidden_size": 768,
    "intermediate_size": 2304,
    "num_hidden_layers": 16,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
}


_MOE = {"num_experts_per_tok": 2, "moe_intermediate_size": 128}
# model_type -> (Transformers config class, the family's extra config values). Every family is tiny:
# 2 layers, hidden 128, 4 experts of 128 where it is a mixture of experts.
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", {}),
    "mistral": ("MistralConfig", {"sliding_window": None}),
    "mixtral": ("MixtralConfig", {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None}),
    "qwen2": ("Qwen2Config", {"tie_word_embeddings": True}),
    "qwen3": ("Qwen3Config", {"head_dim": 32}),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        {**_MOE, "num_experts": 4, "shared_expert_intermediate_size": 128, "decoder_sparse_step": 1},
    ),
    "qwen3_moe": ("Qwen3MoeConfig", {**_MOE, "num_experts": 4, "head_dim": 32, "decoder_sparse_step": 1}),
    "gemma": ("GemmaConfig", {"head_dim": 32, "tie_word_embeddings": True}),
    "gemma2": ("Gemma2Config", {"head_dim": 32, "query_pre_attn_scalar": 32, "sliding_window": 64}),
    "phi3": ("Phi3Config", {}),
    "granite": ("GraniteConfig", {}),
    "olmo2": ("Olmo2Config", {}),
    "gpt_neox": ("GPTNeoXConfig", {"rotary_pct": 0.25}),
}


def make_tiny_checkpoint(
    out: Path,
    *,
    seed: int = 0,
    force: bool = False,
    sizes: dict[str, int] | None = None,
    dtype: str = "float32",
    family: str = "llama",
    tie: bool | None = None,
) -> Path:
    """Write the tiny checkpoint (or a random Llama of other ``sizes``) to ``out`` atomically; returns ``out``.

    ``family`` is a ``FAMILIES`` model_type; ``tie`` overrides whether the output head shares the input
    embedding (the family's default otherwise: Qwen2 small sizes and Gemma tie it).
    The tokenizer always has ``TINY["vocab_size"]`` entries; a larger model vocabulary only adds rows.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    dims = dict(sizes or TINY)
    out = Path(out)
    if out.exists():
        if not force and (out / "config.json").is_file():
            return out
        shutil.rmtree(out)
    torch = require("torch", "quantize")
    tokenizers = require("tokenizers", "quantize")
    transformers = require("transformers", "quantize")

    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=min(TINY["vocab_size"], dims["vocab_size"]),
        special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(BUILTIN_TEXT * 4, trainer)
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    cls_name, extra = FAMILIES[family]
    kw: dict[str, Any] = {
        "tie_word_embeddings": False,
        "bos_token_id": fast.bos_token_id,
        "eos_token_id": fast.eos_token_id,
        "pad_token_id": fast.pad_token_id,
        **extra,
    }
    if tie is not None:
        kw["tie_word_embeddings"] = tie
    if family == "gpt_neox":  # GPT-NeoX names its sizes differently and has no grouped KV heads
        kw["max_position_embeddings"] = dims.pop("max_position_embeddings")
        dims.pop("num_key_value_heads", None)
    cfg = getattr(transformers, cls_name)(**dims, **kw)
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    # Random init gives near-uniform logits; widen the output head so greedy decoding is decisive
    # (tests compare greedy text across runtimes) and accuracy numbers mean something.
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    model = model.to(getattr(torch, dtype))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        fast.save_pretrained(tmp)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
        raise
    return out


def create_tiny_checkpoint(out: Path, *, force: bool = False, progress: Progress = silent) -> bool:
    """``toolchain tiny-checkpoint --out DIR``: the tiny Llama of ``engine_specs/tiny.yaml`` at ``out``. Returns
    whether it was written; False when ``out`` already holds a checkpoint (config.json) and ``force`` is off.
    ``force`` replaces a checkpoint; a directory holding something else is always refused."""
    out = Path(out)
    present = (out / "config.json").is_file()
    if present and not force:
        return False
    if out.exists() and not present and (not out.is_dir() or any(out.iterdir())):
        # --force replaces a checkpoint, never a directory of something else (`--out . --force` would delete it)
        raise OutputExistsError(
            f"{out} exists and is not a checkpoint (no config.json); it is left as it is",
            "choose another --out (an empty or new directory)",
        )
    progress(f"creating the tiny checkpoint at {out} (random weights, no download)")
    importing(prefixed(progress, "  "), ("torch", "transformers"), "importing torch and transformers")
    make_tiny_checkpoint(out, force=True)
    return True
