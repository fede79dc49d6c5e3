"""The architecture of the model a spec names, from its Hugging Face ``config.json`` (or an offline catalog).

Shared by the compatibility rules (TP must divide the heads) and the planner (memory and speed arithmetic).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from toolchain import http, settings
from toolchain.errors import HubUnavailableError, ModelConfigError
from toolchain.specs.checkpoint import config_dims, read_config_json, safetensors_param_count
from toolchain.specs.models import EngineSpec
from toolchain.specs.sources import is_tiny, missing_checkpoint_hint


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
    # What the families add to the Llama shape (FAMILY_SHAPES; 0 for a plain Llama):
    bias_params: int = 0  # attention/MLP biases, all layers
    extra_norm_params: int = 0  # q/k norms and norms beyond two per layer, all layers
    shared_expert_size: int = 0  # intermediate size of an always-on shared expert (Qwen2-MoE)
    sparse_layers: int | None = None  # layers whose MLP is the mixture of experts (None: all, when MoE)
    dense_intermediate_size: int = 0  # the MLP of the other layers of an MoE model

    @property
    def embed_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_embeddings else self.vocab_size * self.hidden_size

    @property
    def moe_layers(self) -> int:
        if not self.num_experts:
            return 0
        return self.num_layers if self.sparse_layers is None else self.sparse_layers

    @property
    def expert_params(self) -> float:
        """Parameters in the routed experts (gate, up and down projections of each), all layers."""
        return float(self.moe_layers * self.num_experts * 3 * self.hidden_size * self.intermediate_size)

    @property
    def _dense_linear_params(self) -> float:
        """Decoder Linear parameters outside the routed experts: attention, dense MLPs, shared experts, routers."""
        attn = self.hidden_size * self.head_dim * (2 * self.num_heads + 2 * self.num_kv_heads)
        dense_layers = self.num_layers - self.moe_layers
        dense_inter = self.dense_intermediate_size or self.intermediate_size
        mlp = dense_layers * 3 * self.hidden_size * dense_inter
        if self.moe_layers:
            router = self.hidden_size * self.num_experts
            gate = self.hidden_size if self.shared_expert_size else 0  # the shared expert's 1-wide sigmoid gate
            shared = 3 * self.hidden_size * self.shared_expert_size + gate
            mlp += self.moe_layers * (router + shared)
        return float(self.num_layers * attn + mlp)

    @property
    def linear_params(self) -> float:
        """Parameters in the decoder Linear layers: what weight quantization applies to."""
        if self.params_override is not None:
            return self.params_override - self.embed_params - self.lm_head_params - self.norm_params - self.bias_params
        return self._dense_linear_params + self.expert_params

    @property
    def norm_params(self) -> int:
        return (2 * self.num_layers + 1) * self.hidden_size + self.extra_norm_params

    @property
    def params(self) -> float:
        if self.params_override is not None:
            return self.params_override
        return self.linear_params + self.embed_params + self.lm_head_params + self.norm_params + self.bias_params

    @property
    def active_params(self) -> float:
        """Parameters touched per token (MoE: only the routed experts, ``experts_per_token`` of each layer's)."""
        if not self.num_experts:
            return self.params
        inactive = self.moe_layers * (self.num_experts - self.experts_per_token) * 3 * self.hidden_size
        return self.params - inactive * self.intermediate_size

    def expert_linear_read(self, batch: int) -> float:
        """Routed-expert parameters one decode step of ``batch`` tokens reads: per MoE layer, the experts at
        least one token is routed to, in expectation under uniform routing, E·(1 − (1 − k/E)^batch)."""
        if not self.num_experts:
            return 0.0
        e, k = self.num_experts, self.experts_per_token or self.num_experts
        hit = e * (1.0 - (1.0 - k / e) ** max(1, batch))
        return self.moe_layers * hit * 3 * self.hidden_size * self.intermediate_size


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
    "shared_expert_intermediate_size",
    "qkv_bias",
    "decoder_sparse_step",
    "mlp_only_layers",
    "norm_topk_prob",
    "query_pre_attn_scalar",
    "final_logit_softcapping",
    "attn_logit_softcapping",
    "hidden_activation",
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
        **_family_shape(cfg, str(mtype or "llama"), d, where),
    )


def _flag(cfg: dict[str, Any], key: str, where: str) -> bool:
    value = cfg.get(key, False)
    if not isinstance(value, bool):
        raise ModelConfigError(f"{where}: {key} must be true or false (got {value!r:.60})")
    return value


