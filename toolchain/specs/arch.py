"""The architecture of the model a spec names, from its Hugging Face ``config.json`` (or an offline catalog).

Shared by the compatibility rules (TP must divide the heads) and the planner (memory and speed arithmetic).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from toolchain import settings
from toolchain.errors import ModelConfigError
from toolchain.specs.checkpoint import config_dims, read_config_json, safetensors_param_count
from toolchain.specs.models import EngineSpec


@dataclass(frozen=True)
class ModelArch:
    name: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_embeddings: bool = False
    num_experts: int = 0
    experts_per_token: int = 0
    params_override: float | None = None  # exact count (safetensors headers) or a nominal figure
    params_source: str = "config formula"

    @property
    def embed_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_embeddings else self.vocab_size * self.hidden_size

    @property
    def linear_params(self) -> float:
        """Parameters in the decoder Linear layers: what weight quantization applies to."""
        if self.params_override is not None:
            return self.params_override - self.embed_params - self.lm_head_params - self.norm_params
        attn = self.hidden_size * self.head_dim * (2 * self.num_heads + 2 * self.num_kv_heads)
        if self.num_experts:
            mlp = self.num_experts * 3 * self.hidden_size * self.intermediate_size + self.hidden_size * self.num_experts
        else:
            mlp = 3 * self.hidden_size * self.intermediate_size
        return float(self.num_layers * (attn + mlp))

    @property
    def norm_params(self) -> int:
        return (2 * self.num_layers + 1) * self.hidden_size

    @property
    def params(self) -> float:
        if self.params_override is not None:
            return self.params_override
        return self.linear_params + self.embed_params + self.lm_head_params + self.norm_params

    @property
    def active_params(self) -> float:
        """Parameters touched per token (MoE: only the routed experts)."""
        if not self.num_experts:
            return self.params
        attn = self.hidden_size * self.head_dim * (2 * self.num_heads + 2 * self.num_kv_heads)
        mlp = self.experts_per_token * 3 * self.hidden_size * self.intermediate_size
        return float(self.num_layers * (attn + mlp) + self.embed_params + self.lm_head_params + self.norm_params)


_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
_KNOWN = {
    "architectures",
    "model_type",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
    "num_local_experts",
    "num_experts",
    "num_experts_per_tok",
    "max_position_embeddings",
    "rope_theta",
    "rope_scaling",
    "rms_norm_eps",
    "hidden_act",
    "torch_dtype",
    "dtype",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "attention_bias",
    "attention_dropout",
    "mlp_bias",
    "initializer_range",
    "pretraining_tp",
    "use_cache",
    "transformers_version",
    "sliding_window",
    "quantization_config",
    "_name_or_path",
    "moe_intermediate_size",
    "layer_types",
    "use_sliding_window",
    "max_window_layers",
    "router_aux_loss_coef",
    "output_router_logits",
    "rope_parameters",
}


# Decoder families whose shape the formulas here describe (dense or MoE, GQA/MQA attention).
KNOWN_MODEL_TYPES = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen2_moe",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "phi3",
    "granite",
    "olmo2",
)


def arch_from_config(cfg: dict[str, Any], name: str = "model", where: str = "config.json") -> ModelArch:
    mtype = cfg.get("model_type")
    if mtype is not None and mtype not in KNOWN_MODEL_TYPES:
        raise ModelConfigError(
            f"{where}: model_type {mtype!r} is not an architecture the planner's formulas describe",
            f"known: {', '.join(KNOWN_MODEL_TYPES)}; or set model.architecture to a catalog entry",
        )
    missing = [k for k in _REQUIRED if k not in cfg]
    if missing:
        raise ModelConfigError(f"{where}: missing {', '.join(missing)}; is this a decoder-only LLM config?")

    d = config_dims(cfg, where)
    layers, hidden, heads, vocab = d["layers"], d["hidden"], d["heads"], d["vocab"]
    kv, head_dim, experts, per_token, inter, tie = (
        d["kv_heads"],
        d["head_dim"],
        d["experts"],
        d["experts_per_token"],
        d["intermediate"],
        bool(d["tie"]),
    )
    return ModelArch(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        intermediate_size=inter,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        vocab_size=vocab,
        tie_embeddings=tie,
        num_experts=experts,
        experts_per_token=per_token,
    )


def unknown_fields(cfg: dict[str, Any]) -> list[str]:
    """Config keys the planner does not understand (reported, since they may change the arithmetic)."""
    return sorted(k for k in cfg if k not in _KNOWN and not k.startswith(("num_", "use_", "output_")))


def arch_from_dir(model_dir: Path) -> ModelArch:
    cfg_path = model_dir / "config.json"
    if not cfg_path.is_file():
        raise ModelConfigError(f"{model_dir}: no config.json")
    cfg = read_config_json(cfg_path)
    arch = arch_from_config(cfg, name=model_dir.name, where=str(cfg_path))
    count = safetensors_param_count(model_dir)
    if count:
        arch = replace(arch, params_override=float(count), params_source="safetensors headers")
    return arch


# Offline catalog: the shapes published in each model's config.json on the Hugging Face Hub.
CATALOG: dict[str, ModelArch] = {
    a.name: a
    for a in [
        ModelArch("llama-3.1-8b", 32, 4096, 14336, 32, 8, 128, 128256),
        ModelArch("llama-3-70b", 80, 8192, 28672, 64, 8, 128, 128256),
        ModelArch("llama-3.3-70b", 80, 8192, 28672, 64, 8, 128, 128256),
        ModelArch("mistral-7b-v0.3", 32, 4096, 14336, 32, 8, 128, 32768),
        ModelArch("qwen2.5-7b", 28, 3584, 18944, 28, 4, 128, 152064),
        ModelArch("mixtral-8x7b", 32, 4096, 14336, 32, 8, 128, 32000, num_experts=8, experts_per_token=2),
    ]
}


def arch_from_catalog(name: str) -> ModelArch:
    try:
        return CATALOG[name]
    except KeyError as exc:
        import difflib

        close = difflib.get_close_matches(name, list(CATALOG), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ModelConfigError(
            f"architecture '{name}' is not in the offline catalog{hint}",
            f"use one of {', '.join(CATALOG)} or point model.source at a local checkpoint",
        ) from exc


def arch_for_spec(spec: EngineSpec, *, allow_network: bool = True) -> ModelArch:
    """The architecture of a spec's model: local config.json, the offline catalog, or the Hub."""
    local = spec.local_source()
    if local is not None and (local / "config.json").is_file():
        return arch_from_dir(local)
    if spec.model.architecture:
        return arch_from_catalog(spec.model.architecture)
    if local is not None:
        raise ModelConfigError(
            f"{local}: no config.json, and the spec names no model.architecture",
            "create the checkpoint first (`toolchain quantize` / scripts/make_tiny_checkpoint.py) "
            "or set model.architecture",
        )
    if not allow_network:
        raise ModelConfigError(f"{spec.model.source}: no model.architecture in the spec and network use is off")
    repo, rev = spec.model.hf_repo_revision()
    try:
        from huggingface_hub import constants, hf_hub_download
    except ImportError as exc:
        from toolchain.errors import MissingDependencyError

        raise MissingDependencyError("huggingface_hub", "hf") from exc
    hint = f"set model.architecture to one of {', '.join(CATALOG)} to plan offline"
    path: str | None = None
    miss: Exception | None = None  # why the cache could not answer: the cause of the error below (TOOLCHAIN_DEBUG)
    try:  # a config.json already in the Hub cache needs no network
        path = hf_hub_download(repo, "config.json", revision=rev, local_files_only=True)
    except Exception as e:
        miss = e
    if path is None:
        if settings.hf_offline(constants.HF_HUB_OFFLINE):
            raise ModelConfigError(
                f"cannot fetch config.json of {repo}@{rev or 'main'}: not cached and HF_HUB_OFFLINE is set", hint
            ) from miss
        endpoint = settings.hf_endpoint(constants.ENDPOINT)
        if not _reachable(endpoint, HUB_PROBE_TIMEOUT_S):
            raise ModelConfigError(
                f"cannot fetch config.json of {repo}@{rev or 'main'}: the Hugging Face Hub at {endpoint} "
                f"is not reachable within {HUB_PROBE_TIMEOUT_S:.0f} s",
                hint,
            ) from miss
        try:
            path = hf_hub_download(repo, "config.json", revision=rev, etag_timeout=HUB_PROBE_TIMEOUT_S)
        except Exception as e:
            raise ModelConfigError(
                f"cannot fetch config.json of {repo}@{rev or 'main'} ({type(e).__name__})", hint
            ) from e
    try:
        cfg = json.loads(Path(path).read_bytes())
    except (OSError, ValueError, RecursionError) as e:
        raise ModelConfigError(f"{repo}/config.json from the Hub is not valid JSON") from e
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"{repo}/config.json from the Hub: top level is not an object")
    return arch_from_config(cfg, name=repo, where=f"{repo}/config.json")


# How long planning waits for the Hub before saying it is unreachable (it otherwise retries for ~25 s).
HUB_PROBE_TIMEOUT_S = 3.0


def _reachable(url: str, timeout: float) -> bool:
    """Whether a TCP connection to ``url``'s host opens within ``timeout`` (name lookup included)."""
    import socket
    import threading
    import urllib.parse

    u = urllib.parse.urlsplit(url)
    try:
        host, port = u.hostname, u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        return False
    if not host:
        return False
    ok: list[bool] = []

    def probe() -> None:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
            ok.append(True)

    t = threading.Thread(target=probe, daemon=True)  # getaddrinfo has no timeout of its own
    t.start()
    t.join(timeout)
    return bool(ok)
