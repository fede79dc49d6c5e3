#!/bin/sh
# Container entrypoint written by `toolchain deploy` (docs/deploy.md): pull the engine by key from the
# registry (only the manifest deployed, when ENGINE_DIGEST is set), verify every file's digest, check the model
# repository was made for that engine, then start the server. Any failure exits non-zero before a port is
# opened, so the pod never turns ready on a bad engine.
#
# Environment (set by the manifests; registry credentials come from a Secret through envFrom):
#   TOOLCHAIN_REGISTRY  s3://bucket/prefix, hf://org/repo, oci://host/repository, or a directory on a mounted
#                       volume (oci://: TOOLCHAIN_OCI_USERNAME/PASSWORD and, for a registry without TLS,
#                       TOOLCHAIN_OCI_PLAIN_HTTP=1 come from the Secret too)
#   ENGINE_KEY          the registry entry to serve (full key)
#   ENGINE_DIGEST       sha256:... of the entry's manifest as deployed: the pull refuses any other (`cache pull
#                       --digest`, exit 6); unset, whatever manifest the key names at start is pulled
#   ENGINES_ROOT        where engines are restored (an emptyDir); the repository points under it
#   TOOLCHAIN_MODEL_REPOSITORY, TOOLCHAIN_TOKENIZER, TOOLCHAIN_WORLD_SIZE (TP x PP), READY_TIMEOUT (s)
#   TOOLCHAIN_FRONTEND  openai: Triton's OpenAI frontend (+ KServe HTTP/gRPC) | kserve: tritonserver |
#                       trtllm-serve: the LLM API's OpenAI server (runtime pytorch; TOOLCHAIN_TP, TOOLCHAIN_PP)
#   SERVE_HOST, HTTP_PORT, GRPC_PORT, METRICS_PORT, OPENAI_PORT, TOOLCHAIN_PYTHON (default python3)
#   leader of a LeaderWorkerSet group: GROUP_KEY, POD_NAMESPACE, TOOLCHAIN_NODES, TOOLCHAIN_GPUS_PER_NODE
# Argument: the role — server (default), leader or worker.
set -eu

ROLE="${1:-server}"
ROOT_DIR=$(cd "$(dirname "$0")" && pwd)
PY="${TOOLCHAIN_PYTHON:-python3}"
REPO="${TOOLCHAIN_MODEL_REPOSITORY:-/opt/toolchain/model_repository}"
TOKENIZER="${TOOLCHAIN_TOKENIZER:-$REPO/preprocessing/tokenizer}"
ROOT="${ENGINES_ROOT:-/engines}"
WORLD="${TOOLCHAIN_WORLD_SIZE:-1}"
FRONTEND="${TOOLCHAIN_FRONTEND:-kserve}"
HOST="${SERVE_HOST:-0.0.0.0}"
HTTP_PORT="${HTTP_PORT:-8000}"
GRPC_PORT="${GRPC_PORT:-8001}"
METRICS_PORT="${METRICS_PORT:-8002}"
OPENAI_PORT="${OPENAI_PORT:-9000}"
READY_TIMEOUT="${READY_TIMEOUT:-600}"
TRITON_BIN=/opt/tritonserver/bin/tritonserver
OPENAI_MAIN=/opt/tritonserver/python/openai/openai_frontend/main.py

fail() {
    printf 'Error: %s\n' "$*" >&2
    exit 1
}
say() { printf 'entrypoint: %s\n' "$*" >&2; }

[ -n "${ENGINE_KEY:-}" ] || fail "ENGINE_KEY is not set — set it to the registry key the deployment serves"
[ -n "${TOOLCHAIN_REGISTRY:-}" ] || fail "TOOLCHAIN_REGISTRY is not set — set it to s3://..., hf://..., oci://... or a mounted directory"
if [ "$FRONTEND" != trtllm-serve ]; then
    [ -f "$REPO/toolchain-repo.json" ] ||
        fail "no model repository at $REPO — rebuild the image from \`toolchain deploy\` output"
    # 1. the repository must have been made for this engine
    made_for=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("engine_key") or "")' \
        "$REPO/toolchain-repo.json") || fail "cannot read $REPO/toolchain-repo.json"
    [ "$made_for" = "$ENGINE_KEY" ] ||
        fail "the model repository was made for engine ${made_for:-none}, not $ENGINE_KEY — redeploy with \`toolchain deploy\`"
