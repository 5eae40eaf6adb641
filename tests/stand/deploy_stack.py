"""Deploys what the functions meet in AWS from a template into the AWS stand (aws_stand.py), as
CloudFormation would: each function's role, whose credentials the end-to-end suite runs that
function with (so a permission the template lacks fails a call there as it would in AWS), and
each EventBridge rule that invokes a function, so that events reach functions only through the
template's own patterns, matched by moto's EventBridge.

For each function in the template (`AWS::Serverless::Function`, or a CDK app's synthesized
`AWS::Lambda::Function`), the role its `Role` names is created in the stand's IAM with the
template's trust policy and policies (inline `Policies`, and `AWS::IAM::Policy` resources that
attach to it), every intrinsic resolved for the stack (`Ref`, `Fn::GetAtt ... Arn`, `Fn::Sub`,
`Fn::Join`) the way CloudFormation names the resources; then the role is assumed, and
`OUT/<function>.env` gets the session's `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
`AWS_SESSION_TOKEN`. `OUT/stack.env` gets the physical names the functions are configured with
(`TRAINYARD_TABLE`, `TRAINYARD_EVENT_BUS`, and each variable that names a bucket of the
template). The event buses and the buckets are created; the table is not (the suite creates it
with the store's own schema, which infra/tests checks against the template).

Each rule with an event pattern (a function's `EventBridgeRule` event in SAM, an
`AWS::Events::Rule` targeting a function in a synthesized template) is put on its bus with an SQS
queue as its target in place of the function (moto delivers to queues, not to functions);
`OUT/routes.json` lists `{"rule", "function", "queue_url"}`, and the suite invokes each function
with what arrives on its queues. Schedule rules are not deployed: the suite ticks by itself.

Usage: python deploy_stack.py --endpoint URL --template infra/template.yaml --stack e2e \
           --table NAME --parameter TrainingRoleArns=ARN[,ARN] --out DIR
The endpoint is called with the root key of the environment (AWS_ACCESS_KEY_ID).
"""

import argparse
import json
import pathlib
import re
import sys

import yaml

ACCOUNT = "123456789012"
PARTITION = "aws"


class TemplateLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short tags (`!Ref X`, `!GetAtt A.B`, `!Sub ...`)."""


def _tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


TemplateLoader.add_multi_constructor("!", _tag)


def load_template(path):
    text = pathlib.Path(path).read_text()
    return json.loads(text) if path.endswith(".json") else yaml.load(text, TemplateLoader)


# What `Ref: AWS::NoValue` resolves to: removed from the list or map that holds it.
NO_VALUE = object()


class Stack:
    """The physical names and ARNs CloudFormation gives a template's resources in this stack."""

    def __init__(self, template, name, region, table, parameters):
        self.template = template
        self.resources = template["Resources"]
        self.name = name
        self.region = region
        self.table = table
        self.parameters = {}
        for key, spec in template.get("Parameters", {}).items():
            value = parameters.get(key, spec.get("Default"))
            if value is None:
                continue
            if spec.get("Type") == "CommaDelimitedList":
                value = [v for v in str(value).split(",") if v]
            self.parameters[key] = value

    def physical_name(self, logical):
        resource = self.resources[logical]
        kind, props = resource["Type"], resource.get("Properties", {})
        if kind == "AWS::DynamoDB::Table":
            return self.table
        for key in ("Name", "LogGroupName", "RoleName", "QueueName", "FunctionName"):
            if key in props:
                return self.resolve(props[key])
        if kind == "AWS::Logs::LogGroup":
            return f"/aws/{self.name}/{logical}"
        if kind == "AWS::S3::Bucket":
            # CloudFormation's generated bucket names are lower case, as S3's rules require.
            return f"{self.name}-{logical}".lower()[:63]
        return f"{self.name}-{logical}"

    def ref(self, name):
        pseudo = {
            "AWS::Region": self.region,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": PARTITION,
            "AWS::StackName": self.name,
            "AWS::URLSuffix": "amazonaws.com",
        }
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        if name not in self.resources:
            raise SystemExit(f"Ref {name}: no such parameter or resource in the template")
        if self.resources[name]["Type"] == "AWS::SQS::Queue":
            return f"https://sqs.{self.region}.amazonaws.com/{ACCOUNT}/{self.physical_name(name)}"
        return self.physical_name(name)

    def arn(self, logical):
        kind = self.resources[logical]["Type"]
        name = self.physical_name(logical)
        region, prefix = self.region, f"arn:{PARTITION}"
        arns = {
            "AWS::DynamoDB::Table": f"{prefix}:dynamodb:{region}:{ACCOUNT}:table/{name}",
            "AWS::Events::EventBus": f"{prefix}:events:{region}:{ACCOUNT}:event-bus/{name}",
            "AWS::SQS::Queue": f"{prefix}:sqs:{region}:{ACCOUNT}:{name}",
            "AWS::Logs::LogGroup": f"{prefix}:logs:{region}:{ACCOUNT}:log-group:{name}:*",
            "AWS::IAM::Role": f"{prefix}:iam::{ACCOUNT}:role/{name}",
            "AWS::SNS::Topic": f"{prefix}:sns:{region}:{ACCOUNT}:{name}",
            "AWS::KMS::Key": f"{prefix}:kms:{region}:{ACCOUNT}:key/{name}",
            "AWS::S3::Bucket": f"{prefix}:s3:::{name}",
        }
        if kind not in arns:
            raise SystemExit(f"Fn::GetAtt {logical}.Arn: no ARN rule for {kind}")
        return arns[kind]

    def condition(self, name):
        """The value of the template's condition `name` in this stack."""
        return self.evaluate(self.template.get("Conditions", {})[name])

    def evaluate(self, node):
        """A condition expression (Fn::Not, Fn::Equals, Fn::And, Fn::Or, Condition) as a bool."""
        (key, value), = node.items()
        if key == "Condition":
            return self.condition(value)
        if key == "Fn::Not":
            return not self.evaluate(value[0])
        if key == "Fn::And":
            return all(self.evaluate(v) for v in value)
        if key == "Fn::Or":
            return any(self.evaluate(v) for v in value)
        if key == "Fn::Equals":
            left, right = (self.resolve(v) for v in value)
            return str(left) == str(right)
        raise SystemExit(f"{key}: not a condition tests/stand/deploy_stack.py evaluates")

    def resolve(self, node):
        """`node` with every intrinsic resolved; `Fn::If` branches that are `AWS::NoValue`
        leave nothing behind (the item of a list, the key of a map)."""
        if isinstance(node, list):
            return [r for r in (self.resolve(v) for v in node) if r is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, value), = node.items()
            if key == "Ref" and value == "AWS::NoValue":
                return NO_VALUE
            if key == "Ref":
                return self.ref(value)
            if key == "Fn::If":
                name, when_true, when_false = value
                return self.resolve(when_true if self.condition(name) else when_false)
            if key == "Fn::GetAtt":
                logical, attribute = value if isinstance(value, list) else value.split(".", 1)
                if attribute != "Arn":
                    raise SystemExit(f"Fn::GetAtt {logical}.{attribute}: only .Arn is resolved")
                return self.arn(logical)
            if key == "Fn::Sub":
                return self.substitute(value)
            if key == "Fn::Join":
                separator, parts = value
                return separator.join(str(p) for p in self.resolve(parts))
            if key.startswith("Fn::"):
                raise SystemExit(f"{key}: not resolved by tests/stand/deploy_stack.py")
        resolved = {k: self.resolve(v) for k, v in node.items()}
        return {k: v for k, v in resolved.items() if v is not NO_VALUE}

    def substitute(self, value):
        text, variables = (value, {}) if isinstance(value, str) else value

        def one(match):
            name = match.group(1)
            if name in variables:
                return str(self.resolve(variables[name]))
            if "." in name and not name.startswith("AWS::"):
                logical, attribute = name.split(".", 1)
                return self.resolve({"Fn::GetAtt": [logical, attribute]})
            return str(self.ref(name))

        return re.sub(r"\$\{([^}!][^}]*)\}", one, text)

    def function_roles(self):
        """{function directory name: role logical id}, for every function in the template."""
        found = {}
        for logical, function in self.function_names().items():
            role = self.resources[logical]["Properties"].get("Role")
            if not (isinstance(role, dict) and "Fn::GetAtt" in role):
                raise SystemExit(f"{logical}: Role is not a Fn::GetAtt of a role in the template")
            target = role["Fn::GetAtt"]
            found[function] = target[0] if isinstance(target, list) else target.split(".")[0]
        return found

    def function_names(self):
        """{function logical id: function directory name}."""
        names = {}
        for logical, resource in self.resources.items():
            props = resource.get("Properties", {})
            if resource["Type"] == "AWS::Serverless::Function":
                names[logical] = pathlib.PurePosixPath(props["CodeUri"]).name
            elif resource["Type"] == "AWS::Lambda::Function":
                # The CDK app records each function's source directory (infra/cdk/lib).
                source = resource.get("Metadata", {}).get("trainyard:source", logical)
                names[logical] = pathlib.PurePosixPath(source).name
        return names

    def event_rules(self):
        """[(rule name, function, bus name, pattern)] for every pattern rule invoking a function."""
        names = self.function_names()
        rules = []
        for logical, resource in self.resources.items():
            props = resource.get("Properties", {})
            if resource["Type"] == "AWS::Serverless::Function":
                for event_name, event in props.get("Events", {}).items():
                    spec = event.get("Properties", {})
                    if event.get("Type") == "EventBridgeRule" and "Pattern" in spec:
                        bus = self.resolve(spec.get("EventBusName", "default"))
                        rules.append((f"{logical}{event_name}", names[logical], bus,
                                      self.resolve(spec["Pattern"])))
            elif resource["Type"] == "AWS::Events::Rule" and "EventPattern" in props:
                bus = self.resolve(props.get("EventBusName", "default"))
                for target in props.get("Targets", []):
                    arn = target.get("Arn")
                    function = arn.get("Fn::GetAtt", [None])[0] if isinstance(arn, dict) else None
                    if function in names:
                        rules.append((logical, names[function], bus,
                                      self.resolve(props["EventPattern"])))
        return rules

    def bucket_variables(self):
        """{variable: bucket name} of the functions' environment variables (SAM's `Globals` or
        each function's own) that name a bucket of the template (`Ref`)."""
        sources = [self.template.get("Globals", {}).get("Function", {})]
        sources += [r.get("Properties", {}) for r in self.resources.values()
                    if r["Type"] in ("AWS::Serverless::Function", "AWS::Lambda::Function")]
        found = {}
        for props in sources:
            variables = props.get("Environment", {}).get("Variables", {})
            for variable, value in variables.items():
                target = value.get("Ref") if isinstance(value, dict) else None
                if self.resources.get(target, {}).get("Type") == "AWS::S3::Bucket":
                    found[variable] = self.physical_name(target)
        return found

    def role_policies(self, role):
        """[(name, document)] of the role: its inline policies and the policies attached to it."""
        props = self.resources[role]["Properties"]
        policies = [(p["PolicyName"], self.resolve(p["PolicyDocument"]))
                    for p in props.get("Policies", [])]
        for logical, resource in self.resources.items():
            if resource["Type"] != "AWS::IAM::Policy":
                continue
            attached = resource["Properties"].get("Roles", [])
            if {"Ref": role} in attached:
                policies.append((logical, self.resolve(resource["Properties"]["PolicyDocument"])))
        return policies


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--template", required=True)
    parser.add_argument("--stack", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--parameter", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    parameters = dict(p.split("=", 1) for p in args.parameter)
    import boto3  # here, so that infra/tests can read templates with this module without it

    stack = Stack(load_template(args.template), args.stack, args.region, args.table, parameters)
    iam = boto3.client("iam", endpoint_url=args.endpoint, region_name=args.region)
    sts = boto3.client("sts", endpoint_url=args.endpoint, region_name=args.region)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    roles = stack.function_roles()
    if not roles:
        raise SystemExit(f"{args.template}: no functions found")
    for function, role in sorted(roles.items()):
        props = stack.resources[role]["Properties"]
        name = stack.physical_name(role)
        arn = iam.create_role(
            RoleName=name,
            AssumeRolePolicyDocument=json.dumps(stack.resolve(props["AssumeRolePolicyDocument"])),
        )["Role"]["Arn"]
        policies = stack.role_policies(role)
        for policy_name, document in policies:
            iam.put_role_policy(RoleName=name, PolicyName=policy_name,
                                PolicyDocument=json.dumps(document))
        session = sts.assume_role(RoleArn=arn, RoleSessionName=function)["Credentials"]
        (out / f"{function}.env").write_text(
            f"AWS_ACCESS_KEY_ID={session['AccessKeyId']}\n"
            f"AWS_SECRET_ACCESS_KEY={session['SecretAccessKey']}\n"
            f"AWS_SESSION_TOKEN={session['SessionToken']}\n"
        )
        statements = sum(len(d.get("Statement", [])) for _, d in policies)
        print(f"{function}: role {name} ({statements} statements), session written")
    s3 = boto3.client("s3", endpoint_url=args.endpoint, region_name=args.region)
    for logical, resource in stack.resources.items():
        if resource["Type"] == "AWS::S3::Bucket":
            s3.create_bucket(Bucket=stack.physical_name(logical))
            print(f"bucket {stack.physical_name(logical)} ({logical})")
    events = boto3.client("events", endpoint_url=args.endpoint, region_name=args.region)
    sqs = boto3.client("sqs", endpoint_url=args.endpoint, region_name=args.region)
    for logical, resource in stack.resources.items():
        if resource["Type"] == "AWS::Events::EventBus":
            events.create_event_bus(Name=stack.physical_name(logical))
    routes = []
    for rule, function, bus, pattern in stack.event_rules():
        queue = f"{args.stack}-{rule}"[:80]
        url = sqs.create_queue(QueueName=queue)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name=rule, EventBusName=bus, EventPattern=json.dumps(pattern))
        events.put_targets(Rule=rule, EventBusName=bus, Targets=[{"Id": "function", "Arn": arn}])
        routes.append({"rule": rule, "function": function, "queue_url": url})
        print(f"{function}: rule {rule} on bus {bus}, delivered to {url}")
    (out / "routes.json").write_text(json.dumps(routes, indent=2) + "\n")
    bus = next(
        (stack.physical_name(k) for k, r in stack.resources.items()
         if r["Type"] == "AWS::Events::EventBus"),
        None,
    )
    buckets = "".join(f"{k}={v}\n" for k, v in sorted(stack.bucket_variables().items()))
    (out / "stack.env").write_text(
        f"TRAINYARD_TABLE={args.table}\nTRAINYARD_EVENT_BUS={bus}\n{buckets}"
    )


if __name__ == "__main__":
    sys.exit(main())
