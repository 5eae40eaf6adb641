# The Lambda functions end to end, for scripts/test (sourced, not executed; needs
# scripts/lib/common.sh and scripts/lib/moto.sh first).
#
# `run_lambda_e2e` builds the four function binaries, then starts — each on a free loopback port,
# each stopped whatever happens — a moto server (DynamoDB, EventBridge), the SageMaker emulator
# (`trainyard emulator`) and `cargo lambda watch` serving the functions, and runs
# tests/e2e/tests/lambda_watch.rs against them. cargo-lambda comes from PyPI, pinned in
# functions/requirements.txt, in a virtualenv of its own (rebuilt only when that file changes);
# moto comes from the conformance virtualenv. Uses ROOT, PYTHON, VENV, TARGET_DIR and WORK_DIR
# when scripts/test set them.

LAMBDA_WATCH_PID=""
LAMBDA_WATCH_URL=""
EMULATOR_PID=""
EMULATOR_URL=""

# The functions, by binary name (functions/<name>, SAM's CodeUri).
LAMBDA_FUNCTIONS=(api scheduler training-events retry)

# lambda_venv VENV — builds VENV from functions/requirements.txt unless its stamp is current.
lambda_venv() {
  make_venv "$1" "$ROOT/functions/requirements.txt"
}

# build_functions [CARGO_ARGS...] — builds each function binary the way `cargo lambda watch`
# runs it (`cargo run --bin NAME`: features resolved for that binary alone), so the watch
# server's first invocation finds them fresh instead of compiling.
build_functions() {
  local name
  for name in "${LAMBDA_FUNCTIONS[@]}"; do
    cargo build --locked --manifest-path "$ROOT/Cargo.toml" --bin "$name" "$@" || return 1
  done
}

# free_port — a free loopback port (the kernel's choice; bound a moment later by the server).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# start_emulator BIN LOG [DEADLINE_S] — `BIN emulator` on 127.0.0.1:0; sets EMULATOR_PID and
# EMULATOR_URL from the address it prints.
start_emulator() {
  local bin=$1 log=$2 deadline_s=${3:-30}
  "$bin" emulator --listen 127.0.0.1:0 </dev/null >"$log" 2>&1 &
  EMULATOR_PID=$!
  local start url
  start=$(date +%s)
  while [ $(( $(date +%s) - start )) -lt "$deadline_s" ]; do
    if ! kill -0 "$EMULATOR_PID" 2>/dev/null; then
      echo "the emulator exited early; its log:" >&2
      tail -n 20 "$log" >&2
      EMULATOR_PID=""
      return 1
    fi
    url=$(grep -oE 'http://127\.0\.0\.1:[0-9]+' "$log" 2>/dev/null | head -n 1 || true)
    if [ -n "$url" ]; then
      EMULATOR_URL=$url
      return 0
    fi
    sleep 0.2
  done
  echo "the emulator printed no address within ${deadline_s}s" >&2
  stop_pid "$EMULATOR_PID"
  EMULATOR_PID=""
  return 1
}

# start_lambda_watch VENV LOG [DEADLINE_S] — `cargo lambda watch` on a free loopback port, in a
# process group of its own (it starts `cargo run` and the function processes beneath it, and
# stop_lambda_watch must reach them all); sets LAMBDA_WATCH_PID and LAMBDA_WATCH_URL once it
# answers HTTP. The functions inherit this shell's environment.
start_lambda_watch() {
  local venv=$1 log=$2 deadline_s=${3:-60} port
  port=$(free_port) || return 1
  (cd "$ROOT" && PATH="$venv/bin:$PATH" exec setsid "$venv/bin/cargo-lambda" lambda watch \
    --invoke-address 127.0.0.1 --invoke-port "$port" --ignore-changes --quiet \
    </dev/null >"$log" 2>&1) &
  LAMBDA_WATCH_PID=$!
  local start
  start=$(date +%s)
  while [ $(( $(date +%s) - start )) -lt "$deadline_s" ]; do
    if ! kill -0 "$LAMBDA_WATCH_PID" 2>/dev/null; then
      echo "cargo lambda watch exited early; its log:" >&2
      tail -n 40 "$log" >&2
      LAMBDA_WATCH_PID=""
      return 1
    fi
    if python3 - "http://127.0.0.1:$port/" <<'PY' >/dev/null 2>&1
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError:
    pass
PY
    then
      LAMBDA_WATCH_URL="http://127.0.0.1:$port"
      return 0
    fi
    sleep 0.2
  done
  echo "cargo lambda watch did not answer within ${deadline_s}s; its log:" >&2
  tail -n 40 "$log" >&2
  stop_lambda_watch
  return 1
}

