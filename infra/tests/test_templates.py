"""Checks on Trainyard's two infrastructure definitions: the SAM template (infra/template.yaml,
transformed offline with aws-sam-translator) and the CDK app's synthesized template.

Both must describe every function in functions/, grant no wildcard IAM action, and produce the
same resources. scripts/lib/infra.sh runs `cdk synth` first and passes the output's path in
TRAINYARD_CDK_TEMPLATE; a missing synth output is a failure, never a skip.
"""

import collections
import copy
import importlib.util
import json
import os
import pathlib

import pytest
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAM_TEMPLATE = ROOT / "infra" / "template.yaml"
CDK_TEMPLATE = pathlib.Path(
    os.environ.get("TRAINYARD_CDK_TEMPLATE", ROOT / "infra" / "cdk" / "cdk.out" / "Trainyard.template.json")
)
# The functions issue 4 builds; any other directory that appears under functions/ counts too.
REQUIRED_FUNCTIONS = {"api", "scheduler", "training-events", "retry"}
POLICY_KEYS = {"PolicyDocument", "AssumeRolePolicyDocument"}


def expected_functions():
    found = set()
    functions_dir = ROOT / "functions"
    if functions_dir.is_dir():
        # A function is a binary crate; a shared library crate (no src/main.rs) is not deployed.
        found = {p.name for p in functions_dir.iterdir() if (p / "src" / "main.rs").is_file()}
    return REQUIRED_FUNCTIONS | found


class _NoManagedPolicies:
    """The transform asks for AWS managed policy ARNs only if a template names one; ours do not."""

    def load(self):
        return {}


@pytest.fixture(scope="module")
def sam_source():
    return yaml_parse(SAM_TEMPLATE.read_text())


@pytest.fixture(scope="module")
def sam(sam_source):
    """The SAM template as CloudFormation, transformed offline (as cfn-lint does it)."""
    template = copy.deepcopy(sam_source)
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            # The transform wants an S3 URI; `sam build` would upload the local directory.
            resource["Properties"]["CodeUri"] = "s3://bucket/key"
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    return transform(template, {"TrainingRoleArns": "arn:aws:iam::123456789012:role/t"}, _NoManagedPolicies())


@pytest.fixture(scope="module")
def cdk():
    assert CDK_TEMPLATE.is_file(), f"no synthesized CDK template at {CDK_TEMPLATE}: run `cdk synth` first"
    return json.loads(CDK_TEMPLATE.read_text())


