#!/usr/bin/env bash
# The real pipeline on a GPU host, inside NVIDIA's TensorRT-LLM/Triton container:
# quantize -> build -> emit -> serve with the tensorrtllm backend -> benchmark -> diagnose, then a
# table of measured TPOT against the planner's floor.
#
# usage: scripts/gpu-e2e.sh [SPEC] [CELL]
#   outside the container it re-runs itself in $IMAGE with `docker run --gpus all`;
#   inside (where /opt/tritonserver/bin/tritonserver exists) it runs the pipeline.
set -euo pipefail
IMAGE=${IMAGE:-nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3}   # TensorRT-LLM 1.1.0, TensorRT 10.13.3.9 (Triton compatibility matrix)
SPEC=${1:-engine_specs/llama-3.1-8b-fp8.yaml}
CELL=${2:-}
cd "$(dirname "$0")/.."

if [ ! -x /opt/tritonserver/bin/tritonserver ]; then
  command -v docker >/dev/null || { echo "gpu-e2e: needs docker with the NVIDIA runtime, or run inside $IMAGE" >&2; exit 2; }
  exec docker run --rm --gpus all --ipc host --ulimit memlock=-1 -v "$PWD:/work" -w /work \
    -e HF_TOKEN -e TOOLCHAIN_REGISTRY -e TOOLCHAIN_CONTAINER_IMAGE="$IMAGE" "$IMAGE" \
    bash scripts/gpu-e2e.sh "$SPEC" "$CELL"
fi

command -v nvidia-smi >/dev/null && nvidia-smi -L
python3 -m venv --system-site-packages .venv-gpu        # keeps the container's tensorrt_llm and tensorrt
.venv-gpu/bin/pip install -q -e '.[s3,hf,gpu,plots]' 'nvidia-modelopt==0.47.0' requests 'tritonclient[grpc,http]'
TC=.venv-gpu/bin/toolchain
export TOOLCHAIN_CONTAINER_IMAGE=${TOOLCHAIN_CONTAINER_IMAGE:-$IMAGE}
if [ -z "$CELL" ]; then
  CELL=$($TC spec expand "$SPEC" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["cells"][0]["id"])')
fi
OUT=${OUT:-gpu-e2e-out}
mkdir -p "$OUT"

$TC spec validate "$SPEC"
$TC plan "$SPEC" --cell "$CELL" --json > "$OUT/plan.json"
$TC quantize "$SPEC" --device cuda
$TC build "$SPEC" --cell "$CELL" --json > "$OUT/build.json"
KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cells"][0]["engine_key"])' "$OUT/build.json")
$TC triton emit "$SPEC" --cell "$CELL" --engine "$KEY" --out "$OUT/repo" --force
$TC triton lint "$OUT/repo"

$TC serve "$OUT/repo" --http-port 8000 --grpc-port 8001 --metrics-port 8002 > "$OUT/serve.log" 2>&1 &
SERVE=$!
trap 'kill $SERVE 2>/dev/null || true; wait $SERVE 2>/dev/null || true' EXIT
for _ in $(seq 1 900); do
  curl -sf http://127.0.0.1:8000/v2/health/ready >/dev/null && break
  kill -0 $SERVE 2>/dev/null || { cat "$OUT/serve.log"; exit 1; }
  sleep 1
done

$TC bench --url 127.0.0.1:8001 --repo "$OUT/repo" --spec "$SPEC" --cell "$CELL" \
  --concurrency 1,8,32 --requests 64 --input-tokens normal:1024:256 --output-tokens 256 \
  --metrics-url http://127.0.0.1:8002/metrics --save "$OUT/bench.json"
$TC bench --url 127.0.0.1:8001 --repo "$OUT/repo" --shared-prefix 4:1024:0.8 --input-tokens 128 \
  --output-tokens 64 --concurrency 8 --requests 64 --metrics-url http://127.0.0.1:8002/metrics --save "$OUT/prefix.json"
$TC diagnose --metrics-url http://127.0.0.1:8002/metrics --bench "$OUT/bench.json"
$TC bench report "$OUT/bench.json" "$OUT/prefix.json" --out "$OUT/report"

python3 - "$OUT/plan.json" "$OUT/bench.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))["cells"][0]
bench = json.load(open(sys.argv[2]))
print(f"{'load':<16}{'TPOT p50 ms':>12}{'floor ms':>10}{'x floor':>9}")
for run in bench["runs"]:
    t = (run["summary"].get("tpot_ms") or {}).get("p50")
    floor = plan["tpot_floor_b1_ms"]
    print(f"{run['label']:<16}{t or float('nan'):>12.2f}{floor:>10.2f}{(t or 0) / floor:>9.2f}")
PY
