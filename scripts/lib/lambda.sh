# The Lambda functions end to end, for scripts/test (sourced, not executed; needs
# scripts/lib/common.sh and scripts/lib/moto.sh first).
#
# `run_lambda_e2e` builds the four function binaries, then starts — each on a free loopback port,
# each stopped whatever happens — the SageMaker emulator (`trainyard emulator`), the AWS stand
# (tests/stand/aws_stand.py: moto's DynamoDB, EventBridge, SQS, IAM and STS, and the emulator,
# behind a gate that authorizes every call as IAM would), and one `cargo lambda watch` per
# function, started with the credentials of that function's role as infra/template.yaml defines
# it (tests/stand/deploy_stack.py); then runs tests/e2e/tests/lambda_watch.rs against them. cargo-lambda comes from PyPI, pinned in
# functions/requirements.txt, in a virtualenv of its own (rebuilt only when that file changes);
# moto comes from the conformance virtualenv. Uses ROOT, PYTHON, VENV, TARGET_DIR and WORK_DIR
# when scripts/test set them.

# One `cargo lambda watch` per function, each started with that function's role credentials
# (parallel to LAMBDA_FUNCTIONS): pids and URLs.
LAMBDA_WATCH_PIDS=()
LAMBDA_WATCH_URLS=()
LAMBDA_WATCH_URL=""
EMULATOR_PID=""
EMULATOR_URL=""
STAND_PID=""
STAND_URL=""

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

# start_announcing LOG DEADLINE_S CMD... — runs CMD in the background, output to LOG, until it
# prints its http://127.0.0.1:PORT address; sets ANNOUNCED_PID and ANNOUNCED_URL.
start_announcing() {
  local log=$1 deadline_s=$2
  shift 2
  "$@" </dev/null >"$log" 2>&1 &
  ANNOUNCED_PID=$!
  ANNOUNCED_URL=""
  local start url
  start=$(date +%s)
  while [ $(( $(date +%s) - start )) -lt "$deadline_s" ]; do
    if ! kill -0 "$ANNOUNCED_PID" 2>/dev/null; then
      echo "$1 exited early; its log:" >&2
      tail -n 20 "$log" >&2
      ANNOUNCED_PID=""
      return 1
    fi
    url=$(grep -oE 'http://127\.0\.0\.1:[0-9]+' "$log" 2>/dev/null | head -n 1 || true)
    if [ -n "$url" ]; then
      ANNOUNCED_URL=$url
      return 0
    fi
    sleep 0.2
  done
  echo "$1 printed no address within ${deadline_s}s" >&2
  stop_pid "$ANNOUNCED_PID"
  ANNOUNCED_PID=""
  return 1
}

# start_emulator BIN LOG DEADLINE_S [ARGS...] — `BIN emulator ARGS` on 127.0.0.1:0; sets
# EMULATOR_PID and EMULATOR_URL.
start_emulator() {
  local bin=$1 log=$2 deadline_s=$3
  shift 3
  start_announcing "$log" "$deadline_s" "$bin" emulator --listen 127.0.0.1:0 "$@" || return 1
  EMULATOR_PID=$ANNOUNCED_PID
  EMULATOR_URL=$ANNOUNCED_URL
}

# The DynamoDB the functions meet end to end (tests/stand/aws_stand.py's faults): indexes 300 ms
# behind the table, and on first attempts throttles, 500s and lost answers, which the SDK
# retries with its default backoff, and writes that meet a transaction in progress, which the
# store sends again after a pause.
# The bucket the e2e's jobs checkpoint into (created by the test; the stack's
# CheckpointBucketArns names it, so the scheduler may list it).
E2E_CHECKPOINT_BUCKET=trainyard-e2e-checkpoints

E2E_FAULTS='{"seed": 7, "index_lag_ms": 300, "throttle": 0.03, "internal": 0.03, "conflict": 0.15, "lost": 0.3}'

# start_stand VENV LOG [DEADLINE_S] [PORT] — tests/stand/aws_stand.py (moto in-process behind an
# IAM gate and STAND_FAULTS, default E2E_FAULTS; SageMaker forwarded to EMULATOR_URL) on
# 127.0.0.1:PORT (default 0: any); sets STAND_PID and STAND_URL.
start_stand() {
  start_announcing "$2" "${3:-30}" "$1/bin/python" "$ROOT/tests/stand/aws_stand.py" \
    --listen "127.0.0.1:${4:-0}" --sagemaker "$EMULATOR_URL" \
    --faults "${STAND_FAULTS:-$E2E_FAULTS}" || return 1
  STAND_PID=$ANNOUNCED_PID
  STAND_URL=$ANNOUNCED_URL
}