def statements(node, path="$"):
    """Every IAM statement anywhere under `node`, with where it was found."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in POLICY_KEYS and isinstance(value, dict):
                found = value.get("Statement", [])
                for i, statement in enumerate(found if isinstance(found, list) else [found]):
                    yield f"{path}.{key}.Statement[{i}]", statement
            yield from statements(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from statements(value, f"{path}[{i}]")


def wildcard_actions(template):
    """(where, action) for each granting statement's action with a `*`, and each NotAction (an
    inverted grant). A `Deny` grants nothing: `s3:*` there (the TLS-only guard of a bucket
    policy) takes away, so it is not counted."""
    problems = []
    for where, statement in statements(template["Resources"]):
        if statement.get("Effect") == "Deny":
            continue
        if "NotAction" in statement:
            problems.append((where, "NotAction"))
        actions = statement.get("Action", [])
        for action in actions if isinstance(actions, list) else [actions]:
            if not isinstance(action, str) or "*" in action:
                problems.append((where, action))
    return problems


def by_type(template, kind):
    return {name: r for name, r in template["Resources"].items() if r["Type"] == kind}


# --- the checker itself can fail -------------------------------------------------------------------


@pytest.mark.parametrize(
    "action, flagged",
    [
        ("*", True),
        ("sagemaker:*", True),
        ("dynamodb:Get*", True),
        (["logs:PutLogEvents", "s3:*"], True),
        ("sagemaker:CreateTrainingJob", False),
        (["dynamodb:Query", "events:PutEvents"], False),
    ],
)
def test_the_wildcard_check_flags_star_actions_and_only_those(action, flagged):
    template = {"Resources": {"R": {"Type": "AWS::IAM::Role", "Properties": {"Policies": [
        {"PolicyName": "p", "PolicyDocument": {"Statement": [{"Effect": "Allow", "Action": action, "Resource": "x"}]}}
    ]}}}}
    assert bool(wildcard_actions(template)) is flagged
    # The same actions denied take away, and are not flagged.
    denied = json.loads(json.dumps(template).replace('"Allow"', '"Deny"'))
    assert wildcard_actions(denied) == []


def test_the_wildcard_check_finds_statements_in_every_policy_document_shape(sam, cdk):
    # Roles carry inline policies and a trust policy; the DLQ carries a queue policy.
    for template in (sam, cdk):
        found = list(statements(template["Resources"]))
        assert len(found) >= 4 * 2 + 1


# --- the rules -------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["sam", "cdk"])
def test_no_iam_statement_grants_a_wildcard_action(which, request):
    assert wildcard_actions(request.getfixturevalue(which)) == []


def test_every_function_directory_is_built_by_the_sam_template(sam_source):
    code_uris = {
        r["Properties"]["CodeUri"].rstrip("/").split("/")[-1]
        for r in sam_source["Resources"].values()
        if r["Type"] == "AWS::Serverless::Function" and r["Properties"]["CodeUri"].rstrip("/").split("/")[-2] == "functions"
    }
    assert expected_functions() <= code_uris


def test_every_function_directory_is_deployed_by_the_cdk_app(cdk):
    sources = {
        r.get("Metadata", {}).get("trainyard:source", "").split("/")[-1]
        for r in by_type(cdk, "AWS::Lambda::Function").values()
    }
    assert expected_functions() <= sources


def test_both_templates_produce_the_same_resource_types_and_counts(sam, cdk):
    count = lambda t: collections.Counter(r["Type"] for r in t["Resources"].values())  # noqa: E731
    assert count(sam) == count(cdk)


def test_both_templates_declare_the_same_parameters(sam_source, cdk):
    cdk_params = set(cdk["Parameters"]) - {"BootstrapVersion"}
    assert set(sam_source["Parameters"]) == cdk_params


def test_both_tables_have_the_same_keys_indexes_projections_ttl_and_recovery(sam, cdk):
    def shape(template):
        (table,) = by_type(template, "AWS::DynamoDB::Table").values()
        p = table["Properties"]
        return {
            "keys": p["KeySchema"],
            "indexes": sorted(
                (g["IndexName"], json.dumps(g["KeySchema"]), json.dumps(g["Projection"], sort_keys=True))
                for g in p["GlobalSecondaryIndexes"]
            ),
            "attributes": sorted(a["AttributeName"] for a in p["AttributeDefinitions"]),
            "ttl": p["TimeToLiveSpecification"],
            "pitr": p["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"],
            "retained": table.get("DeletionPolicy"),
        }

    assert shape(sam) == shape(cdk)
    assert shape(sam)["pitr"] is True and shape(sam)["retained"] == "Retain"


def test_the_table_has_exactly_the_indexes_the_store_queries(sam):
    """The index names in shared/aws/src/dynamodb/schema.rs (its `mod index`) are the ones the
    store queries and `create_table` creates for the tests; a deployed table must have the same."""
    import re

    schema = (ROOT / "shared" / "aws" / "src" / "dynamodb" / "schema.rs").read_text()
    module = re.search(r"pub\(crate\) mod index \{(.*?)\n\}", schema, re.S)
    assert module, "no `mod index` in schema.rs"
    names = set(re.findall(r'pub\(crate\) const \w+: &str = "([^"]+)";', module.group(1)))
    assert names, "no index names found in schema.rs"
    (table,) = by_type(sam, "AWS::DynamoDB::Table").values()
    assert {g["IndexName"] for g in table["Properties"]["GlobalSecondaryIndexes"]} == names


def test_each_index_projects_exactly_what_the_store_reads_from_it(sam):
    """The projections in schema.rs (`INDEXES`: each index's keys and the attributes it
    projects), which `create_table` gives the tests' tables, are the deployed table's: an
    attribute the store reads from an index but the template does not project would be missing
    from every entry in a real account, while the tests pass."""
    import re

    schema = (ROOT / "shared" / "aws" / "src" / "dynamodb" / "schema.rs").read_text()
    consts = dict(re.findall(r'pub\(crate\) const (\w+): &str = "([^"]+)";', schema))
    arrays = {
        name: [consts[a] for a in re.findall(r"\w+", body)]
        for name, body in re.findall(r"pub\(crate\) const (\w+): &\[&str\] = &\[(.*?)\];", schema, re.S)
    }
    block = re.search(r"pub\(crate\) const INDEXES: .*? = \[(.*?)\n\];", schema, re.S)
    assert block, "no INDEXES in schema.rs"
    entries = re.findall(r"\(\s*index::(\w+),\s*(\w+),\s*(\w+),\s*(\w+),?\s*\)", block.group(1))
    assert len(entries) == 3, entries
    expected = {
        consts[index]: (consts[hash_key], consts[range_key], sorted(arrays[projected]))
        for index, hash_key, range_key, projected in entries
    }
    (table,) = by_type(sam, "AWS::DynamoDB::Table").values()
    deployed = {
        g["IndexName"]: (
            g["KeySchema"][0]["AttributeName"],
            g["KeySchema"][1]["AttributeName"],
            sorted(g["Projection"]["NonKeyAttributes"]),
        )
        for g in table["Properties"]["GlobalSecondaryIndexes"]
    }
    assert deployed == expected
    assert "ck" in expected["by-queue-status"][2], "checkpoint URIs reach the planner"


def test_every_function_gets_the_same_configuration_in_both_templates(sam, cdk):
    def variables(template):
        found = set()
        for fn in by_type(template, "AWS::Lambda::Function").values():
            found.add(tuple(sorted(fn["Properties"]["Environment"]["Variables"])))
        # The same variables for every function of a template.
        assert len(found) == 1, found
        return set(found.pop())

    # What functions/common/src/config.rs requires at cold start, and what names ARNs and metrics.
    required = {"TRAINYARD_TABLE", "TRAINYARD_EVENT_BUS", "TRAINYARD_TRAINING_ROLE_ARNS"}
    explicit = {"TRAINYARD_STACK_NAME", "TRAINYARD_ACCOUNT_ID"}
    assert variables(sam) == variables(cdk)
    assert required | explicit <= variables(sam)


@pytest.mark.parametrize("which", ["sam", "cdk"])
def test_every_function_is_an_al2023_bootstrap_of_the_stacks_architecture(which, request):
    functions = by_type(request.getfixturevalue(which), "AWS::Lambda::Function")
    assert len(functions) == len(REQUIRED_FUNCTIONS)
    for name, f in functions.items():
        p = f["Properties"]
        assert (p["Runtime"], p["Handler"], p["Architectures"]) == (
            "provided.al2023",
            "bootstrap",
            [{"Ref": "Architecture"}],
        ), name


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_sam_build_compiles_for_the_architecture_parameter():
    """What `sam build` reads from the template (SAM CLI's own function provider, as `sam build`
    resolves it): arm64 by default, x86_64 when the parameter says so; each function is built by
    cargo lambda."""
    from samcli.lib.providers.sam_function_provider import SamFunctionProvider
    from samcli.lib.providers.sam_stack_provider import SamLocalStackProvider

    def built(overrides):
        stacks, _ = SamLocalStackProvider.get_stacks(str(SAM_TEMPLATE), parameter_overrides=overrides)
        return {
            (f.architectures[0], (f.metadata or {}).get("BuildMethod"))
            for f in SamFunctionProvider(stacks).get_all()
        }

    assert built(None) == {("arm64", "rust-cargolambda")}
    assert built({"Architecture": "x86_64"}) == {("x86_64", "rust-cargolambda")}


ELF_MACHINES = {0x3E: "x86_64", 0xB7: "arm64"}


def elf_architecture(path):
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF", f"{path} is not an executable (the placeholder?)"
    return ELF_MACHINES[int.from_bytes(header[18:20], "little")]


def test_the_cdk_stack_packages_the_release_build_and_declares_its_architecture(cdk):
    """scripts/lib/infra.sh synthesizes the CDK app from `cargo lambda build --profile lambda-check`'s output
    (x86_64 here): every function's packaged asset is that build's `bootstrap`, and the
    Architecture parameter can only be the architecture it was compiled for."""
    out = CDK_TEMPLATE.parent
    architectures = set()
    for name, f in by_type(cdk, "AWS::Lambda::Function").items():
        asset = out / ("asset." + f["Properties"]["Code"]["S3Key"].removesuffix(".zip")) / "bootstrap"
        assert asset.is_file(), f"{name}: no packaged bootstrap at {asset}"
        architectures.add(elf_architecture(asset))
    assert architectures == {os.environ.get("TRAINYARD_LAMBDA_ARCHITECTURE", "x86_64")}
    parameter = cdk["Parameters"]["Architecture"]
    assert (parameter["Default"], parameter["AllowedValues"]) == (architectures.pop(), [parameter["Default"]])


@pytest.mark.parametrize("which", ["sam", "cdk"])
def test_only_the_scheduler_may_reserve_concurrency_and_async_functions_dead_letter(which, request):
    template = request.getfixturevalue(which)
    functions = by_type(template, "AWS::Lambda::Function")
    reserved = {n: f["Properties"].get("ReservedConcurrentExecutions") for n, f in functions.items()}
    # Opt-in (accounts with a low concurrency quota cannot reserve any): the parameter, or none.
    opt_in = {"Fn::If": ["ReservesSchedulerConcurrency", {"Ref": "SchedulerReservedConcurrency"}, {"Ref": "AWS::NoValue"}]}
    assert reserved == {"ApiFunction": None, "SchedulerFunction": opt_in, "TrainingEventsFunction": None, "RetryFunction": None}
    assert template["Parameters"]["SchedulerReservedConcurrency"]["Default"] in (0, "0")
    with_dlq = {n for n, f in functions.items() if "DeadLetterConfig" in f["Properties"]}
    assert with_dlq == {"SchedulerFunction", "TrainingEventsFunction", "RetryFunction"}


@pytest.mark.parametrize("which", ["sam", "cdk"])
def test_no_function_name_can_pass_lambdas_64_characters(which, request):
    # A fixed name built from the stack's (up to 128 characters) fails to deploy once it passes
    # 64; CloudFormation's generated names never do.
    for name, f in by_type(request.getfixturevalue(which), "AWS::Lambda::Function").items():
        assert "FunctionName" not in f["Properties"], name


@pytest.mark.parametrize("which", ["sam", "cdk"])
def test_pass_role_is_limited_to_the_training_roles_and_to_sagemaker(which, request):
    template = request.getfixturevalue(which)
    grants = [(w, s) for w, s in statements(template["Resources"]) if "iam:PassRole" in json.dumps(s.get("Action"))]
    assert len(grants) == 1, grants
    _, statement = grants[0]
    assert statement["Resource"] == {"Ref": "TrainingRoleArns"}
    assert statement["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}


def load_deploy_stack():
    """tests/stand/deploy_stack.py, the module that deploys a template into the AWS stand."""
    spec = importlib.util.spec_from_file_location("deploy_stack", ROOT / "tests" / "stand" / "deploy_stack.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def deployed_role_grants(template, parameters=None):
    """{function: the set of (effect, actions, resources, condition) its role grants}, every
    intrinsic resolved for one stack by tests/stand/deploy_stack.py, the resolver that deploys
    the roles the end-to-end suite runs the functions as."""
    stack = load_deploy_stack().Stack(template, "ty", "us-east-1", "ty-table",
                               {"TrainingRoleArns": "arn:aws:iam::123456789012:role/t",
                                **(parameters or {})})
    grants = {}
    for function, role in stack.function_roles().items():
        granted = set()
        for _, document in stack.role_policies(role):
            for statement in document["Statement"]:
                as_list = lambda v: tuple(sorted(v if isinstance(v, list) else [v]))
                granted.add((statement["Effect"], as_list(statement["Action"]),
                             as_list(statement.get("Resource", [])),
                             json.dumps(statement.get("Condition"), sort_keys=True)))
        grants[function] = granted
    return grants


def test_both_templates_route_the_same_event_patterns_to_the_same_functions(sam_source, cdk):
    # The end-to-end suite deploys the SAM template's rules into moto's EventBridge and delivers
    # events only through them (tests/stand/deploy_stack.py); equal rules make that hold for the
    # CDK app too.
    def rules(template):
        stack = load_deploy_stack().Stack(template, "ty", "us-east-1", "ty-table", {})
        return sorted((f, bus, json.dumps(p, sort_keys=True)) for _, f, bus, p in stack.event_rules())

    sam_rules = rules(sam_source)
    assert {f for f, _, _ in sam_rules} == {"scheduler", "training-events"}, sam_rules
    assert rules(cdk) == sam_rules


def test_every_function_role_grants_the_same_in_both_templates(sam_source, cdk):
    # The end-to-end suite runs each function as its SAM role (scripts/lib/lambda.sh), so a
    # permission missing there fails a test; equal grants make that hold for the CDK app too.
    sam_grants, cdk_grants = deployed_role_grants(sam_source), deployed_role_grants(cdk)
    assert set(sam_grants) == expected_functions(), sam_grants.keys()
    for function in sorted(sam_grants):
        only_sam = sam_grants[function] - cdk_grants.get(function, set())
        only_cdk = cdk_grants.get(function, set()) - sam_grants[function]
        assert not only_sam and not only_cdk, (function, only_sam, only_cdk)


@pytest.mark.parametrize("which", ["sam_source", "cdk"])
def test_only_the_scheduler_lists_buckets_its_own_and_the_checkpoint_buckets_the_stack_names(which, request):
    template = request.getfixturevalue(which)
    s3_grants = lambda grants: {f: {g for g in gs if "s3:ListBucket" in g[1]}
                                for f, gs in grants.items()}
    # The stack's own bucket, always: so that the forecaster's state, before it exists, reads
    # as NoSuchKey (S3 answers AccessDenied to a caller that may not list the bucket).
    stack = load_deploy_stack().Stack(template, "ty", "us-east-1", "ty-table",
                                      {"TrainingRoleArns": "arn:aws:iam::123456789012:role/t"})
    [bucket] = [k for k, r in stack.resources.items() if r["Type"] == "AWS::S3::Bucket"]
    own = ("Allow", ("s3:ListBucket",), (f"arn:aws:s3:::{stack.physical_name(bucket)}",), "null")
    unnamed = s3_grants(deployed_role_grants(template))
    assert unnamed.pop("scheduler") == {own}
    assert all(not g for g in unnamed.values()), unnamed
    buckets = "arn:aws:s3:::team-a-checkpoints,arn:aws:s3:::team-b-checkpoints"
    named = s3_grants(deployed_role_grants(template, {"CheckpointBucketArns": buckets}))
    assert named.pop("scheduler") == {
        own, ("Allow", ("s3:ListBucket",), tuple(sorted(buckets.split(","))), "null")}
    assert all(not g for g in named.values()), named
    # The functions are told which object marks a checkpoint complete.
    stack = load_deploy_stack().Stack(template, "ty", "us-east-1", "ty-table",
                                      {"TrainingRoleArns": "arn:aws:iam::123456789012:role/t"})
    variables = [stack.resolve(r["Properties"]["Environment"]["Variables"])
                 for r in stack.resources.values()
                 if r["Type"] == "AWS::Lambda::Function" and "Environment" in r["Properties"]]
    globals_ = template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables")
    if globals_:
        variables.append(stack.resolve(globals_))
    assert variables and all(v["TRAINYARD_CHECKPOINT_MARKER"] == "_SUCCESS" for v in variables)


@pytest.mark.parametrize("which", ["sam_source", "cdk"])
def test_only_the_scheduler_writes_decision_records_and_its_forecasters_state(which, request):
    template = request.getfixturevalue(which)
    stack = load_deploy_stack().Stack(template, "ty", "us-east-1", "ty-table",
                                      {"TrainingRoleArns": "arn:aws:iam::123456789012:role/t"})
    buckets = [k for k, r in stack.resources.items() if r["Type"] == "AWS::S3::Bucket"]
    assert len(buckets) == 1, buckets
    bucket = stack.resources[buckets[0]]
    name = stack.physical_name(buckets[0])
    writes = {f: {g for g in gs if any(a.startswith("s3:") and a != "s3:ListBucket" for a in g[1])}
              for f, gs in deployed_role_grants(template).items()}
    assert writes.pop("scheduler") == {
        ("Allow", ("s3:PutObject",), (f"arn:aws:s3:::{name}/decisions/*",), "null"),
        ("Allow", ("s3:GetObject", "s3:PutObject"), (f"arn:aws:s3:::{name}/forecaster/*",), "null")}
    assert all(not g for g in writes.values()), writes
    props = stack.resolve(bucket["Properties"])
    assert all(props["PublicAccessBlockConfiguration"].values())
    rules = props["LifecycleConfiguration"]["Rules"]
    assert [(r["Prefix"], r["ExpirationInDays"], r["Status"]) for r in rules] == [("decisions/", 14, "Enabled")]
    assert bucket.get("DeletionPolicy") == "Retain"
    # The functions are told the bucket (only the scheduler writes there) and the retention.
    assert stack.bucket_variables() == {"TRAINYARD_DECISIONS_BUCKET": name}


@pytest.mark.parametrize("which", ["sam", "cdk"])
def test_sagemaker_actions_reach_only_trainyard_named_training_jobs(which, request):
    template = request.getfixturevalue(which)
    grants = [s for _, s in statements(template["Resources"]) if "sagemaker:" in json.dumps(s.get("Action"))]
    # scheduler, training-events and retry each touch training jobs; api does not.
    assert len(grants) == 3, grants
    for statement in grants:
        resource = json.dumps(statement["Resource"])
        # attempt_name() in shared/app/src/service/scheduling.rs starts every name with "ty-".
        assert resource.count(":training-job/ty-*") == 1, resource
        assert ":training-job/*" not in resource, resource


@pytest.mark.parametrize("which", ["sam", "cdk"])
def test_rules_route_sagemaker_changes_and_internal_events_to_their_functions(which, request):
    template = request.getfixturevalue(which)
    targets = {}
    for rule in by_type(template, "AWS::Events::Rule").values():
        p = rule["Properties"]
        key = json.dumps(p.get("EventPattern", {}).get("source")) if "EventPattern" in p else "schedule"
        for target in p["Targets"]:
            targets.setdefault(key, set()).add(target["Arn"]["Fn::GetAtt"][0])
    assert targets == {
        '["aws.sagemaker"]': {"TrainingEventsFunction"},
        '["trainyard"]': {"SchedulerFunction"},
        "schedule": {"SchedulerFunction", "RetryFunction"},
    }


@pytest.mark.parametrize("which", ["sam", "cdk"])
def test_the_api_is_iam_authorized(which, request):
    (api,) = by_type(request.getfixturevalue(which), "AWS::ApiGatewayV2::Api").values()
    route = api["Properties"]["Body"]["paths"]["$default"]["x-amazon-apigateway-any-method"]
    assert route["security"] == [{"AWS_IAM": []}]


@pytest.mark.parametrize("which", ["sam", "cdk"])
def test_cloudwatch_alarms_can_publish_to_the_encrypted_alarm_topic(which, request):
    """An alarm topic under the AWS-managed alias/aws/sns key never receives an alarm: CloudWatch
    needs kms:Decrypt and kms:GenerateDataKey on the topic's key, which only a key of our own
    can grant it."""
    template = request.getfixturevalue(which)
    topics = by_type(template, "AWS::SNS::Topic")
    keys = by_type(template, "AWS::KMS::Key")
    assert len(topics) == 1, topics
    (topic,) = topics.values()
    key_ref = topic["Properties"].get("KmsMasterKeyId")
    assert isinstance(key_ref, dict) and key_ref.get("Ref") in keys, f"topic key: {key_ref!r}"
    policy = keys[key_ref["Ref"]]["Properties"]["KeyPolicy"]
    grants = [
        s
        for s in policy["Statement"]
        if s.get("Effect") == "Allow" and s.get("Principal", {}).get("Service") == "cloudwatch.amazonaws.com"
    ]
    assert grants, "no statement lets cloudwatch.amazonaws.com use the key"
    actions = set()
    for g in grants:
        actions |= set(g["Action"] if isinstance(g["Action"], list) else [g["Action"]])
    assert {"kms:Decrypt", "kms:GenerateDataKey"} <= actions, actions


def attempt_name_prefix():
    """ATTEMPT_NAME_PREFIX as the Rust code defines it (shared/domain/src/training.rs)."""
    source = (ROOT / "shared" / "domain" / "src" / "training.rs").read_text()
    line = next(l for l in source.splitlines() if l.startswith("pub const ATTEMPT_NAME_PREFIX"))
    return line.split('"')[1]


def matches(pattern, event):
    """EventBridge's matching for the operators these templates use: a list of exact values, and
    `{"prefix": ...}`; nested objects match nested members. Anything else fails loudly."""
    for key, expected in pattern.items():
        if isinstance(expected, dict):
            if not isinstance(event.get(key), dict) or not matches(expected, event[key]):
                return False
            continue
        value = event.get(key)
        ok = False
        for alternative in expected:
            if isinstance(alternative, dict):
                assert set(alternative) == {"prefix"}, f"operator not handled here: {alternative}"
                ok |= isinstance(value, str) and value.startswith(alternative["prefix"])
            else:
                ok |= value == alternative
        if not ok:
            return False
    return True


@pytest.mark.parametrize("which", ["sam", "cdk"])
def test_only_trainyards_training_jobs_reach_the_training_events_function(which, request):
    (rule,) = [
        r
        for r in by_type(request.getfixturevalue(which), "AWS::Events::Rule").values()
        if r["Properties"].get("EventPattern", {}).get("source") == ["aws.sagemaker"]
    ]
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["detail"]["TrainingJobName"] == [{"prefix": attempt_name_prefix()}]
    fixtures = ROOT / "events" / "training-events"
    seen = {}
    for path in sorted(fixtures.glob("*.json")):
        event = json.loads(path.read_text())
        if event.get("source") != "aws.sagemaker":
            continue
        seen[path.name] = matches(pattern, event)
    assert seen.get("foreign-training-job.json") is False, seen
    assert seen.get("completed.json") is True, seen
    assert sum(seen.values()) >= 2, seen