fi

# 2. pull and verify (the registry checks every file's digest; a corrupt entry is refused)
dest="$ROOT/$ENGINE_KEY"
ready="$ROOT/.ready-$ENGINE_KEY" # written once the engine is pulled, verified and linted: a group's leader waits for it
rm -f "$ready"
rm -rf "$dest"
mkdir -p "$ROOT"
set -- cache pull "$ENGINE_KEY" "$dest" --registry "$TOOLCHAIN_REGISTRY"
if [ -n "${ENGINE_DIGEST:-}" ]; then
    set -- "$@" --digest "$ENGINE_DIGEST" # the manifest deployed, not whatever the key names now
    say "pulling $ENGINE_KEY (manifest $ENGINE_DIGEST) from $TOOLCHAIN_REGISTRY into $dest"
else
    say "pulling $ENGINE_KEY from $TOOLCHAIN_REGISTRY into $dest (no ENGINE_DIGEST: any manifest of the key)"
fi
"$PY" -m toolchain.cli.main "$@" ||
    fail "engine $ENGINE_KEY could not be pulled and verified from $TOOLCHAIN_REGISTRY; not serving"
if [ "$FRONTEND" = trtllm-serve ]; then
    # runtime pytorch: the artifact is the LLM-API checkpoint (hf/) and its options; trtllm-serve is the
    # OpenAI server and starts its own workers for TP x PP on this node
    if [ ! -f "$dest/hf/config.json" ] || [ ! -f "$dest/extra_llm_api_options.yaml" ]; then
        fail "entry $ENGINE_KEY is not an LLM-API artifact (hf/ + extra_llm_api_options.yaml); not serving"
    fi
    # the warm-start bundle's caches, only when it was made on this GPU with this TensorRT-LLM (one warning
    # and a cold start otherwise): TensorRT-LLM loads an autotuner file without checking either
    bundle_env=$("$PY" -m toolchain.artifacts.bundle "$dest") || fail "the bundle in $dest could not be checked"
    eval "$bundle_env"
    set -- trtllm-serve "$dest/hf" --backend pytorch --tp_size "${TOOLCHAIN_TP:-1}" --pp_size "${TOOLCHAIN_PP:-1}" \
        --extra_llm_api_options "$dest/extra_llm_api_options.yaml" --host "$HOST" --port "$HTTP_PORT"
    say "starting: $*"
    cd "$dest" # the options name the artifact's own draft/ and lora/ relative to it
    exec "$@"
fi
"$PY" -m toolchain.cli.main triton lint "$REPO" --world-size "$WORLD" ||
    fail "the model repository does not agree with engine $ENGINE_KEY; not serving"
touch "$ready"

# 3. serve. Roles: server (one pod holds every rank), leader / worker (a LeaderWorkerSet group, one pod per node)
case "$ROLE" in
server | leader) ;;
worker)
    # the leader's mpirun starts this pod's ranks through kubectl exec (kubessh); keep the engine and wait
    say "worker ready: engine $ENGINE_KEY restored; ranks are started by the group's leader"
    trap 'exit 0' TERM INT
    while :; do
        sleep 3600 &
        wait $! || true
    done
    ;;
*) fail "role '$ROLE' is not server, leader or worker" ;;
esac

rank0() {
    case "$FRONTEND" in
    openai)
        [ -f "$OPENAI_MAIN" ] ||
            fail "this image has no Triton OpenAI frontend at $OPENAI_MAIN — use TOOLCHAIN_FRONTEND=kserve"
        # the in-process Triton gets the latency metrics of toolchain/triton/metrics_config.py
        set -- "$PY" -m toolchain.triton.metrics_config "$OPENAI_MAIN" \
            --model-repository "$REPO" --tokenizer "$TOKENIZER" --backend tensorrtllm \
            --host "$HOST" --openai-port "$OPENAI_PORT" \
            --enable-kserve-frontends --kserve-http-port "$HTTP_PORT" --kserve-grpc-port "$GRPC_PORT"
        ;;
    kserve)
        set -- "$TRITON_BIN" "--model-repository=$REPO" "--http-address=$HOST" "--http-port=$HTTP_PORT" \
            "--grpc-address=$HOST" "--grpc-port=$GRPC_PORT" "--metrics-address=$HOST" "--metrics-port=$METRICS_PORT" \
            --disable-auto-complete-config "--backend-config=python,shm-region-prefix-name=rank0_" \
            --metrics-config=summary_latencies=true --metrics-config=histogram_latencies=true
        ;;
    *) fail "TOOLCHAIN_FRONTEND=$FRONTEND is not openai or kserve" ;;
    esac
    for a in "$@"; do printf '%s\n' "$a"; done
}

