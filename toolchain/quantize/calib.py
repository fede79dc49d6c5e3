"""Calibration data: a built-in text set, a local .txt/.jsonl file, or a Hugging Face dataset.

The exact token ids used are hashed (``calibration_digest``) into the quantize manifest.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.errors import UserInputError

# Written for this project: plain varied English, enough to calibrate activation ranges on a tiny model.
BUILTIN_TEXT = [
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch.",
    "Large language models generate text one token at a time, reading their own output as input.",
    "A GPU spends most of each decode step waiting for weights to arrive from memory.",
    "Calibration text should look like the traffic the model will serve in production.",
    "The train left the station at seven, and by nine it had crossed the river twice.",
    "Prefix caching lets many requests that share a system prompt skip the same prefill work.",
    "She wrote the report in the morning, checked the numbers at noon, and sent it at five.",
    "Quantization trades a little accuracy for a large cut in memory traffic and cost.",
    "In spring the orchard fills with blossoms, and the bees work from dawn until dusk.",
    "The engineer measured time to first token and time per output token under load.",
    "Paged attention stores the key and value cache in fixed-size blocks, like virtual memory.",
    "He asked for a table with two columns: the request rate and the tail latency at that rate.",
    "Mountains to the north keep the valley warm, so grapes ripen early most years.",
    "A batch scheduler admits new requests whenever a running one finishes its last token.",
    "The library opens at eight on weekdays and at ten on Saturdays; it is closed on Sundays.",
    "Tensor parallelism splits each weight matrix across several GPUs joined by a fast link.",
    "When the queue grows faster than it drains, latency climbs until something gives way.",
    "Please summarize the meeting notes and list the three decisions that were made.",
    "The recipe calls for two cups of flour, one egg, a pinch of salt, and warm milk.",
    "Streaming responses let the user read the first words while the rest are still computed.",
    "Every engine is tied to the GPU model, the precision, the batch size and the sequence length.",
    "A content-addressed store names each object by the digest of its bytes, so copies agree.",
    "The river rose after three days of rain and covered the low road by the mill.",
    "Monitoring shows the cache is eighty percent full during the evening peak.",
    "Write a short poem about the sea at night, with the lighthouse as the only light.",
    "The committee will review the proposal next week and publish its answer in the spring.",
    "Speculative decoding drafts several tokens cheaply and verifies them in one pass.",
    "Our service answered one million requests yesterday with a median latency of two hundred ms.",
    "Translate the following sentence into French: the weather is lovely today.",
    "A careful benchmark separates warm-up from measurement and reports percentiles, not only means.",
    "The cat slept on the warm windowsill while snow fell quietly over the garden.",
    "Chunked prefill breaks a long prompt into pieces so decode steps are not stalled behind it.",
]

HELD_OUT_TEXT = [
    "The old bridge carried carts to market every morning for more than a hundred years.",
    "Throughput rises with batch size until the memory bandwidth or the cache runs out.",
    "Answer briefly: which planet is closest to the sun, and how long is its year?",
    "The orchestra tuned their instruments while the audience found their seats.",
]


@dataclass(frozen=True)
class CalibBatch:
    input_ids: Any  # torch.LongTensor [batch, seq]
    attention_mask: Any


def load_texts(dataset: str, base_dir: Path, seed: int, samples: int) -> list[str]:
    if dataset == "builtin":
        texts = list(BUILTIN_TEXT)
    elif dataset.startswith("hf:"):
        try:
            import datasets
        except ImportError as exc:
            raise UserInputError(
                f"calibration dataset '{dataset}' needs the 'datasets' package",
                "pip install datasets, or use dataset: builtin or a local .txt/.jsonl file",
            ) from exc
        name = dataset[3:]
        try:
            ds = datasets.load_dataset(name, split="train", streaming=True)
        except Exception as e:
            raise UserInputError(
                f"cannot load dataset {name}: {type(e).__name__}",
                "check the dataset name and network, or use a local file",
            ) from e
        texts = []
        for row in ds:
            t = row.get("text") or row.get("article") or row.get("content")
            if t:
                texts.append(str(t))
            if len(texts) >= samples * 4:
                break
    else:
        path = Path(dataset)
        path = path if path.is_absolute() else base_dir / path
        if not path.is_file():
            raise UserInputError(
                f"calibration file {path} does not exist",
                'give a .txt (one sample per line) or .jsonl ({"text": ...}) file',
            )
        try:
            content = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UserInputError(
                f"calibration file {path} is not UTF-8 text", "give a .txt or .jsonl text file"
            ) from exc
        except OSError as e:
            raise UserInputError(f"cannot read calibration file {path}: {e.strerror or e}") from e
        if "\x00" in content:
            raise UserInputError(f"calibration file {path} holds NUL bytes (binary data)", "give a text file")
        if path.suffix == ".jsonl":
            texts = []
            for n, line in enumerate(content.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except (ValueError, RecursionError) as exc:
                    raise UserInputError(f"{path}:{n}: not JSON", 'each line must be {"text": "..."}') from exc
                if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                    raise UserInputError(f"{path}:{n}: no string 'text' field", 'each line must be {"text": ...}')
                texts.append(obj["text"])
        elif path.suffix == ".txt":
            texts = [ln for ln in content.splitlines() if ln.strip()]
        else:
            raise UserInputError(f"calibration file {path} is neither .txt nor .jsonl", "convert it to one of those")
    if not texts:
        raise UserInputError(f"calibration dataset '{dataset}' has no text", "give a file with at least one line")
    rng = random.Random(seed)
    picked = [texts[i % len(texts)] for i in range(samples)]
    rng.shuffle(picked)
    return picked


def tokenize(tokenizer: Any, texts: list[str], seq_len: int, batch_size: int) -> tuple[list[CalibBatch], str]:
    """Tokenize into fixed batches; return them and the sha256 of the exact token ids."""
    h = hashlib.sha256()
    batches = []
    for i in range(0, len(texts), batch_size):
        enc = tokenizer(
            texts[i : i + batch_size], return_tensors="pt", padding="max_length", truncation=True, max_length=seq_len
        )
        h.update(enc["input_ids"].numpy().astype("<i8").tobytes())
        h.update(enc["attention_mask"].numpy().astype("<i8").tobytes())
        batches.append(CalibBatch(enc["input_ids"], enc["attention_mask"]))
    return batches, f"sha256:{h.hexdigest()}"