# start_lambda_watch VENV LOG [ENV_FILE] [DEADLINE_S] — `cargo lambda watch` on a free loopback
# port, in a process group of its own (it starts `cargo run` and the function processes beneath
# it, and stop_lambda_watch must reach them all), with ENV_FILE's variables added to this
# shell's environment (the functions inherit it); appends to LAMBDA_WATCH_PIDS and
# LAMBDA_WATCH_URLS and sets LAMBDA_WATCH_URL once it answers HTTP.
start_lambda_watch() {
  local venv=$1 log=$2 env_file=${3:-} deadline_s=${4:-60} port pid
  port=$(free_port) || return 1
  (cd "$ROOT" && if [ -n "$env_file" ]; then set -a && . "$env_file" && set +a; fi &&
    PATH="$venv/bin:$PATH" exec setsid "$venv/bin/cargo-lambda" lambda watch \
    --invoke-address 127.0.0.1 --invoke-port "$port" --ignore-changes --quiet \
    </dev/null >"$log" 2>&1) &
  pid=$!
  LAMBDA_WATCH_PIDS+=("$pid")
  local start
  start=$(date +%s)
  while [ $(( $(date +%s) - start )) -lt "$deadline_s" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "cargo lambda watch exited early; its log:" >&2
      tail -n 40 "$log" >&2
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
      LAMBDA_WATCH_URLS+=("$LAMBDA_WATCH_URL")
      return 0
    fi
    sleep 0.2
  done
  echo "cargo lambda watch did not answer within ${deadline_s}s; its log:" >&2
  tail -n 40 "$log" >&2
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

# stop_group PID — stops a process and everything in its process group (setsid made its pid the
# group id), so nothing else is touched.
stop_group() {
  local pid=$1 i
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do
    kill -0 -- "-$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -KILL -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# Stops every watch server started here (and LAMBDA_WATCH_PID, a caller's own).
stop_lambda_watch() {
  local pid
  for pid in "${LAMBDA_WATCH_PIDS[@]}" "${LAMBDA_WATCH_PID:-}"; do
    stop_group "$pid"
  done
  LAMBDA_WATCH_PIDS=()
  LAMBDA_WATCH_URLS=()
  LAMBDA_WATCH_PID=""
  LAMBDA_WATCH_URL=""
}

stop_lambda_stand() {
  stop_lambda_watch
  stop_pid "$STAND_PID"
  STAND_PID=""
  STAND_URL=""
  stop_pid "$EMULATOR_PID"
  EMULATOR_PID=""
  EMULATOR_URL=""
  stop_moto
}

# run_lambda_e2e [TEMPLATE] — the phase, with each function's role and each rule as TEMPLATE
# defines them (default infra/template.yaml; scripts/test runs it again on the CDK app's
# synthesized template). Returns the test's status (1 if the stand did not start).
run_lambda_e2e() {
  local template=${1:-$ROOT/infra/template.yaml}
  local target_dir=${TARGET_DIR:-$(cargo_target_dir)}
  local venv=${VENV:-$target_dir/conformance-venv}
  local lambda_venv_dir=${TRAINYARD_LAMBDA_VENV:-$target_dir/lambda-venv}
  local log_dir=${WORK_DIR:-${TMPDIR:-/tmp}}
  lambda_venv "$lambda_venv_dir" || return 1
  echo "+ building the functions, the emulator and the test"
  cargo build --locked -p trainyard-cli || return 1
  build_functions || return 1
  cargo test --locked -p trainyard-e2e --features lambda-e2e --no-run || return 1

  if [ $# -eq 0 ]; then
    echo "+ pytest tests/stand (the AWS stand refuses what IAM refuses)"
    AWS_EC2_METADATA_DISABLED=true "$venv/bin/python" -m pytest "$ROOT/tests/stand" \
      -p no:cacheprovider -q -rfE || return 1
  fi

  local rc=0
  # In a subshell, so its EXIT trap stops exactly the servers it started, however it ends.
  (
    set -e
    trap stop_lambda_stand EXIT
    trap 'exit 130' INT TERM
    # The account's root key: the test sets up the table and the bus with it. The functions
    # run as their roles (below), never as root.
    export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
    export AWS_DEFAULT_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
    # The emulator copies its jobs' checkpoints into the stand's S3 as SageMaker uploads them,
    # so it is told the stand's port before either starts (the stand forwards SageMaker to it).
    local stand_port
    stand_port=$(free_port)
    AWS_ENDPOINT_URL_S3=http://127.0.0.1:$stand_port start_emulator \
      "$target_dir/debug/trainyard" "$log_dir/lambda-emulator.log" 30 --copy-checkpoints-to-s3
    start_stand "$venv" "$log_dir/lambda-stand.log" 30 "$stand_port"
    export AWS_ENDPOINT_URL_DYNAMODB=$STAND_URL AWS_ENDPOINT_URL_EVENTBRIDGE=$STAND_URL
    export AWS_ENDPOINT_URL_SAGEMAKER=$STAND_URL AWS_ENDPOINT_URL_SQS=$STAND_URL
    export AWS_ENDPOINT_URL_IAM=$STAND_URL AWS_ENDPOINT_URL_S3=$STAND_URL
    # The stand serves buckets by path, as S3-compatible endpoints do.
    export TRAINYARD_S3_FORCE_PATH_STYLE=true
    # Each function's role, from the template, created in the stand's IAM and assumed.
    local roles=$log_dir/lambda-roles
    rm -rf "$roles"
    echo "+ deploy_stack.py --template $template"
    "$venv/bin/python" "$ROOT/tests/stand/deploy_stack.py" --endpoint "$STAND_URL" \
      --template "$template" --stack trainyard-e2e --table trainyard-e2e \
      --parameter TrainingRoleArns=arn:aws:iam::123456789012:role/SageMakerRole \
      --parameter "CheckpointBucketArns=arn:aws:s3:::$E2E_CHECKPOINT_BUCKET" --out "$roles"
    set -a
    . "$roles/stack.env"
    set +a
    # The rest of the functions' configuration (the SAM template's Globals), and short
    # backoffs so the retry case takes a second, not a minute.
    export TRAINYARD_TRAINING_ROLE_ARNS=arn:aws:iam::123456789012:role/SageMakerRole
    export TRAINYARD_INITIAL_ENVIRONMENT=default TRAINYARD_INITIAL_MAX_INSTANCES=4
    export TRAINYARD_INITIAL_QUEUE=default TRAINYARD_INITIAL_QUEUE_PRIORITY=1
    export TRAINYARD_BACKOFF_SCALE=0.01 RUST_LOG=info
    # Preemptions after 2 s of running, not 10 minutes, so the quota case takes seconds.
    export TRAINYARD_MIN_RUNTIME_BEFORE_PREEMPTION_SECONDS=2
    export TRAINYARD_E2E_CHECKPOINT_BUCKET=$E2E_CHECKPOINT_BUCKET
    local name var
    for name in "${LAMBDA_FUNCTIONS[@]}"; do
      start_lambda_watch "$lambda_venv_dir" "$log_dir/lambda-watch-$name.log" "$roles/$name.env" 60
      var=TRAINYARD_E2E_LAMBDA_$(printf '%s' "$name" | tr 'a-z-' 'A-Z_')
      export "$var=$LAMBDA_WATCH_URL"
      echo "$name: cargo lambda watch $LAMBDA_WATCH_URL, as its role"
    done
    echo "emulator $EMULATOR_URL, AWS stand $STAND_URL"
    status=0
    TRAINYARD_E2E_STAND=$STAND_URL TRAINYARD_E2E_EMULATOR=$EMULATOR_URL \
      TRAINYARD_E2E_ROUTES=$roles/routes.json timeout 300 \
      cargo test --locked -p trainyard-e2e --features lambda-e2e --test lambda_watch \
      -- --nocapture || status=$?
    if [ "$status" -ne 0 ]; then
      for name in "${LAMBDA_FUNCTIONS[@]}"; do
        echo "last lines of $name's cargo lambda watch log (its function's log included):" >&2
        tail -n 25 "$log_dir/lambda-watch-$name.log" >&2 || true
      done
      echo "refusals in the AWS stand's log:" >&2
      grep REFUSED "$log_dir/lambda-stand.log" | tail -n 20 >&2 || true
    fi
    exit "$status"
  ) || rc=$?
  return "$rc"
}
