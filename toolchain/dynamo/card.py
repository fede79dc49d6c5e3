"""The model directory the Dynamo frontend and the Dynamo mocker read: tokenizer files and config.json.

The mocker loads no weights; the frontend tokenizes with the tokenizer and renders the chat template, and the
mocker reads the model's shape from config.json. The toolchain writes a stand-in card: the spec model's shape
(layers, heads, KV heads, head dim: what sizes its KV cache) with a small byte-level BPE tokenizer trained
here, so no checkpoint or Hub access is needed. The mocker answers with random token ids below 4096 (measured:
with a 311-entry vocabulary every streamed delta was empty), so the vocabulary has 4096 entries.
"""

from __future__ import annotations

import json
from pathlib import Path

from toolchain._deps import require
from toolchain.specs.arch import ModelArch

VOCAB = 4096
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
# Llama-3-like, one line per message; the frontend renders it with minijinja.
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant: {% endif %}"
)


def _corpus() -> list[str]:
    """Text to train the stand-in tokenizer on: the toolchain's own sources (present in every install)."""
    root = Path(__file__).resolve().parents[1]
    return [p.read_text(errors="replace") for p in sorted(root.rglob("*.py"))]


def write_card(out: Path, arch: ModelArch, name: str) -> Path:
    """Write the stand-in model card of ``arch`` to ``out`` (kept when it is already there); returns ``out``."""
    if (out / "config.json").is_file() and (out / "tokenizer.json").is_file():
        return out
    tokenizers = require("tokenizers", "quantize")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "unk_token": "<unk>",
                "model_max_length": 1 << 20,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=1,
        )
    )
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"]}))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "_name_or_path": f"stand-in for {name} ({arch.name})",
        "num_hidden_layers": arch.num_layers,
        "hidden_size": arch.hidden_size,
        "intermediate_size": arch.intermediate_size,
        "num_attention_heads": arch.num_heads,
        "num_key_value_heads": arch.num_kv_heads,
        "head_dim": arch.head_dim,
        "vocab_size": tok.get_vocab_size(),
        "max_position_embeddings": 1 << 17,
        "torch_dtype": "bfloat16",
        "bos_token_id": ids["<s>"],
        "eos_token_id": ids["</s>"],
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return out
