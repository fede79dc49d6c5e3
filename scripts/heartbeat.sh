# shellcheck shell=bash
# Sourced by the set-up scripts: while a long step runs (pip installing for minutes), a line on stderr every
# few seconds says what it waits on and for how long — every 5 s on a terminal, every 30 s in a log
# (SETUP_PROGRESS_EVERY overrides). The beat stops with the step, and with the script if it is killed.
heartbeat_start() {
  local what=$1 every=${SETUP_PROGRESS_EVERY:-30} parent=$$
  if [ -z "${SETUP_PROGRESS_EVERY:-}" ] && [ -t 2 ]; then every=5; fi
  heartbeat_stop
  (
    start=$(date +%s)
    while sleep "$every" && kill -0 "$parent" 2>/dev/null; do
      echo "setup: $what: $(($(date +%s) - start)) s so far" >&2
    done
  ) &
  HEARTBEAT_PID=$!
}
heartbeat_stop() {
  if [ -n "${HEARTBEAT_PID:-}" ]; then
    kill "$HEARTBEAT_PID" 2>/dev/null || true
    wait "$HEARTBEAT_PID" 2>/dev/null || true
  fi
  HEARTBEAT_PID=
}
trap heartbeat_stop EXIT
