"""A tiny random-weight Llama with a locally trained BPE tokenizer: no download, deterministic.

Hidden and intermediate sizes are multiples of 128 so every format ModelOpt exports (AWQ uses
128-wide groups along the input dimension) works; 4 attention heads over 2 KV heads is GQA.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from toolchain._deps import require
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


def make_tiny_checkpoint(
    out: Path, *, seed: int = 0, force: bool = False, sizes: dict[str, int] | None = None, dtype: str = "float32"
) -> Path:
    """Write the tiny checkpoint (or a random Llama of other ``sizes``) to ``out`` atomically; returns ``out``.

    The tokenizer always has ``TINY["vocab_size"]`` entries; a larger model vocabulary only adds rows.
    """
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
    cfg = transformers.LlamaConfig(
        **dims,
        tie_word_embeddings=False,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).eval()
    # Random init gives near-uniform logits; widen the output head so greedy decoding is decisive
    # (tests compare greedy text across runtimes) and accuracy numbers mean something.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
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