if [ "$ROLE" = server ] && [ "$FRONTEND" = kserve ]; then
    # one tritonserver, or mpirun with one tritonserver per rank when TP x PP > 1
    exec "$PY" -m toolchain.cli.main serve "$REPO" --host "$HOST" --http-port "$HTTP_PORT" \
        --grpc-port "$GRPC_PORT" --metrics-port "$METRICS_PORT" --ready-timeout "$READY_TIMEOUT" --world-size "$WORLD"
fi

# rank 0 serves (the OpenAI frontend's in-process server, or tritonserver); ranks 1.. load only tensorrt_llm
args_file=$(mktemp)
rank0 >"$args_file" || exit 1
set --
while IFS= read -r a; do set -- "$@" "$a"; done <"$args_file"
rm -f "$args_file"
if [ "$WORLD" -gt 1 ] || [ "$ROLE" = leader ]; then
    launch="mpirun --allow-run-as-root"
    if [ "$ROLE" = leader ]; then
        # a LeaderWorkerSet group: wait for its pods, then start ranks on each through kubectl exec
        : "${GROUP_KEY:?GROUP_KEY (the leaderworkerset.sigs.k8s.io/group-key label of the pod) is not set}"
        nodes="${TOOLCHAIN_NODES:?TOOLCHAIN_NODES is not set}"
        per_node="${TOOLCHAIN_GPUS_PER_NODE:?TOOLCHAIN_GPUS_PER_NODE is not set}"
        waited=0
        while :; do
            pods=$(kubectl get pods -n "${POD_NAMESPACE:-default}" \
                -l "leaderworkerset.sigs.k8s.io/group-key=$GROUP_KEY" --field-selector status.phase=Running \
                -o 'jsonpath={.items[*].metadata.name}') || fail "kubectl cannot list the group's pods (RBAC?)"
            count=$(printf '%s\n' "$pods" | tr ' ' '\n' | grep -c .) || true
            [ "$count" -ge "$nodes" ] && break
            [ "$waited" -ge "$READY_TIMEOUT" ] && fail "only $count of $nodes pods of group $GROUP_KEY are running"
            say "waiting for the group: $count of $nodes pods running"
            sleep 5
            waited=$((waited + 5))
        done
        # Running is not ready: each pod restores the engine first (minutes for a large one)
        for pod in $pods; do
            until kubectl exec -n "${POD_NAMESPACE:-default}" "$pod" -c server -- test -f "$ready" >/dev/null 2>&1; do
                [ "$waited" -ge "$READY_TIMEOUT" ] &&
                    fail "pod $pod has not restored engine $ENGINE_KEY after ${waited}s; not starting the ranks"
                say "waiting for pod $pod to restore engine $ENGINE_KEY"
                sleep 5
                waited=$((waited + 5))
            done
        done
        hosts=$(printf '%s\n' "$pods" | tr ' ' '\n' | sort | sed "s/\$/:$per_node/" | paste -sd, -)
        launch="$launch -mca plm_rsh_agent ${ROOT_DIR}/kubessh --host $hosts"
    fi
    # shellcheck disable=SC2086 # $launch is the word list built above (mpirun and its options), split on purpose
    set -- $launch -x LD_LIBRARY_PATH -n 1 "$@"
    rank=1
    while [ "$rank" -lt "$WORLD" ]; do
        set -- "$@" : -n 1 "$TRITON_BIN" "--model-repository=$REPO" --model-control-mode=explicit \
            --load-model=tensorrt_llm --disable-auto-complete-config --allow-http=false --allow-grpc=false \
            --allow-metrics=false "--backend-config=python,shm-region-prefix-name=rank${rank}_"
        rank=$((rank + 1))
    done
fi
say "starting: $*"
exec "$@"
