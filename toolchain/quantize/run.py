"""Quantize a Hugging Face checkpoint with ModelOpt and export both checkpoint formats.

Output layout (written to a temp dir beside ``out`` and renamed into place only when complete):

    out/
      trtllm/     config.json + rank{N}.safetensors + tokenizer files   (for trtllm-build)
      hf/         unified HF checkpoint + hf_quant_config.json + tokenizer (for the LLM API)
      manifest.json   inputs, recipe, calibration digest, output digests, versions, accuracy, timing

Each export comes from its own copy of the quantized model (ModelOpt's exporters mutate it): the
quantizer state is saved once with ``mto.save`` and restored into a fresh model per export.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain._deps import require
from toolchain.artifacts.keys import directory_digest
from toolchain.artifacts.quantized import QUANT_ALGO, file_digests, remember_digests, verify_output
from toolchain.artifacts.recipe import Recipe
from toolchain.digest import atomic_write_text, canonical_json, check_replaceable, sha256_text, staged_dir
from toolchain.errors import (
    AccuracyGateError,
    CheckpointError,
    NeedsGPUError,
    OutputExistsError,
    QuantizeError,
    UserInputError,
)
from toolchain.progress import Progress, importing, silent
from toolchain.specs import families
from toolchain.specs.checkpoint import config_dims, read_config_json, safetensors_param_count
from toolchain.specs.families import AWQ, BY_ARCHITECTURE, verdict

FORMATS = ("fp8", "int4_awq", "w4a8_awq", "int8_sq", "int8_wo", "nvfp4")
KV_FORMATS = ("none", "fp8")
DEVICES = ("cpu", "cuda")
# whether the fake-quant diagnostic runs beside the gate: where it can ("auto"), always ("fakequant", a GPU for
# NVFP4), never ("dequant"); the verdict is always both exports run with the runtime's numerics (quantize.runtime)
GATES = ("auto", "fakequant", "dequant")
_CFG = {
    "fp8": "FP8_DEFAULT_CFG",
    "int4_awq": "INT4_AWQ_CFG",
    "w4a8_awq": "W4A8_AWQ_BETA_CFG",
    "int8_sq": "INT8_SMOOTHQUANT_CFG",
    "int8_wo": "INT8_WEIGHT_ONLY_CFG",
    "nvfp4": "NVFP4_DEFAULT_CFG",
}
# HF architectures ModelOpt's TRT-LLM exporter handles, and the decoder_type it needs; the other families of
# specs.families get the unified HF checkpoint only (for the pytorch runtime).
DECODER_TYPE = {f.architecture: f.decoder_type for f in families.FAMILIES.values() if f.decoder_type}
AWQ_FORMATS = ("int4_awq", "w4a8_awq")
NEEDS_CUDA_FORWARD = ("nvfp4",)  # ModelOpt's NVFP4 fake-quant forward asserts CUDA tensors
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")  # Accelerate's placement strategies


@dataclass
class QuantizeResult:
    out: Path
    manifest: dict[str, Any]
    reused: bool = False
    notes: list[str] = field(default_factory=list)


def check_checkpoint(model_dir: Path, allow_pickle: bool) -> dict[str, Any]:
    if not model_dir.is_dir():
        raise CheckpointError(f"{model_dir} is not a directory")
    cfg_path = model_dir / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{model_dir} has no config.json; it is not a Hugging Face checkpoint")
    cfg = read_config_json(cfg_path)
    config_dims(cfg, str(cfg_path))  # sizes that cannot describe a model are refused before ModelOpt sees them
    safetensors_param_count(model_dir)  # truncated, empty or shapeless *.safetensors are refused here
    has_st = any(model_dir.glob("*.safetensors"))
    has_pickle = any(model_dir.glob("*.bin")) or any(model_dir.glob("*.pt"))
    if not has_st and has_pickle and not allow_pickle:
        raise CheckpointError(
            f"{model_dir} holds only pickle weights (*.bin), which can run code when loaded",
            "convert them to safetensors, or pass --allow-pickle if you trust the source",
        )
    if not has_st and not has_pickle:
        raise CheckpointError(f"{model_dir} has no weights (*.safetensors)")
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise CheckpointError(f"{cfg_path}: architectures must be a list of class names")
    refused = quantize_refusal(cfg)
    if refused is not None:
        raise UserInputError(*refused)
    return dict(cfg)


def quantize_refusal(cfg: dict[str, Any]) -> tuple[str, str] | None:
    """(message, fix) when no runtime takes this config's model quantized: the family table's own words and
    alternative, as `spec validate` gives them (``specs.families.problem``), else None."""
    archs = cfg.get("architectures") or []
    family = BY_ARCHITECTURE.get(archs[0]) if archs else None
    if family is not None and (family.decoder_type or family.pytorch.ok):
        return None
    found = families.problem(cfg, "pytorch", "fp8")  # pytorch's verdict and the table's alternative
    if found is None:  # a model_type the table knows, but an architecture it does not
        return (
            f"architecture {archs[0] if archs else '(none)'} is not one this toolchain quantizes",
            f"supported families: {', '.join(families.FAMILIES)} (docs/model-families.md)",
        )
    message, fix = found
    if family is not None:
        message = f"{message}; on runtime tensorrt: {family.tensorrt_quantized.reason}"
    return message, fix


def check_awq_dims(model: Any, group: int) -> None:
    import torch

    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and not name.endswith("lm_head") and mod.in_features % group:
            raise UserInputError(
                f"layer {name} has input dimension {mod.in_features}, not divisible by the AWQ group size {group}",
                "use awq_group_size 64 or 32, or fp8/int8_sq for this model",
            )


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("nvidia-modelopt", "torch", "transformers", "safetensors"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    return out


def quantize(
    model_dir: Path,
    recipe: Recipe,
    out: Path,
    *,
    device: str = "cpu",
    device_map: str | dict[str, Any] | None = None,
    force: bool = False,
    allow_pickle: bool = False,
    accuracy_limits: Any = None,
    gate_method: str = "auto",
    reuse: bool = False,
    rehash: bool = False,
    input_digest: str | None = None,
    progress: Progress = silent,
) -> QuantizeResult:
    """Quantize ``model_dir`` per ``recipe`` into ``out`` (atomic), check accuracy, write the manifest.

    ``device`` is where the model runs: ``cpu``, or ``cuda`` (loaded straight onto the first GPU).
    ``device_map`` spreads a model larger than one GPU over the visible ones (``auto``, ``balanced``,
    ``sequential`` or an explicit module -> device map, as Transformers/Accelerate take it): ModelOpt
    calibrates it where it lies, and the accuracy check streams the weights module by module onto the
    first device, so no step needs the whole model in one place in float32.

    ``reuse``: an existing complete output for the same input and recipe is returned as it is; its files
    are trusted by their verified stat signatures, or all read again with ``rehash``.

    ``input_digest`` is ``model_dir``'s content digest when the caller already has it (it is computed otherwise).
    """
    model_dir, out = Path(model_dir).resolve(), Path(out).resolve()
    _check_request(recipe, device, device_map, gate_method)
    cfg = check_checkpoint(model_dir, allow_pickle)
    family = BY_ARCHITECTURE[cfg["architectures"][0]]
    if family.moe and recipe.weights in AWQ:
        v = verdict(family, "pytorch", recipe.weights)
        raise UserInputError(f"{family.name} with {recipe.weights}: {v.reason}", v.fix)
    input_digest = input_digest or directory_digest(model_dir)
    if out.exists():
        existing = verify_output(out, rehash=rehash) if reuse else None
        if (
            existing is not None
            and existing.get("input_digest") == input_digest
            and existing.get("recipe") == recipe.to_json()
        ):
            return QuantizeResult(
                out, existing, reused=True, notes=_judge_again(model_dir, out, existing, accuracy_limits)
            )
        if not force:
            raise OutputExistsError(f"{out} already exists")
        check_replaceable(out, "manifest.json")
    if device == "cuda" and not require("torch", "quantize").cuda.is_available():
        raise NeedsGPUError("--device cuda asked for, but no CUDA GPU is visible", "use --device cpu")
    importing(progress, QUANTIZE_MODULES, "importing torch, transformers and ModelOpt")
    run = _Run(model_dir, recipe, device, device_map, progress)
    calibrated = run.calibrate(gate_method)
    with staged_dir(out) as tmp:
        arch = cfg["architectures"][0]
        if arch not in DECODER_TYPE:
            calibrated.notes.append(
                f"no TensorRT-LLM checkpoint for {arch} ({BY_ARCHITECTURE[arch].tensorrt_quantized.reason}); "
                "the unified HF checkpoint (hf/) serves runtime pytorch"
            )
        run.export(calibrated, DECODER_TYPE.get(arch), tmp)
        progress("checking accuracy (both exports, with the runtime's numerics)")
        (results, unjudged), (files, hashed) = _check_and_seal(run, calibrated, tmp)
        calibrated.notes.extend(unjudged)
        manifest = _manifest(
            run, input_digest, calibrated, run.runtime.manifest_block(results, accuracy_limits, calibrated.fake), files
        )
        if accuracy_limits is not None:
            run.runtime.gate(results, accuracy_limits, diagnostic=calibrated.fake)
        atomic_write_text(tmp / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True))
    remember_digests(out, files, hashed)  # the next reuse need not read the files again
    return QuantizeResult(out, manifest, notes=calibrated.notes)


def _judge_again(model_dir: Path, out: Path, manifest: dict[str, Any], limits: Any) -> list[str]:
    """A reused checkpoint that an older gate passed (its manifest names another ``gate_version``, or none) is
    judged again by this one against ``limits``: AccuracyGateError when an export misses a threshold, else a
    note. The manifest is left as written (its figures are what that run measured)."""
    from toolchain.quantize import runtime

    recorded = (manifest.get("accuracy") or {}).get("gate_version")
    if limits is None or recorded == runtime.GATE_VERSION:
        return []
    verdict = runtime.judge(model_dir, out, limits)
    older = f"passed by an older gate ({recorded or manifest.get('accuracy', {}).get('gate', 'unknown')})"
    try:
        runtime.gate(verdict.results, limits)
    except AccuracyGateError as e:
        raise AccuracyGateError(f"{out} was {older}; judged again, {e.message}") from e
    return [f"{out} was {older}; judged again by {runtime.GATE_VERSION}: passed", *verdict.notes]


QUANTIZE_MODULES = (
    "torch",
    "transformers",
    "modelopt.torch.quantization",
    "modelopt.torch.opt",
    "modelopt.torch.export",
)


def _check_and_seal(
    run: _Run, calibrated: _Calibrated, tmp: Path
) -> tuple[tuple[dict[str, Any], list[str]], tuple[dict[str, dict[str, Any]], dict[str, os.stat_result]]]:
    """The runtime-numerics check of both exports, while a second thread hashes and fsyncs the (final) exports."""
    stop = threading.Event()
    with ThreadPoolExecutor(1, thread_name_prefix="seal") as pool:
        sealed = pool.submit(_seal, tmp, stop)
        try:
            checked = run.check_exports(calibrated, tmp)
            return checked, sealed.result()
        except BaseException:
            stop.set()  # an error or Ctrl-C does not wait for the digests of an output that is dropped
            raise


def _check_request(recipe: Recipe, device: str, device_map: str | dict[str, Any] | None, gate_method: str) -> None:
    """Refuse what this quantizer cannot do, before any file is read."""
    if recipe.weights not in FORMATS:
        raise UserInputError(f"unknown format '{recipe.weights}'", f"use one of {', '.join(FORMATS)}")
    if recipe.kv_cache not in KV_FORMATS:
        raise UserInputError(
            f"KV-cache format '{recipe.kv_cache}' is not supported by this quantizer",
            "use --kv-cache fp8 or none (INT8 KV needs the engine path's converter)",
        )
    if gate_method not in GATES:
        raise UserInputError(f"unknown accuracy gate '{gate_method}'", f"use one of {', '.join(GATES)}")
    if device not in DEVICES:
        raise UserInputError(f"unknown device '{device}'", "use --device cpu or --device cuda")
    if isinstance(device_map, str) and device_map not in DEVICE_MAPS:
        raise UserInputError(f"unknown device map '{device_map}'", f"use one of {', '.join(DEVICE_MAPS)}")


@dataclass
class _Calibrated:
    model: Any
    first: str  # the device of the input embedding: where inputs go
    calib_digest: str
    fake: Any  # the fake-quant accuracy check, or None when it cannot run here
    notes: list[str]
    reference: tuple[Any, Any]  # the original's logits on the held-out batch (model dtype), and that batch


class _Run:
    """One quantization: the libraries, the checkpoint and the recipe, shared by its steps."""

    def __init__(
        self,
        model_dir: Path,
        recipe: Recipe,
        device: str,
        device_map: str | dict[str, Any] | None,
        progress: Progress,
    ) -> None:
        self.torch = require("torch", "quantize")
        self.transformers = require("transformers", "quantize")
        self.mtq = require("modelopt.torch.quantization", "quantize")
        self.mto = require("modelopt.torch.opt", "quantize")
        self.mexport = require("modelopt.torch.export", "quantize")
        from toolchain.quantize import accuracy, runtime

        self.acc = accuracy
        self.runtime = runtime
        self.transformers.utils.logging.disable_progress_bar()
        self.transformers.utils.logging.set_verbosity_error()
        self.t0 = time.time()
        self.model_dir, self.recipe, self.device, self.device_map = model_dir, recipe, device, device_map
        self.progress = progress
        self.dtype = {"bfloat16": self.torch.bfloat16, "float16": self.torch.float16}[recipe.dtype]
        self.torch.manual_seed(recipe.seed)
        progress("loading checkpoint")
        self.tok = self.transformers.AutoTokenizer.from_pretrained(model_dir)
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token

    def fresh(self) -> Any:
        """The checkpoint loaded in the recipe's dtype where it runs; refused when a weight of its
        architecture is missing or of another shape (Transformers would fill it with random values, and
        the calibrated model, its exports and the accuracy reference would all share them)."""
        auto = self.transformers.AutoModelForCausalLM
        # mismatched sizes are reported (and refused below) instead of raised from inside Transformers
        kw: dict[str, Any] = {"dtype": self.dtype, "output_loading_info": True, "ignore_mismatched_sizes": True}
        if self.device_map is not None:
            kw["device_map"] = self.device_map
        elif self.device == "cuda":  # straight onto the GPU, never a full copy in host memory first
            kw["device_map"] = {"": 0}
        model, info = auto.from_pretrained(self.model_dir, **kw)
        missing = sorted(info.get("missing_keys") or ())
        mismatched = sorted(k[0] if isinstance(k, tuple) else str(k) for k in info.get("mismatched_keys") or ())
        if missing or mismatched:
            first = (missing or mismatched)[0]
            raise CheckpointError(
                f"{self.model_dir} does not hold the weights its config.json describes: "
                f"{len(missing)} missing, {len(mismatched)} of another shape (first: {first})",
                "re-download the checkpoint, or fix config.json to match its weights",
            )
        return model.eval()

    def calibrate(self, gate_method: str) -> _Calibrated:
        """Load, calibrate with ModelOpt, and measure the fake-quantized model where it can run."""
        from toolchain.quantize.calib import load_texts, tokenize

        recipe, torch, progress = self.recipe, self.torch, self.progress
        model = self.fresh()
        # Inputs go where the embedding lies; with a device map the model moves activations onward itself.
        first = str(model.get_input_embeddings().weight.device)
        if recipe.weights in AWQ_FORMATS:
            check_awq_dims(model, recipe.awq_group_size)
        with _quiet():
            quant_cfg = _config(self.mtq, recipe)
        texts = load_texts(recipe.dataset, Path.cwd(), recipe.seed, recipe.samples)
        batches, calib_digest = tokenize(self.tok, texts, recipe.seq_len, recipe.batch_size)

        def forward_loop(m: Any) -> None:
            with torch.no_grad():
                for i, b in enumerate(batches):
                    m(input_ids=b.input_ids.to(first), attention_mask=b.attention_mask.to(first))
                    progress("calibration", i + 1, len(batches), unit="batch")

        eval_batch = self.acc.held_out_batch(self.tok)
        on_first = {k: v.to(first) for k, v in eval_batch.items()}
        ref_logits = self.acc.logits_of(model, on_first).cpu()
        progress(f"calibrating {recipe.weights} (kv {recipe.kv_cache}) on {recipe.samples} samples")
        with _quiet():
            try:
                model = self.mtq.quantize(model, quant_cfg, forward_loop)
            except AssertionError as e:
                raise NeedsGPUError(
                    f"ModelOpt could not calibrate {recipe.weights} on {self.device}: {e}",
                    "run on a GPU host (--device cuda)",
                ) from e
        notes: list[str] = []
        cpu_only = recipe.weights in NEEDS_CUDA_FORWARD and self.device == "cpu"
        use_fake = gate_method in ("auto", "fakequant") and not cpu_only
        if gate_method == "fakequant" and not use_fake:
            raise NeedsGPUError(
                f"the {recipe.weights} fake-quant forward needs a GPU",
                "use --gate dequant (the default falls back to it)",
            )
        if cpu_only:
            notes.append(f"{recipe.weights} fake-quant evaluation needs a GPU; checked the dequantized export instead")
        fake: Any = None
        if use_fake:
            progress("evaluating fake-quantized model")
            with _quiet():
                q_logits = self.acc.logits_of(model, on_first).cpu()
            fake = self.acc.compare(ref_logits, q_logits, eval_batch, "fakequant", self.dtype)
        return _Calibrated(model, first, calib_digest, fake, notes, (ref_logits, eval_batch))

    def check_exports(self, calibrated: _Calibrated, out: Path) -> tuple[dict[str, Any], list[str]]:
        """Both exports under ``out`` run with the runtime's numerics, in the recipe's dtype against the reference
        logits taken before calibrating; float16 on the CPU (a slow path there) streams the original too, in
        float32. Returns the figures by export and notes on an export not judged."""
        if self.dtype == self.torch.float16 and calibrated.first == "cpu":
            return self.runtime.check_exports(self.model_dir, out, calibrated.first)
        return self.runtime.check_exports(
            self.model_dir, out, calibrated.first, dtype=self.dtype, reference=calibrated.reference
        )

    def export(self, calibrated: _Calibrated, decoder: str | None, tmp: Path) -> None:
        """Both checkpoints into ``tmp``: TensorRT-LLM's from the calibrated model, the unified HF one from a copy;
        the HF one only when ``decoder`` is None (a family ModelOpt writes no TensorRT-LLM checkpoint for).

        Each exporter changes the model it reads (scales are merged, weights replaced by their quantized form),
        so the second export reads a copy restored from the saved quantizer state."""
        recipe, torch, mexport = self.recipe, self.torch, self.mexport
        if decoder is None:
            self.progress("exporting unified HF checkpoint")
            with _quiet(), torch.inference_mode():
                mexport.export_hf_checkpoint(calibrated.model, export_dir=tmp / "hf")
            calibrated.model = None
            self.tok.save_pretrained(tmp / "hf")
            return
        state = tmp / "modelopt_state.pth"
        with _quiet():
            self.mto.save(calibrated.model, str(state))
        self.progress(f"exporting TensorRT-LLM checkpoint (tp={recipe.tp}, pp={recipe.pp})")
        with _quiet(), torch.inference_mode():
            mexport.export_tensorrt_llm_checkpoint(
                calibrated.model,
                decoder_type=decoder,
                dtype=self.dtype,
                export_dir=tmp / "trtllm",
                inference_tensor_parallel=recipe.tp,
                inference_pipeline_parallel=recipe.pp,
            )
        calibrated.model = None  # free it before the copy is loaded
        self.tok.save_pretrained(tmp / "trtllm")
        _check_trtllm_config(tmp / "trtllm", recipe)
        self.progress("exporting unified HF checkpoint")
        with _quiet(), torch.inference_mode():
            m_hf = self.mto.restore(self.fresh(), str(state))
            mexport.export_hf_checkpoint(m_hf, export_dir=tmp / "hf")
        del m_hf
        self.tok.save_pretrained(tmp / "hf")
        state.unlink()


def _manifest(
    run: _Run, input_digest: str, calibrated: _Calibrated, accuracy: dict[str, Any], files: dict[str, Any]
) -> dict[str, Any]:
    """What ``manifest.json`` records: inputs, recipe, versions, file digests, accuracy, cost."""
    return {
        "kind": "toolchain.quantized-checkpoint",
        "schema": 1,
        "input": str(run.model_dir),
        "input_digest": input_digest,
        "recipe": run.recipe.to_json(),
        "calibration_digest": calibrated.calib_digest,
        "versions": _versions(),
        "device": run.device,
        "files": files,
        "exports": sorted({rel.split("/", 1)[0] for rel in files} & {"trtllm", "hf"}),
        "output_digest": "sha256:" + sha256_text(canonical_json({k: v["digest"] for k, v in files.items()})),
        "accuracy": accuracy,
        "notes": calibrated.notes,
        "wall_time_s": round(time.time() - run.t0, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _config(mtq: Any, recipe: Recipe) -> Any:
    import copy

    cfg = copy.deepcopy(getattr(mtq, _CFG[recipe.weights]))
    if recipe.weights in AWQ_FORMATS and recipe.awq_group_size != 128:
        for entry in cfg["quant_cfg"]:
            if isinstance(entry, dict) and entry.get("quantizer_name", "").endswith("weight_quantizer"):
                c = entry.get("cfg")
                items = c if isinstance(c, list) else [c]
                for item in items:
                    if isinstance(item, dict) and isinstance(item.get("block_sizes"), dict):
                        item["block_sizes"][-1] = recipe.awq_group_size
    if recipe.kv_cache == "fp8":
        from modelopt.torch.quantization.utils import update_quant_cfg_with_kv_cache_quant

        cfg = update_quant_cfg_with_kv_cache_quant(cfg, mtq.FP8_KV_CFG["quant_cfg"])
    return cfg


def _check_trtllm_config(ckpt: Path, recipe: Recipe) -> None:
    cfg = json.loads((ckpt / "config.json").read_text())
    q = cfg.get("quantization") or {}
    want = QUANT_ALGO[recipe.weights]
    if q.get("quant_algo") != want:
        raise QuantizeError(f"ModelOpt wrote quant_algo {q.get('quant_algo')!r}, expected {want!r}")
    want_kv = "FP8" if recipe.kv_cache == "fp8" else None
    if q.get("kv_cache_quant_algo") != want_kv:
        raise QuantizeError(
            f"ModelOpt wrote kv_cache_quant_algo {q.get('kv_cache_quant_algo')!r}, expected {want_kv!r}"
        )
    world = cfg.get("mapping", {}).get("world_size")
    if world != recipe.tp * recipe.pp:
        raise QuantizeError(f"checkpoint world_size {world} != tp×pp {recipe.tp * recipe.pp}")
    for r in range(recipe.tp * recipe.pp):
        if not (ckpt / f"rank{r}.safetensors").is_file():
            raise QuantizeError(f"ModelOpt did not write rank{r}.safetensors")


@contextlib.contextmanager
def _quiet() -> Any:
    """Silence ModelOpt's known-harmless warnings (no tensorrt_llm module, lm_head notice)."""

    with warnings.catch_warnings(), open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        warnings.filterwarnings("ignore", category=UserWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        yield


def _seal(root: Path, stop: threading.Event) -> tuple[dict[str, dict[str, Any]], dict[str, os.stat_result]]:
    """Digest every file under ``root`` and flush it to disk; ``stop`` ends it between files."""
    files, hashed = file_digests(root, stop=stop.is_set)
    for rel in files:
        if stop.is_set():
            break
        _fsync(root / rel)
    return files, hashed


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
