#!/usr/bin/env bash
# Create .venv (Python 3.11) with the toolchain and every extra: ModelOpt on CPU, Triton 2.51 from
# nvidia-pytriton, tritonclient, boto3/moto, test tools and validators (actionlint, check-jsonschema, hadolint;
# checkov in .venv-tools; Debian's shellcheck). Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "setup: $PY not found; set PYTHON=/path/to/python3.11 (3.10-3.12 work; 3.11 matches Triton's stub)" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# NVIDIA Dynamo in its own venv (.venv-dynamo): its pins clash with the toolchain's; checks itself
PYTHON="$PY" scripts/setup-dynamo.sh || echo "setup: NVIDIA Dynamo could not be installed; the Dynamo commands exit 3 and their tests fail" >&2
# NVIDIA AIConfigurator in its own venv (.venv-aic): the silicon estimate of `toolchain plan`; checks itself
PYTHON="$PY" scripts/setup-aic.sh || echo "setup: NVIDIA AIConfigurator could not be installed; plan falls back to the roofline floor and says so" >&2
stamp=.venv/.toolchain-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x .venv-tools/bin/checkov ] \
  && command -v shellcheck >/dev/null 2>&1; then
  exit 0
fi
echo "setup: installing into .venv (first run takes a few minutes)" >&2
# shellcheck source=scripts/heartbeat.sh
. scripts/heartbeat.sh
heartbeat_start "pip installing into .venv"
# torch first and pinned: an unpinned resolve would pull a multi-GB CUDA build.
.venv/bin/pip install -q --disable-pip-version-check torch==2.13.0 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/pip install -q --disable-pip-version-check -c <(echo torch==2.13.0) -e '.[all,dev]' 2>&1 \
  | grep -v "^WARNING: Location" || true
heartbeat_stop
.venv/bin/python -c "import torch, modelopt.torch.quantization, tritonclient.grpc, pytriton, boto3, moto, jinja2, matplotlib, httpx, jsonschema, kubernetes_validate, hypothesis, oras, xdist" \
  || { echo "setup: the environment is incomplete; see pip's output above" >&2; exit 1; }
# The validators the tests run on the CI and deploy artifacts (tests/validators.py): actionlint,
# check-jsonschema and hadolint come with the dev extras; checkov gets its own venv (.venv-tools) because its
# pins would downgrade boto3 and packaging in .venv; shellcheck is Debian's.
for t in actionlint check-jsonschema hadolint; do
  [ -x ".venv/bin/$t" ] || { echo "setup: .venv/bin/$t is missing; see pip's output above" >&2; exit 1; }
done
[ -x .venv-tools/bin/python ] || "$PY" -m venv .venv-tools
heartbeat_start "pip installing checkov into .venv-tools"
.venv-tools/bin/pip install -q --disable-pip-version-check checkov==3.3.30 2>&1 | grep -v "^WARNING: Location" || true
heartbeat_stop
.venv-tools/bin/checkov --version >/dev/null 2>&1 || { echo "setup: checkov did not install into .venv-tools" >&2; exit 1; }
if ! command -v shellcheck >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing shellcheck for the CI and entrypoint tests" >&2
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck || { DEBIAN_FRONTEND=noninteractive apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck; }; } >/dev/null 2>&1 \
      || { echo "setup: could not install shellcheck (apt-get install shellcheck); the tests need it" >&2; exit 1; }
  else
    echo "setup: shellcheck is not installed and this is not root with apt-get; install it (the tests need it)" >&2
    exit 1
  fi
fi
# The HTML report test opens reports in Debian's headless chromium; install it where we can (root + apt).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium for the report test" >&2
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
      >/dev/null 2>&1 || echo "setup: could not install chromium; the HTML report test will be skipped" >&2
  else
    echo "setup: chromium is not installed (needs root + apt-get); the HTML report test will be skipped" >&2
  fi
fi
# The observability tests run Prometheus's promtool (check rules / test rules). Debian's prometheus package ships it;
# only the binary is taken out of the .deb (dpkg-deb -x), so no service is installed or started.
if ! command -v promtool >/dev/null 2>&1 && [ ! -x .venv/bin/promtool ]; then
  if command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
    echo "setup: extracting promtool from Debian's prometheus package" >&2
    tmp=$(mktemp -d)
    if { [ "$(id -u)" != 0 ] || DEBIAN_FRONTEND=noninteractive apt-get update -qq; } >/dev/null 2>&1 \
      && (cd "$tmp" && apt-get download -qq prometheus) >/dev/null 2>&1 \
      && dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x" && [ -x "$tmp/x/usr/bin/promtool" ]; then
      cp "$tmp/x/usr/bin/promtool" .venv/bin/promtool
    else
      echo "setup: could not get promtool; the observability tests will be skipped" >&2
    fi
    rm -rf "$tmp"
  else
    echo "setup: promtool is not installed (needs apt-get + dpkg-deb); the observability tests will be skipped" >&2
  fi
fi
# The OCI registry tests start CNCF distribution (Debian's docker-registry) on 127.0.0.1 themselves; the
# package's own system service is never used (policy-rc.d or no init keeps it from starting here).
if ! command -v docker-registry >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing docker-registry for the OCI registry tests" >&2
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-registry; } \
      >/dev/null 2>&1 || echo "setup: could not install docker-registry; the OCI registry tests will fail" >&2
  else
    echo "setup: docker-registry is not installed (needs root + apt-get); the OCI registry tests will fail" >&2
  fi
  # where an init system did start the package's service, stop it: the tests run their own registry
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet docker-registry 2>/dev/null; then
    systemctl disable --now docker-registry >/dev/null 2>&1 || true
  fi
fi
echo "$want" > "$stamp"
