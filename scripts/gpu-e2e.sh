#!/usr/bin/env bash
# The real pipeline on a GPU host, inside NVIDIA's TensorRT-LLM/Triton container, exercising every artifact
# the toolchain hands to it:
#   CI job script (container Python + TensorRT-LLM) -> plan (TPOT floor) -> quantize -> build (trtllm-build
#   command line, --timeout) -> emit (every parameter the tensorrtllm backend needs, 1.x optional inputs,
#   engine checked against the cell) -> lint -> relocate the repository and serve it with the tensorrtllm
#   backend -> non-streaming and streaming requests -> bench -> diagnose -> a decoupled:false repository
#   -> --engines-root repository -> runtime pytorch (LLM-API model.py) -> emit from the installed wheel,
#   then a table of measured TPOT against the planner's floor.
#
# usage: scripts/gpu-e2e.sh [--dry-run] [SPEC] [CELL]
#   --dry-run (or DRY_RUN=1) prints every step and runs none of them (works anywhere, no GPU needed).
#   Outside the container it re-runs itself in $IMAGE with `docker run --gpus all`;
#   inside (where /opt/tritonserver/bin/tritonserver exists) it runs the pipeline.
set -euo pipefail
DRY=${DRY_RUN:-0}
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
IMAGE=${IMAGE:-nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3}   # TensorRT-LLM 1.1.0, TensorRT 10.13.3.9
SPEC=${1:-engine_specs/llama-3.1-8b-fp8.yaml}
CELL=${2:-}
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-e2e-out}
STEP=0

step() { STEP=$((STEP + 1)); echo "== step $STEP: $*" >&2; }
run() {  # print the command; run it unless dry
  echo "+ $*" >&2
  if [ "$DRY" != 1 ]; then "$@"; fi
}

if [ "$DRY" != 1 ] && [ ! -x /opt/tritonserver/bin/tritonserver ]; then
  command -v docker >/dev/null || { echo "Error: gpu-e2e needs docker with the NVIDIA runtime — or run it inside $IMAGE" >&2; exit 2; }
  exec docker run --rm --gpus all --ipc host --ulimit memlock=-1 -v "$PWD:/work" -w /work \
    -e HF_TOKEN -e TOOLCHAIN_REGISTRY -e TOOLCHAIN_CONTAINER_IMAGE="$IMAGE" "$IMAGE" \
    bash scripts/gpu-e2e.sh "$SPEC" "$CELL"
fi

export TOOLCHAIN_REGISTRY=${TOOLCHAIN_REGISTRY:-$PWD/$OUT/registry}
export TOOLCHAIN_CONTAINER_IMAGE=${TOOLCHAIN_CONTAINER_IMAGE:-$IMAGE}
PY=${PYTHON:-python3}
TC=("$PY" -m toolchain.cli.main)
run mkdir -p "$OUT"

step "the CI job script in this container: its Python sees the image's TensorRT-LLM; an empty registry is refused"
run scripts/ci-gpu-job.sh check
run bash -c '! TOOLCHAIN_REGISTRY= scripts/ci-gpu-job.sh check'
command -v nvidia-smi >/dev/null && run nvidia-smi -L

if [ -z "$CELL" ]; then
  if [ "$DRY" = 1 ]; then CELL="<first cell of $SPEC>"; else
    CELL=$("${TC[@]}" spec expand "$SPEC" --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["cells"][0]["id"])')
  fi
fi

step "validate and plan (TPOT floor reads only the looked-up embedding rows; fleet in instances and GPUs)"
run "${TC[@]}" spec validate "$SPEC"
run "${TC[@]}" plan "$SPEC" --cell "$CELL" --explain
run sh -c "$(printf '%q ' "${TC[@]}") plan $(printf '%q' "$SPEC") --cell $(printf '%q' "$CELL") --json > $OUT/plan.json"

step "quantize with ModelOpt on the GPU"
run scripts/ci-gpu-job.sh quantize "$SPEC"

