#!/usr/bin/env bash
# Create .venv-aic: NVIDIA AIConfigurator 0.12.0 (its measured TensorRT-LLM kernel database per GPU system) for the
# silicon estimate of `toolchain plan` (toolchain/planning/estimate.py runs it as a subprocess, offline).
# Its own venv: aiconfigurator pins numpy/pandas/pydantic/bokeh versions that are not the toolchain's.
# Idempotent: a second run only checks. Set AIC_SKIP=1 to skip it (plan then says its figures are the floor only).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${AIC_SKIP:-}" = 1 ] && exit 0
PY=${PYTHON:-python3.11}
VENV=.venv-aic
stamp=$VENV/.aic-setup
want=$(sha256sum scripts/setup-aic.sh | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "setup: installing NVIDIA AIConfigurator 0.12.0 into $VENV (about a minute)" >&2
[ -x $VENV/bin/python ] || "$PY" -m venv $VENV
# shellcheck source=scripts/heartbeat.sh
. "$(dirname "$0")/heartbeat.sh"
heartbeat_start "pip installing AIConfigurator into $VENV"
$VENV/bin/pip install -q --disable-pip-version-check aiconfigurator==0.12.0 aiconfigurator-core==0.12.0 2>&1 \
  | grep -v "^WARNING: Location" || true
heartbeat_stop
$VENV/bin/python -c "from aiconfigurator.cli.api import cli_estimate" \
  || { echo "setup: the AIConfigurator environment is incomplete; see pip's output above" >&2; exit 1; }
echo "$want" > "$stamp"
