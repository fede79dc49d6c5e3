"""`toolchain triton lint --load`: what the real Triton says about a repository, mapped to its files.

A copy of the repository is served by the Triton 2.51 the toolchain runs (``toolchain.triton.server``;
127.0.0.1, free ports, explicit model control). A ``tensorrtllm``-backend model cannot load on a host
without its GPUs, so in the copy it is replaced by the CPU reference stand-in (``triton_repo/
tensorrt_llm_cpu_reference``: the same tensors, a random-weight Llama of the tokenizer's vocabulary, not
TensorRT-LLM); its own config then is not what Triton checks, everything around it is. Each model is
loaded by name (composing models first), then one request with the standard inputs goes to each entry
model (the ensembles and the BLS). Whatever Triton refuses becomes a finding on that model's config.
Each model loads once: the copy holds its bytecode before Triton starts (``precompile``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.progress import Progress, silent
from toolchain.triton.lint import Finding, _param, _read_configs

STAND_IN = "CPU reference stand-in (random weights, not TensorRT-LLM)"


@dataclass
class LoadResult:
    findings: list[Finding] = field(default_factory=list)
    stand_in: str | None = None  # the model replaced by the CPU reference stand-in, if any
    models: dict[str, str] = field(default_factory=dict)  # model -> "loaded" or what Triton said
    requests: dict[str, str] = field(default_factory=dict)  # entry model -> "answered" or the error
    log_path: str = ""

    def summary(self) -> str:
        ok = [m for m, v in self.models.items() if v == "loaded"]
        answered = [m for m, v in self.requests.items() if v == "answered"]
        swap = f"; {self.stand_in} served by the {STAND_IN}" if self.stand_in else ""
        return (
            f"load: Triton 2.51 loaded {len(ok)} of {len(self.models)} model(s), {len(answered)} of "
            f"{len(self.requests)} entry model(s) answered the standard request{swap} (log {self.log_path})"
        )


def _stand_in(work: Path, llm: str, configs: dict[str, Any], tmp: Path) -> None:
    """Replace ``work/llm`` (backend tensorrtllm) by the CPU reference model over a random tiny Llama with
    the vocabulary of the repository's tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from toolchain.triton.emit import model_sources, to_pbtxt

    tok_dir = None
    for name in ("preprocessing", "postprocessing"):
        if name in configs and _param(configs[name], "tokenizer_dir"):
            d = Path(_param(configs[name], "tokenizer_dir") or "")
            tok_dir = d if d.is_absolute() else work / name / d
            break
    vocab = 32000
    if tok_dir is not None and (tok_dir / "config.json").is_file():
        vocab = int(json.loads((tok_dir / "config.json").read_text()).get("vocab_size") or vocab)
    elif tok_dir is not None and tok_dir.is_dir():
        vocab = len(AutoTokenizer.from_pretrained(tok_dir))
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
    )
    ckpt = tmp / "stand-in"
    model: Any = LlamaForCausalLM(cfg)  # type: ignore[no-untyped-call]
    model.save_pretrained(ckpt)
    llm_cfg = configs[llm]
    llm_cfg.backend = "python"
    for key in ("toolchain_reference", "hf_model_dir"):
        llm_cfg.parameters[key].string_value = STAND_IN if key == "toolchain_reference" else str(ckpt)
    for g in llm_cfg.instance_group:
        g.kind = g.KIND_CPU
        del g.gpus[:]
    (work / llm / "config.pbtxt").write_text(to_pbtxt(llm_cfg))
    version = work / llm / "1"
    version.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(version / "engine", ignore_errors=True)
    shutil.copy2(model_sources() / "tensorrt_llm_cpu_reference" / "1" / "model.py", version / "model.py")


def precompile(repo: Path) -> None:
    """Write the bytecode of every Python file in ``repo`` (a copy Triton is about to serve) next to it.

    A Python-backend stub writes ``__pycache__`` into the model's version directory as it imports ``model.py``;
    Triton (explicit model control) then counts the model as modified, and loading an ensemble that names it
    loads it all over again: each composing model was loaded twice. With the bytecode already there the stub
    writes nothing. (A stub of another Python writes its own bytecode: the reload comes back, slower, not wrong.)
    """
    import compileall

    compileall.compile_dir(repo, quiet=2)


