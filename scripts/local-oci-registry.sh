#!/bin/sh
# A local OCI registry to try `--registry oci://...` with: CNCF distribution (Debian's docker-registry,
# which scripts/setup.sh installs) on 127.0.0.1 only, plain HTTP, storage under $TOOLCHAIN_CACHE.
# It runs in the foreground; Ctrl-C stops it. Never the system service.
#
#   scripts/local-oci-registry.sh [PORT] [STORAGE_DIR]      # defaults: 5000, $TOOLCHAIN_CACHE/oci-registry
#
# Then, in another terminal:
#   export TOOLCHAIN_OCI_PLAIN_HTTP=1                       # this registry speaks plain HTTP
#   toolchain cache push DIR --registry oci://127.0.0.1:5000/llm/engines
#   toolchain cache ls --registry oci://127.0.0.1:5000/llm/engines
set -eu

port="${1:-5000}"
case "$port" in
  '' | *[!0-9]*) echo "Error: port '$port' is not a number — give a free TCP port, e.g. 5000" >&2; exit 2 ;;
esac
if [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
  echo "Error: port $port is outside 1-65535 — give a free TCP port, e.g. 5000" >&2
  exit 2
fi
cache="${TOOLCHAIN_CACHE:-${HOME}/.cache/toolchain}"
storage="${2:-${cache}/oci-registry}"
bin="$(command -v docker-registry || true)"
if [ -z "$bin" ]; then
  echo "Error: docker-registry is not installed — run scripts/setup.sh (it installs Debian's docker-registry)" >&2
  exit 3
fi
mkdir -p "$storage"
config="${storage}/config.yml"
cat > "$config" <<YAML
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: ${storage}/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:${port}
YAML
echo "local OCI registry on 127.0.0.1:${port} (storage ${storage}/data); Ctrl-C stops it"
echo "  export TOOLCHAIN_OCI_PLAIN_HTTP=1"
echo "  toolchain cache ls --registry oci://127.0.0.1:${port}/llm/engines"
exec "$bin" serve "$config"
