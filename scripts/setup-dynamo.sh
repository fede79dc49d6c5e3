#!/usr/bin/env bash
# Create .venv-dynamo: NVIDIA Dynamo 1.6.1 (frontend, KV router, mocker) for `toolchain dynamo up` and its tests.
# Its own venv: ai-dynamo's pins (transformers, pydantic, kubernetes<33) are not the toolchain's.
# `ai-dynamo` hard-requires `aisimulate`, whose PyPI release is a placeholder that downloads from NVIDIA's own
# index; the frontend, router and mocker never import it (only the AI-simulator timing models do), so the
# runtime wheel and every other Requires-Dist of ai-dynamo 1.6.1 are installed, then ai-dynamo itself --no-deps.
# Idempotent: a second run only checks. Set DYNAMO_SKIP=1 to skip it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${DYNAMO_SKIP:-}" = 1 ] && exit 0
PY=${PYTHON:-python3.11}
VENV=.venv-dynamo
stamp=$VENV/.dynamo-setup
want=$(sha256sum scripts/setup-dynamo.sh | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "setup: installing NVIDIA Dynamo 1.6.1 into $VENV (about a minute)" >&2
[ -x $VENV/bin/python ] || "$PY" -m venv $VENV
# shellcheck source=scripts/heartbeat.sh
. "$(dirname "$0")/heartbeat.sh"
heartbeat_start "pip installing NVIDIA Dynamo into $VENV"
pip=("$VENV/bin/pip" install -q --disable-pip-version-check)
# ai-dynamo 1.6.1's Requires-Dist, less aisimulate (read from the wheel's METADATA)
"${pip[@]}" ai-dynamo-runtime==1.6.1 'aiohttp>=3.14.3,<4.0' 'certifi>=2026.10.19' 'kubernetes>=32.0.1,<33.0.0' \
  'msgspec>=0.19.0' 'prometheus-client>=0.23.1,<1.0' 'pyzmq>=26.0.0' 'redis>=6.2.0,<9.0.0' 'tqdm>=4.0.0' \
  'transformers>=4.56.0' 'typing-extensions>=4.10.0' 'zstandard>=0.23,<1.0' 2>&1 | grep -v "^WARNING: Location" || true
"${pip[@]}" --no-deps ai-dynamo==1.6.1 2>&1 | grep -v "^WARNING: Location" || true
heartbeat_stop
$VENV/bin/python -c "import dynamo.frontend, dynamo.mocker, dynamo.llm, zmq" \
  || { echo "setup: the Dynamo environment is incomplete; see pip's output above" >&2; exit 1; }
echo "$want" > "$stamp"
