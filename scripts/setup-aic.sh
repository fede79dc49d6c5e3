#!/usr/bin/env bash
# NVIDIA AIConfigurator 0.12.0 (its measured per-kernel database) in its own venv, .venv-aic: its pins are not the
# toolchain's. `toolchain plan --estimator aic|auto` runs it as a subprocess. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
want="aiconfigurator==0.12.0 aiconfigurator-core==0.12.0"
if [ -x .venv-aic/bin/python ] && .venv-aic/bin/python -c "import importlib.metadata as m; assert m.version('aiconfigurator') == '0.12.0'" 2>/dev/null; then
  exit 0
fi
echo "setup: installing NVIDIA AIConfigurator 0.12.0 into .venv-aic (about a minute)" >&2
[ -x .venv-aic/bin/python ] || "$PY" -m venv .venv-aic
# shellcheck disable=SC2086
.venv-aic/bin/pip install -q --disable-pip-version-check $want 2>&1 | grep -v "^WARNING: Location" || true
.venv-aic/bin/python -c "from aiconfigurator.cli.api import cli_estimate" 2>/dev/null \
  || { echo "setup: AIConfigurator did not install into .venv-aic" >&2; exit 1; }