# stop_pid PID — SIGTERM, up to 10 s, then SIGKILL; only that pid.
stop_pid() {
  local pid=$1 i
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# Stops the watch server and the processes it started: its own process group (setsid made
# its pid the group id), so nothing else is touched.
stop_lambda_watch() {
  local pid=$LAMBDA_WATCH_PID i
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
      kill -0 -- "-$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  LAMBDA_WATCH_PID=""
  LAMBDA_WATCH_URL=""
}

stop_lambda_stand() {
  stop_lambda_watch
  stop_pid "$EMULATOR_PID"
  EMULATOR_PID=""
  EMULATOR_URL=""
  stop_moto
}

# run_lambda_e2e — the phase. Returns the test's status (1 if the stand did not start).
run_lambda_e2e() {
  local target_dir=${TARGET_DIR:-$(cargo_target_dir)}
  local venv=${VENV:-$target_dir/conformance-venv}
  local lambda_venv_dir=${TRAINYARD_LAMBDA_VENV:-$target_dir/lambda-venv}
  local log_dir=${WORK_DIR:-${TMPDIR:-/tmp}}
  lambda_venv "$lambda_venv_dir" || return 1
  echo "+ building the functions, the emulator and the test"
  cargo build --locked -p trainyard-cli || return 1
  build_functions || return 1
  cargo test --locked -p trainyard-e2e --features lambda-e2e --no-run || return 1

  local rc=0
  # In a subshell, so its EXIT trap stops exactly the servers it started, however it ends.
  (
    set -e
    trap stop_lambda_stand EXIT
    trap 'exit 130' INT TERM
    export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
    export AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
    start_moto "$venv" "$log_dir/lambda-moto.log" 30
    start_emulator "$target_dir/debug/trainyard" "$log_dir/lambda-emulator.log" 30
    export AWS_ENDPOINT_URL_DYNAMODB=$MOTO_URL AWS_ENDPOINT_URL_EVENTBRIDGE=$MOTO_URL
    export AWS_ENDPOINT_URL_SAGEMAKER=$EMULATOR_URL
    # The functions' configuration (the SAM template's Globals), and short backoffs so the
    # retry case takes a second, not a minute.
    export TRAINYARD_TABLE=trainyard-e2e TRAINYARD_EVENT_BUS=trainyard-e2e
    export TRAINYARD_TRAINING_ROLE_ARNS=arn:aws:iam::123456789012:role/SageMakerRole
    export TRAINYARD_INITIAL_ENVIRONMENT=default TRAINYARD_INITIAL_MAX_INSTANCES=4
    export TRAINYARD_INITIAL_QUEUE=default TRAINYARD_INITIAL_QUEUE_PRIORITY=1
    export TRAINYARD_BACKOFF_SCALE=0.01 RUST_LOG=info
    start_lambda_watch "$lambda_venv_dir" "$log_dir/lambda-watch.log" 60
    echo "moto $MOTO_URL, emulator $EMULATOR_URL, cargo lambda watch $LAMBDA_WATCH_URL"
    status=0
    TRAINYARD_E2E_LAMBDA=$LAMBDA_WATCH_URL timeout 300 \
      cargo test --locked -p trainyard-e2e --features lambda-e2e --test lambda_watch \
      -- --nocapture || status=$?
    if [ "$status" -ne 0 ]; then
      echo "last lines of the cargo lambda watch log (function logs included):" >&2
      tail -n 40 "$log_dir/lambda-watch.log" >&2 || true
    fi
    exit "$status"
  ) || rc=$?
  return "$rc"
}
