# moto helpers for scripts/test (sourced, not executed; needs scripts/lib/common.sh first).
#
# `run_dynamodb_contract` starts the AWS stand (tests/stand/aws_stand.py: moto in-process, behind
# a layer that makes DynamoDB fail as DynamoDB does) from the conformance virtualenv on a free
# loopback port, runs the AWS adapters' moto tests against it (the DynamoDB store's contract under
# faults; its units per job, the EventBridge sink and the S3 checkpoint reader without), and
# stops it, whatever happened.
# `start_moto` (a bare moto server) is for scripts that want moto alone.
# Nothing is installed here: moto is pinned in tests/conformance/requirements.txt, which
# scripts/test's `python_env` phase installs. Uses VENV and WORK_DIR when scripts/test set them.

MOTO_PID=""
MOTO_URL=""
MOTO_SAVED_EXIT_TRAP=""

# start_moto VENV LOG [DEADLINE_S] — starts `moto_server` on 127.0.0.1 on a free port, waits
# until it answers HTTP, and sets MOTO_PID and MOTO_URL. Fails (after stopping it) otherwise.
start_moto() {
  local venv=$1 log=$2 deadline_s=${3:-30}
  if [ ! -x "$venv/bin/moto_server" ]; then
    echo "no moto_server in $venv: build the virtualenv from tests/conformance/requirements.txt" >&2
    return 1
  fi
  local port
  # Ask the kernel for a free port; moto binds it a moment later (a race only with other
  # processes binding random ports in between, which would show up as a start failure).
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()') || return 1
  "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" </dev/null >"$log" 2>&1 &
  MOTO_PID=$!
  local start
  start=$(date +%s)
  while [ $(( $(date +%s) - start )) -lt "$deadline_s" ]; do
    if ! kill -0 "$MOTO_PID" 2>/dev/null; then
      echo "moto_server exited early; its log:" >&2
      tail -n 40 "$log" >&2
      MOTO_PID=""
      return 1
    fi
    if probe_moto "http://127.0.0.1:$port"; then
      MOTO_URL="http://127.0.0.1:$port"
      return 0
    fi
    sleep 0.2
  done
  echo "moto_server did not answer within ${deadline_s}s; its log:" >&2
  tail -n 40 "$log" >&2
  stop_moto
  return 1
}

# probe_moto URL — true when moto's own API answers (any HTTP status means it is up).
probe_moto() {
  python3 - "$1" <<'PY' >/dev/null 2>&1
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1] + "/moto-api/", timeout=2)
except urllib.error.HTTPError:
    pass
PY
}

# Stops the moto server this script started (by pid only), waiting up to 10 s before SIGKILL.
stop_moto() {
  if [ -n "$MOTO_PID" ] && kill -0 "$MOTO_PID" 2>/dev/null; then
    kill -TERM "$MOTO_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 50); do
      kill -0 "$MOTO_PID" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$MOTO_PID" 2>/dev/null || true
    wait "$MOTO_PID" 2>/dev/null || true
  fi
  MOTO_PID=""
  MOTO_URL=""
}

# Runs the EXIT trap that was in force before run_dynamodb_contract replaced it.
_moto_previous_exit_trap() {
  [ -n "$MOTO_SAVED_EXIT_TRAP" ] || return 0
  # `trap -p` prints `trap -- 'COMMAND' EXIT`, quoted for the shell: let the shell unquote it.
  eval "set -- $MOTO_SAVED_EXIT_TRAP"
  eval "$3"
}

# The DynamoDB faults the store contract runs under: throttles and 500s that the SDK retries,
# writes that meet a transaction in progress (the store sends them again after a pause), and
# writes applied with their answer lost (the retry then meets its own write), and batch reads
# answered for part of their keys (the store asks again for the rest after a pause). Seeded;
# only on a request's first attempt, so a retry gets through.
CONTRACT_FAULTS='{"seed": 12, "throttle": 0.05, "internal": 0.05, "conflict": 0.05, "lost": 0.05, "unprocessed": 0.3}'

# run_dynamodb_contract — the phase: the AWS stand up (moto in-process, behind its fault layer;
# tests/stand/aws_stand.py), the DynamoDB contract under CONTRACT_FAULTS, then the unit counts
# and the EventBridge sink with the faults off (a retry is billed again), the stand down.
# Returns cargo's first failing status (or 1 if the stand did not start).
run_dynamodb_contract() {
  local venv=${VENV:-$(cargo_target_dir)/conformance-venv}
  local log_dir=${WORK_DIR:-${TMPDIR:-/tmp}}
  # Stop the stand even if the script exits mid-test (Ctrl-C, `set -e`); chain the caller's trap.
  MOTO_SAVED_EXIT_TRAP=$(trap -p EXIT)
  trap 'stop_moto; _moto_previous_exit_trap' EXIT
  local rc=0
  if start_fault_stand "$venv" "$log_dir/moto.log" "$CONTRACT_FAULTS"; then
    echo "the AWS stand is serving at $MOTO_URL (pid $MOTO_PID), DynamoDB faults $CONTRACT_FAULTS"
    # The stand serves DynamoDB, EventBridge and SQS on one endpoint.
    (export_stand_env && cargo test -p trainyard-aws --features moto-tests --locked \
      --test dynamodb_contract -- --nocapture) || rc=$?
    echo "faults injected: $(python3 -c 'import json,sys,urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1] + "/_stand/audit"))["faults"]["injected"])' "$MOTO_URL")"
    python3 -c 'import sys,urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/_stand/faults", data=b"{}", method="POST"))' "$MOTO_URL" || rc=1
    (export_stand_env && cargo test -p trainyard-aws --features moto-tests --locked \
      --test dynamodb_units --test eventbridge --test s3_checkpoints --test s3_decisions \
      -- --nocapture) || { [ "$rc" -ne 0 ] || rc=$?; }
  else
    rc=1
  fi
  stop_moto
  if [ -n "$MOTO_SAVED_EXIT_TRAP" ]; then
    eval "$MOTO_SAVED_EXIT_TRAP"
  else
    trap - EXIT
  fi
  MOTO_SAVED_EXIT_TRAP=""
  return "$rc"
}

# export_stand_env — the environment the moto tests read: the endpoint and the root key.
export_stand_env() {
  export AWS_ENDPOINT_URL=$MOTO_URL AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
  export AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
}

# start_fault_stand VENV LOG FAULTS — tests/stand/aws_stand.py on a free loopback port with the
# DynamoDB faults FAULTS (JSON) and no SageMaker; sets MOTO_PID and MOTO_URL, as start_moto does.
start_fault_stand() {
  local venv=$1 log=$2 faults=$3 port start
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()') || return 1
  "$venv/bin/python" "$ROOT/tests/stand/aws_stand.py" --listen "127.0.0.1:$port" \
    --faults "$faults" </dev/null >"$log" 2>&1 &
  MOTO_PID=$!
  start=$(date +%s)
  while [ $(( $(date +%s) - start )) -lt 30 ]; do
    if ! kill -0 "$MOTO_PID" 2>/dev/null; then
      echo "the AWS stand exited early; its log:" >&2
      tail -n 40 "$log" >&2
      MOTO_PID=""
      return 1
    fi
    if grep -q "aws stand listening" "$log" 2>/dev/null; then
      MOTO_URL="http://127.0.0.1:$port"
      return 0
    fi
    sleep 0.2
  done
  echo "the AWS stand did not answer within 30s; its log:" >&2
  tail -n 40 "$log" >&2
  stop_moto
  return 1
}