def _family_shape(cfg: dict[str, Any], mtype: str, d: dict[str, int], where: str) -> dict[str, Any]:
    """What a family adds to the Llama shape, from its config (FAMILY_SHAPES says which terms apply; the
    tests hold the totals equal to the parameters Transformers builds for each family)."""
    shape = FAMILY_SHAPES.get(mtype, {})
    layers, hidden, heads, kv, hd = d["layers"], d["hidden"], d["heads"], d["kv_heads"], d["head_dim"]
    q, k = heads * hd, kv * hd
    bias = 0
    if shape.get("qkv_bias"):  # always on: q, k and v projections
        bias += q + 2 * k
    elif _flag(cfg, "attention_bias", where):  # q, k, v and o projections
        bias += q + 2 * k + hidden
    if _flag(cfg, "mlp_bias", where):
        bias += 2 * d["intermediate"] + hidden
    norms = {"head": 2 * hd, "proj": q + k}.get(str(shape.get("qk_norm", "")), 0)
    norms += (int(shape.get("norms_per_layer", 2)) - 2) * hidden
    out: dict[str, Any] = {"bias_params": layers * bias, "extra_norm_params": layers * norms}
    if d["experts"] and shape.get("moe_layout") == "qwen":
        step = cfg.get("decoder_sparse_step") or 1
        dense_only = cfg.get("mlp_only_layers") or []
        if type(step) is not int or step < 1 or not isinstance(dense_only, list):
            raise ModelConfigError(f"{where}: decoder_sparse_step must be a positive integer, mlp_only_layers a list")
        out["sparse_layers"] = sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
        if cfg.get("intermediate_size") is not None:
            out["dense_intermediate_size"] = int(cfg["intermediate_size"])
        shared = cfg.get("shared_expert_intermediate_size")
        if shared:
            out["shared_expert_size"] = int(shared)
    return out


# What each family's decoder layer adds to the Llama layer (read from the family's modeling_*.py in
# Transformers 5.14; docs/model-families.md). qkv_bias: q/k/v projections always carry a bias;
# qk_norm "head": RMSNorm over head_dim on q and k (Qwen3), "proj": over the whole q and k projections
# (OLMo2); norms_per_layer: Gemma2 has four; moe_layout "qwen": decoder_sparse_step/mlp_only_layers
# choose the MoE layers, shared_expert_intermediate_size adds an always-on expert with a 1-wide gate.
FAMILY_SHAPES: dict[str, dict[str, Any]] = {
    "qwen2": {"qkv_bias": True},
    "qwen2_moe": {"qkv_bias": True, "moe_layout": "qwen"},
    "qwen3": {"qk_norm": "head"},
    "qwen3_moe": {"qk_norm": "head", "moe_layout": "qwen"},
    "olmo2": {"qk_norm": "proj"},
    "gemma2": {"norms_per_layer": 4},
}


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
            missing_checkpoint_hint(spec.name, local) + ("" if is_tiny(spec.name) else " (or set model.architecture)"),
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
        again = f"try again when the Hub answers (check HF_ENDPOINT, a proxy), or {hint}"
        if not _reachable(endpoint, HUB_PROBE_TIMEOUT_S):  # an outage, not the spec's fault: exit 75, retried
            raise HubUnavailableError(
                f"cannot fetch config.json of {repo}@{rev or 'main'}: the Hugging Face Hub at "
                f"{http.redact(endpoint)} is not reachable within {HUB_PROBE_TIMEOUT_S:.0f} s",
                again,
            ) from miss
        from toolchain import hub

        hub.install()  # every read bounded by TOOLCHAIN_HF_STALL_TIMEOUT, a stall named (toolchain/hub.py)
        try:
            path = hf_hub_download(repo, "config.json", revision=rev, etag_timeout=HUB_PROBE_TIMEOUT_S)
        except Exception as e:
            stopped = hub.stopped_message(e)
            if stopped is not None:
                raise HubUnavailableError(
                    f"cannot fetch config.json of {repo}@{rev or 'main'}: {stopped}", again
                ) from e
            if http.transient(e):  # timed out, refused, 429/5xx after the retries
                raise HubUnavailableError(
                    f"cannot fetch config.json of {repo}@{rev or 'main'}: the Hugging Face Hub at "
                    f"{http.redact(endpoint)} did not answer (or answered 429/5xx)",
                    again,
                ) from e
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