_TENSOR = re.compile(r"ensemble tensor (\S+?):")


def _finding(file: str, model: str, what: str, said: str, stand_in: str | None) -> Finding:
    """Triton's words, on the config they concern, with the key they name where they name one."""
    said = " ".join(said.split())
    m = _TENSOR.search(said)
    if "max_batch_size" in said or "maximum batch size" in said:
        key, fix = "max_batch_size", "make each composing model's max_batch_size at least the ensemble's (>= 0)"
    elif m:
        key, fix = f"ensemble tensor {m.group(1)}", "give the tensor one name, data_type and dims in every config"
    elif any(w in said for w in ("data type", "datatype", "expects")):
        key, fix = "input data_type", "declare the data_type the standard request sends (the ensemble's)"
    else:
        key, fix = what, "fix what Triton names (the log has the model's traceback)"
    note = f" [tensorrt_llm served by the {STAND_IN}]" if stand_in else ""
    return Finding(file, key, f"Triton 2.51 {what}: {said[:400]}{note}", fix)


def load_check(repo: Path, *, progress: Progress = silent, ready_timeout: float = 180.0) -> LoadResult:
    """Load a copy of ``repo`` in the real Triton and send the standard request to each entry model."""
    import tritonclient.http as h
    from tritonclient.utils import InferenceServerException

    from toolchain.triton import server as S
    from toolchain.triton.client import stream_generate

    repo = Path(repo).resolve()
    configs, files, _ = _read_configs(repo)
    res = LoadResult()
    fd, log = tempfile.mkstemp(prefix="toolchain-lint-load-", suffix=".log")  # kept: the evidence
    os.close(fd)
    res.log_path = log
    with tempfile.TemporaryDirectory(prefix="toolchain-lint-load-") as tmp_s:
        tmp = Path(tmp_s)
        work = tmp / "repo"
        progress("copying the repository for Triton")
        shutil.copytree(repo, work, symlinks=True, ignore=shutil.ignore_patterns("engine", "__pycache__"))
        llm = next((n for n, c in configs.items() if c.backend == "tensorrtllm"), None)
        if llm is not None:
            progress(f"replacing {llm} by the {STAND_IN}")
            _stand_in(work, llm, configs, tmp)
            res.stand_in = llm
        precompile(work)
        entries = [n for n, c in configs.items() if c.platform == "ensemble" or n == "tensorrt_llm_bls"]
        order = [n for n in configs if n not in entries] + entries
        ports = S.Ports(S.free_port(), S.free_port(), S.free_port())
        srv = S.start(
            work,
            ports=ports,
            log_path=Path(log),
            ready_timeout=ready_timeout,
            extra_args=["--model-control-mode=explicit"],
            progress=progress,
        )
        try:
            client = h.InferenceServerClient(f"{srv.host}:{ports.http}", network_timeout=ready_timeout)
            for name in order:
                progress(f"Triton: loading {name}")
                try:
                    client.load_model(name)
                    res.models[name] = "loaded"
                except InferenceServerException as e:
                    res.models[name] = e.message() or str(e)
                    said = res.models[name]
                    res.findings.append(_finding(files[name], name, "refuses to load it", said, res.stand_in))
            for name in entries:
                if res.models.get(name) != "loaded":
                    continue
                progress(f"Triton: one standard request to {name}")
                r = stream_generate(srv.grpc_url, name, "Hello", 2, stream=False, timeout=ready_timeout)
                res.requests[name] = "answered" if r.error is None else r.error
                if r.error is not None:
                    res.findings.append(
                        _finding(files[name], name, "loads it, then fails the standard request", r.error, res.stand_in)
                    )
            client.close()
        finally:
            srv.stop(progress=progress)
    return res