step "build: the synthesised trtllm-build command line runs for real, under a deadline"
run sh -c "$(printf '%q ' "${TC[@]}") build $(printf '%q' "$SPEC") --cell $(printf '%q' "$CELL") --timeout 7200 --json > $OUT/build.json"
KEY="<engine key>"
if [ "$DRY" != 1 ]; then
  KEY=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["cells"][0]["engine_key"])' "$OUT/build.json")
fi

step "emit: every parameter the tensorrtllm backend reads without a default, the 1.x optional inputs, engine checked against the cell"
run "${TC[@]}" triton emit "$SPEC" --cell "$CELL" --engine "$KEY" --out "$OUT/built/repo" --force
run "${TC[@]}" triton lint "$OUT/built/repo"

step "the served repository: engine and tokenizer inside it (hard links), no path of the registry cache"
run "${TC[@]}" triton emit "$SPEC" --cell "$CELL" --engine "$KEY" --out "$OUT/repo" --force
run "${TC[@]}" triton lint "$OUT/repo"
run sh -c "! grep -rl \"\${TOOLCHAIN_CACHE:-\$HOME/.cache/toolchain}\" $OUT/repo --include=config.pbtxt"

serve() {  # serve DIR: start tritonserver on the repository and wait until it is ready
  echo "+ toolchain serve $1 (background) and wait for /v2/health/ready" >&2
  [ "$DRY" = 1 ] && return 0
  "${TC[@]}" serve "$1" --http-port 8000 --grpc-port 8001 --metrics-port 8002 > "$OUT/serve.log" 2>&1 &
  SERVE=$!
  for _ in $(seq 1 900); do
    curl -sf http://127.0.0.1:8000/v2/health/ready >/dev/null && return 0
    kill -0 $SERVE 2>/dev/null || { cat "$OUT/serve.log"; exit 1; }
    sleep 1
  done
  echo "Error: tritonserver not ready after 900 s — see $OUT/serve.log" >&2; exit 1
}
stop() { [ "$DRY" = 1 ] && { echo "+ stop tritonserver" >&2; return 0; }; kill "$SERVE" 2>/dev/null || true; wait "$SERVE" 2>/dev/null || true; }
trap '[ "$DRY" = 1 ] || stop' EXIT

step "serve with the tensorrtllm backend; non-streaming and streaming requests; the optional 1.x inputs are accepted"
serve "$OUT/repo"
run curl -sf -X POST http://127.0.0.1:8000/v2/models/ensemble/generate \
  -d '{"text_input": "What is machine learning?", "max_tokens": 32, "bad_words": "", "stop_words": ""}'
run curl -sf -X POST http://127.0.0.1:8000/v2/models/ensemble/generate_stream \
  -d '{"text_input": "What is machine learning?", "max_tokens": 32, "bad_words": "", "stop_words": "", "stream": true}'
run curl -sf -X POST http://127.0.0.1:8000/v2/models/tensorrt_llm/generate \
  -d '{"input_ids": [1, 2, 3, 4], "input_lengths": [4], "request_output_len": [8], "early_stopping": [true], "beam_search_diversity_rate": [0.0], "runtime_top_p_min": [0.1], "runtime_top_p_decay": [1.0], "runtime_top_p_reset_ids": [-1], "draft_acceptance_threshold": [0.0]}'

step "bench and diagnose"
run "${TC[@]}" bench --url 127.0.0.1:8001 --repo "$OUT/repo" --spec "$SPEC" --cell "$CELL" \
  --concurrency 1,8,32 --requests 64 --input-tokens normal:1024:256 --output-tokens 256 \
  --metrics-url http://127.0.0.1:8002/metrics --save "$OUT/bench.json"
run "${TC[@]}" bench --url 127.0.0.1:8001 --repo "$OUT/repo" --shared-prefix 4:1024:0.8 --input-tokens 128 \
  --output-tokens 64 --concurrency 8 --requests 64 --metrics-url http://127.0.0.1:8002/metrics --save "$OUT/prefix.json"
