#!/usr/bin/env bash
# One CI job inside NVIDIA's TensorRT-LLM/Triton container (GitHub Actions and GitLab CI run the same script).
#
# usage: scripts/ci-gpu-job.sh check | quantize SPEC | build SPEC CELL
#
# It runs the toolchain with the container's own Python and its TensorRT-LLM: the toolchain is installed
# into that interpreter with the image's packages as constraints (nothing the image ships is replaced),
# never into a separate venv that would hide `tensorrt_llm`. Logs go to $TOOLCHAIN_CACHE/logs, by default
# .toolchain-cache/logs in the checkout, which is where the CI definitions upload them from.
#
# environment: TOOLCHAIN_REGISTRY (required: the shared registry; a runner-local one would lose the engine),
#              PYTHON (the container's interpreter, default python3), TOOLCHAIN_CACHE (default .toolchain-cache),
#              registry credentials as the CI passes them (README "CI credentials"): AWS_* / HF_TOKEN, or
#              AWS_ROLE_ARN + the job's OIDC token AWS_ID_TOKEN (see scripts/ci-aws-web-identity.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/ci-aws-web-identity.sh
. scripts/ci-aws-web-identity.sh
die() { echo "Error: $1 — $2" >&2; exit 2; }

[ -n "${TOOLCHAIN_REGISTRY:-}" ] || die "TOOLCHAIN_REGISTRY is empty" \
  "set the CI variable to the shared registry (s3://bucket/prefix, hf://org/repo or a shared path); a runner-local registry would lose every engine"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || die "no Python interpreter '$PY' in this image" "set PYTHON to the container's python"
export TOOLCHAIN_CACHE=${TOOLCHAIN_CACHE:-$PWD/.toolchain-cache}
mkdir -p "$TOOLCHAIN_CACHE/logs"

if ! "$PY" -c "import toolchain.cli.main" 2>/dev/null; then
  echo "ci-gpu-job: installing the toolchain into $("$PY" -c 'import sys; print(sys.executable)') (image packages pinned)" >&2
  constraints=$(mktemp)
  "$PY" -m pip list --format=freeze 2>/dev/null | grep -v '^toolchain==' > "$constraints" || true
  PIP_BREAK_SYSTEM_PACKAGES=1 "$PY" -m pip install -q --disable-pip-version-check -c "$constraints" -e '.[s3,hf,gpu]'
fi
llm=$("$PY" -c 'import tensorrt_llm; print(tensorrt_llm.__version__)' 2>/dev/null | tail -1) \
  || die "this interpreter ($PY) cannot import tensorrt_llm" "run the job in nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3, or set PYTHON to its python"
echo "ci-gpu-job: $("$PY" -c 'import sys; print(sys.executable)') with TensorRT-LLM $llm; logs in $TOOLCHAIN_CACHE/logs" >&2
tc() { "$PY" -m toolchain.cli.main "$@"; }

case "${1:-}" in
  check) ;;
  quantize) [ $# -eq 2 ] || die "usage: quantize SPEC" "see the header of $0"
            tc quantize "$2" --device cuda --registry "$TOOLCHAIN_REGISTRY" ;;
  build) [ $# -eq 3 ] || die "usage: build SPEC CELL" "see the header of $0"
         tc build "$2" --cell "$3" --registry "$TOOLCHAIN_REGISTRY" ;;
  *) die "unknown job '${1:-}'" "use check, quantize SPEC or build SPEC CELL" ;;
esac
