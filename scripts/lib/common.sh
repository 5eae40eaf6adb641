# Shared helpers for scripts/test and scripts/bench-submit (sourced, not executed).
#
# Phases: `phase NAME CMD...` runs a command, prints its name and duration, and records the
# outcome for `print_summary`. Servers: `start_server BIN DATA_DIR LOG` starts `trainyard up` on
# a free loopback port and sets SERVER_PID and SERVER_URL; `stop_server` stops only that pid.

PHASE_NAMES=()
PHASE_RESULTS=()
PHASE_SECONDS=()

now_s() { date +%s.%N; }

# make_venv VENV REQUIREMENTS — builds virtualenv VENV from the pinned REQUIREMENTS file, unless
# its stamp (the file's hash and the Python version) says it is current.
make_venv() {
  local venv=$1 requirements=$2 python=${PYTHON:-python3}
  local stamp="$venv/.requirements.sha256" want
  want=$( { sha256sum "$requirements" | cut -d' ' -f1; "$python" --version 2>&1; } | sha256sum | cut -d' ' -f1)
  if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "virtualenv $venv is current"
    return 0
  fi
  echo "building virtualenv $venv from $requirements"
  # Explicit `|| return 1`: errexit does not apply inside a function called from `&&`/`||`.
  rm -rf "$venv"
  "$python" -m venv "$venv" || return 1
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    -r "$requirements" || return 1
  printf '%s\n' "$want" >"$stamp" || return 1
}

elapsed_since() { awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }'; }

# Records a phase outcome without running anything (for skipped phases).
record_phase() {
  PHASE_NAMES+=("$1")
  PHASE_RESULTS+=("$2")
  PHASE_SECONDS+=("${3:-0.0}")
}

# phase NAME CMD... — runs CMD, prints a header and the duration, records ok/FAILED.
# Returns CMD's status so callers can skip dependent phases.
phase() {
  local name=$1
  shift
  local start rc=0
  start=$(now_s)
  printf '\n==> %s\n' "$name"
  "$@" || rc=$?
  local took
  took=$(elapsed_since "$start")
  if [ "$rc" -eq 0 ]; then
    printf '<== %s ok (%ss)\n' "$name" "$took"
    record_phase "$name" ok "$took"
  else
    printf '<== %s FAILED with status %s (%ss)\n' "$name" "$rc" "$took"
    record_phase "$name" FAILED "$took"
  fi
  return "$rc"
}

# Prints one line per phase; returns 1 if any phase failed.
print_summary() {
  local i failed=0
  printf '\n==> summary\n'
  for i in "${!PHASE_NAMES[@]}"; do
    printf '  %-8s %-28s %6ss\n' "${PHASE_RESULTS[$i]}" "${PHASE_NAMES[$i]}" "${PHASE_SECONDS[$i]}"
    if [ "${PHASE_RESULTS[$i]}" = FAILED ]; then failed=1; fi
  done
  return "$failed"
}

# The cargo target directory (honours CARGO_TARGET_DIR and .cargo/config).
cargo_target_dir() {
  if [ -n "${CARGO_TARGET_DIR:-}" ]; then
    printf '%s\n' "$CARGO_TARGET_DIR"
    return
  fi
  cargo metadata --format-version 1 --no-deps 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}

SERVER_PID=""
SERVER_URL=""

# start_server BIN DATA_DIR LOG [DEADLINE_S [UP_ARGS...]] — starts `BIN up` on 127.0.0.1:0 (with
# UP_ARGS), waits until the
# printed address answers HTTP, and sets SERVER_PID and SERVER_URL. Fails (after stopping the
# server) if no address is printed or the server does not answer before the deadline.
start_server() {
  local bin=$1 data_dir=$2 log=$3 deadline_s=${4:-60}
  shift 4 2>/dev/null || shift $#
  mkdir -p "$data_dir"
  "$bin" up --listen 127.0.0.1:0 --data-dir "$data_dir" "$@" </dev/null >"$log" 2>&1 &
  SERVER_PID=$!
  local start port=""
  start=$(date +%s)
  while [ $(( $(date +%s) - start )) -lt "$deadline_s" ]; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "trainyard up exited early; its log:" >&2
      tail -n 40 "$log" >&2
      SERVER_PID=""
      return 1
    fi
    if [ -z "$port" ]; then
      # The first 127.0.0.1:PORT with a non-zero port in the log is the real listen address.
      port=$(grep -oE '127\.0\.0\.1:[0-9]+' "$log" 2>/dev/null | grep -vE ':0$' | head -n 1 | cut -d: -f2 || true)
    fi
    if [ -n "$port" ] && probe_http "http://127.0.0.1:$port"; then
      SERVER_URL="http://127.0.0.1:$port"
      return 0
    fi
    sleep 0.2
  done
  echo "trainyard up did not answer within ${deadline_s}s; its log:" >&2
  tail -n 40 "$log" >&2
  stop_server
  return 1
}

# probe_http URL — true when POST URL/v1/describejobqueues gets any HTTP answer (even an error:
# the server is up). Uses python3's standard library so nothing extra is needed.
probe_http() {
  python3 - "$1" <<'PY' >/dev/null 2>&1
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1] + "/v1/describejobqueues", data=b"{}", method="POST",
                             headers={"Content-Type": "application/json"})
try:
    urllib.request.urlopen(req, timeout=2)
except urllib.error.HTTPError:
    pass
PY
}

# Stops the server this script started (by pid only), waiting up to 10 s before SIGKILL.
stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 50); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
