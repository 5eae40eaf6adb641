# Infrastructure checks for scripts/test (sourced, not executed; needs scripts/lib/common.sh
# first, and lambda.sh for cargo-lambda): `run_infra` builds the four functions as deployed
# (x86_64, optimized), then lints and validates infra/template.yaml (SAM) and the CDK app in
# infra/cdk synthesized from that build, offline and without AWS credentials.
#
# Uses ROOT, PYTHON and TARGET_DIR as scripts/test sets them (with fallbacks). Tools are pinned:
# Python ones in infra/requirements.txt, installed into their own virtualenv (aws-sam-cli pins a
# boto3 the conformance suite cannot use), npm ones in infra/cdk/package-lock.json. Both are
# reinstalled only when their pins change; a re-run costs about 20 s plus the functions' build
# (about 1.5 minutes after a change to a shared crate, 11 minutes from nothing).

# infra_python_env VENV — builds VENV from infra/requirements.txt unless its stamp is current.
infra_python_env() {
  make_venv "$1" "$ROOT/infra/requirements.txt"
}

# infra_node_modules — `npm ci` in infra/cdk unless node_modules matches package-lock.json.
infra_node_modules() {
  local dir=$ROOT/infra/cdk
  local stamp="$dir/node_modules/.package-lock.sha256" want
  want=$( { sha256sum "$dir/package-lock.json" | cut -d' ' -f1; node --version; } | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "infra/cdk/node_modules is current"
    return 0
  fi
  echo "installing infra/cdk/node_modules from package-lock.json"
  (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) || return 1
  printf '%s\n' "$want" >"$stamp"
}

# build_release_functions LAMBDA_VENV LAMBDA_DIR — the packaging build of the four functions:
# `cargo lambda build --profile lambda-check` (x86_64, the target this toolchain has; arm64 needs
# `rustup target add aarch64-unknown-linux-gnu` and `--arm64`), one bootstrap per function in
# LAMBDA_DIR/<function>/: the deployment build's code, cross-linked with zig the same way, without
# the LTO and single codegen unit `--release` adds (see the profile in Cargo.toml). Needs
# lambda.sh's lambda_venv (cargo-lambda and its zig linker).
build_release_functions() {
  local packages=() name
  for name in "${LAMBDA_FUNCTIONS[@]}"; do
    packages+=(-p "trainyard-fn-$name")
  done
  lambda_venv "$1" || return 1
  echo "+ cargo lambda build --profile lambda-check --locked ${packages[*]} --lambda-dir $2"
  PATH="$1/bin:$PATH" cargo lambda build --profile lambda-check --locked "${packages[@]}" \
    --lambda-dir "$2"
}

# run_infra — installs the pinned tools, builds the functions for deployment
# (build_release_functions), then cfn-lint + `sam validate --lint` on the SAM template,
# `cdk synth` of the built functions + cfn-lint on its output, and the pytest in infra/tests.
# Returns non-zero on the first failing step (each step says what it runs).
run_infra() {
  local target_dir=${TARGET_DIR:-$ROOT/target}
  local venv=${TRAINYARD_INFRA_VENV:-$target_dir/infra-venv}
  local lambda_dir=$target_dir/lambda-release
  local out
  out=$(mktemp -d "${TMPDIR:-/tmp}/trainyard-cdk.XXXXXX") || return 1
  local rc=0
  (
    set -e
    # Offline: no telemetry, no notices, dummy account and Region, no credentials needed.
    export SAM_CLI_TELEMETRY=0 CDK_DISABLE_CLI_TELEMETRY=true
    export AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1
    export CDK_DEFAULT_ACCOUNT=123456789012 CDK_DEFAULT_REGION=us-east-1
    infra_python_env "$venv"
    infra_node_modules
    build_release_functions "${TRAINYARD_LAMBDA_VENV:-$target_dir/lambda-venv}" "$lambda_dir"
    echo "+ cfn-lint infra/template.yaml"
    "$venv/bin/cfn-lint" "$ROOT/infra/template.yaml"
    echo "+ sam validate --lint"
    "$venv/bin/sam" validate --lint --template "$ROOT/infra/template.yaml" --region us-east-1
    echo "+ cdk synth -c lambdaDir=$lambda_dir (offline, the functions' build packaged)"
    (cd "$ROOT/infra/cdk" && npx --no-install cdk synth --quiet --no-notices --output "$out" \
      -c lambdaDir="$lambda_dir" >"$out.log" 2>&1) || { cat "$out.log" >&2; exit 1; }
    echo "+ cfn-lint $out/Trainyard.template.json"
    "$venv/bin/cfn-lint" "$out/Trainyard.template.json"
    # Kept for the end-to-end run with the CDK app's roles and rules (scripts/test).
    cp "$out/Trainyard.template.json" "$target_dir/cdk-synth.template.json"
    echo "+ pytest infra/tests"
    TRAINYARD_CDK_TEMPLATE="$out/Trainyard.template.json" \
      "$venv/bin/python" -m pytest "$ROOT/infra/tests" -p no:cacheprovider -q -rfE
  ) || rc=$?
  rm -rf "$out" "$out.log"
  if [ "$rc" -eq 5 ]; then
    echo "pytest collected no infra tests: that is a failure, not a pass" >&2
  fi
  return "$rc"
}