run "${TC[@]}" diagnose --metrics-url http://127.0.0.1:8002/metrics --bench "$OUT/bench.json"
run "${TC[@]}" bench report "$OUT/bench.json" "$OUT/prefix.json" --out "$OUT/report" --force
stop

step "serving: {streaming: false, decoupled: false} lints clean and answers"
run "$PY" -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); d["serving"].update(streaming=False, decoupled=False); yaml.safe_dump(d, open(sys.argv[2], "w"))' "$SPEC" "$OUT/nondecoupled.yaml"
run "${TC[@]}" triton emit "$OUT/nondecoupled.yaml" --cell "$CELL" --engine "$KEY" --out "$OUT/repo-nd" --force
run "${TC[@]}" triton lint "$OUT/repo-nd"
serve "$OUT/repo-nd"
run curl -sf -X POST http://127.0.0.1:8000/v2/models/ensemble/generate -d '{"text_input": "Hello", "max_tokens": 8, "bad_words": "", "stop_words": ""}'
stop

step "--engines-root: the repository names /engines/<key>; mount the engine there and serve"
run "${TC[@]}" triton emit "$SPEC" --cell "$CELL" --engine "$KEY" --out "$OUT/repo-mounted" --engines-root /engines --force
run mkdir -p /engines
run ln -sfn "$(cd "$OUT/built/repo/tensorrt_llm/1/engine" 2>/dev/null && pwd || echo "$OUT/built/repo/tensorrt_llm/1/engine")" "/engines/$KEY"
run "${TC[@]}" triton lint "$OUT/repo-mounted"
serve "$OUT/repo-mounted"
stop

step "runtime pytorch: the LLM-API repository ships its model.py and checkpoint"
run "$PY" -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); d["runtime"] = "pytorch"; d["name"] += "-pytorch"; yaml.safe_dump(d, open(sys.argv[2], "w"))' "$SPEC" "$OUT/pytorch.yaml"
run "${TC[@]}" build "$OUT/pytorch.yaml" --cell "$CELL"
run "${TC[@]}" triton emit "$OUT/pytorch.yaml" --cell "$CELL" --reference --out "$OUT/repo-llmapi" --force
run "${TC[@]}" triton lint "$OUT/repo-llmapi"
serve "$OUT/repo-llmapi"
run curl -sf -X POST http://127.0.0.1:8000/v2/models/tensorrt_llm/generate -d '{"text_input": "Hello", "sampling_param_max_tokens": 8}'
stop

step "an installed wheel emits a repository (model sources are package data)"
run "$PY" -m pip wheel . --no-deps --no-build-isolation -q -w "$OUT/dist"
run "$PY" -m venv --system-site-packages "$OUT/wheel-venv"
run sh -c "$OUT/wheel-venv/bin/pip install -q --no-deps $OUT/dist/toolchain-*.whl"
run sh -c "cd / && $PWD/$OUT/wheel-venv/bin/python -m toolchain.cli.main triton emit $PWD/$SPEC --cell '$CELL' --engine $KEY --out $PWD/$OUT/repo-wheel --force"

step "measured TPOT against the planner's floor"
if [ "$DRY" != 1 ]; then
  "$PY" - "$OUT/plan.json" "$OUT/bench.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))["cells"][0]
bench = json.load(open(sys.argv[2]))
print(f"{'load':<16}{'TPOT p50 ms':>12}{'floor ms':>10}{'x floor':>9}")
for run in bench["runs"]:
    t = (run["summary"].get("tpot_ms") or {}).get("p50")
    floor = plan["tpot_floor_b1_ms"]
    print(f"{run['label']:<16}{t or float('nan'):>12.2f}{floor:>10.2f}{(t or 0) / floor:>9.2f}")
PY
else
  echo "+ python: TPOT p50 per load vs plan tpot_floor_b1_ms" >&2
fi
echo "gpu-e2e: $STEP steps done$([ "$DRY" = 1 ] && echo ' (dry run: nothing was run)')" >&2
