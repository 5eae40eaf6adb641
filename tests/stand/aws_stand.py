"""A stand-in for the AWS a deployed Trainyard talks to, as strict as AWS about who may do what.

One loopback HTTP endpoint serves moto (DynamoDB, EventBridge, SQS, IAM, STS; in this process)
and forwards SageMaker's API to the SageMaker emulator (`--sagemaker URL`). Every request is
authorized first, as IAM would:

- the caller is the access key in the request's SigV4 `Authorization` header: an IAM user's key
  or an assumed role's temporary key that moto issued (the signature is checked with moto's own
  SigV4 check), or the account's root key (`--root-key`, default `test`), which may do anything;
- each request is read as the IAM actions and resources AWS authorizes it as: a DynamoDB
  `TransactWriteItems` is a `PutItem`/`UpdateItem`/`DeleteItem`/`ConditionCheckItem` on each
  item's table, a `BatchGetItem` a `BatchGetItem` on each table, a `Query` on an index is on
  `table/T/index/I`, an EventBridge `PutEvents` is on each entry's bus, a SageMaker
  `CreateTrainingJob` also needs `iam:PassRole` on its `RoleArn` (with
  `iam:PassedToService` = `sagemaker.amazonaws.com`) and, with `Tags`, `sagemaker:AddTags`;
- the caller's policies (moto's IAM: inline and attached) are evaluated with moto's evaluator
  against those resources. moto's own access control is left off: it checks DynamoDB and
  EventBridge actions against the resource `*`, which no least-privilege policy allows.

A refused request gets AWS's answer (`AccessDeniedException`, `UnrecognizedClientException`,
`InvalidSignatureException`) and is recorded. `GET /_stand/audit` returns what was allowed (per
principal and action) and every refusal, so a test can assert that nothing was refused even
where the code under test tolerates a failed call.

Usage: python aws_stand.py --sagemaker http://127.0.0.1:PORT [--listen 127.0.0.1:0]
Prints `aws stand listening on http://127.0.0.1:PORT` once it serves.
"""

import argparse
import io
import json
import os
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request

ACCOUNT = "123456789012"
PARTITION = "aws"


class Refusal(Exception):
    """A request AWS would refuse: (HTTP status, error code, message)."""

    def __init__(self, status, code, message):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def header_name(environ_key):
    """`HTTP_X_AMZ_DATE` -> `X-Amz-Date` (the spelling moto's SigV4 check looks up)."""
    return "-".join(word.capitalize() for word in environ_key[5:].split("_"))


def request_headers(environ):
    headers = {header_name(k): v for k, v in environ.items() if k.startswith("HTTP_")}
    for key, name in (("CONTENT_TYPE", "Content-Type"), ("CONTENT_LENGTH", "Content-Length")):
        if environ.get(key):
            headers[name] = environ[key]
    return headers


def credential_scope(headers):
    """(access key id, region, service) from a SigV4 Authorization header."""
    auth = headers.get("Authorization", "")
    scope = auth.partition("Credential=")[2].partition(",")[0].split("/")
    if len(scope) < 4 or not auth.startswith("AWS4-HMAC-SHA256"):
        raise Refusal(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
    return scope[0], scope[2], scope[3]


# --- what AWS authorizes each request as -------------------------------------------------------


def dynamodb_checks(operation, body, region):
    def table(name):
        return f"arn:{PARTITION}:dynamodb:{region}:{ACCOUNT}:table/{name}"

    transact_actions = {
        "ConditionCheck": "ConditionCheckItem",
        "Put": "PutItem",
        "Update": "UpdateItem",
        "Delete": "DeleteItem",
        "Get": "GetItem",
    }
    if operation in ("TransactWriteItems", "TransactGetItems"):
        checks = []
        for item in body.get("TransactItems", []):
            for kind, part in item.items():
                checks.append((f"dynamodb:{transact_actions[kind]}", table(part["TableName"])))
        return checks
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return [(f"dynamodb:{operation}", table(name)) for name in body.get("RequestItems", {})]
    if "TableName" not in body:
        return [(f"dynamodb:{operation}", "*")]
    resource = table(body["TableName"])
    if body.get("IndexName"):
        resource += f"/index/{body['IndexName']}"
    return [(f"dynamodb:{operation}", resource)]


def events_checks(operation, body, region):
    def bus(name):
        if name.startswith("arn:"):
            return name
        return f"arn:{PARTITION}:events:{region}:{ACCOUNT}:event-bus/{name}"

    if operation == "PutEvents":
        buses = {entry.get("EventBusName") or "default" for entry in body.get("Entries", [])}
        return [("events:PutEvents", bus(name)) for name in sorted(buses)]
    if operation in ("CreateEventBus", "DeleteEventBus", "DescribeEventBus"):
        return [(f"events:{operation}", bus(body.get("Name", "default")))]
    return [(f"events:{operation}", "*")]


def sqs_checks(operation, body, region):
    url = body.get("QueueUrl")
    if not url:
        return [(f"sqs:{operation}", "*")]
    name = url.rstrip("/").rsplit("/", 1)[-1]
    return [(f"sqs:{operation}", f"arn:{PARTITION}:sqs:{region}:{ACCOUNT}:{name}")]


def sagemaker_checks(operation, body, region):
    def training_job(name):
        # SageMaker's ARNs carry the name in lower case.
        return f"arn:{PARTITION}:sagemaker:{region}:{ACCOUNT}:training-job/{name.lower()}"

    if operation in ("CreateTrainingJob", "DescribeTrainingJob", "StopTrainingJob"):
        resource = training_job(body.get("TrainingJobName", ""))
        checks = [(f"sagemaker:{operation}", resource)]
        if operation == "CreateTrainingJob":
            checks.append(("iam:PassRole", body.get("RoleArn", "")))
            if body.get("Tags"):
                checks.append(("sagemaker:AddTags", resource))
        return checks
    if operation in ("AddTags", "DeleteTags", "ListTags"):
        return [(f"sagemaker:{operation}", body.get("ResourceArn", "*"))]
    return [(f"sagemaker:{operation}", "*")]


JSON_SERVICES = {"dynamodb": dynamodb_checks, "events": events_checks, "sqs": sqs_checks}
# Condition keys AWS sets for an action (the only one Trainyard's policies test).
CONDITION_VALUES = {"iam:PassRole": {"iam:PassedToService": "sagemaker.amazonaws.com"}}


def json_operation(headers, body_bytes):
    """(operation, body) of a JSON-protocol request (`X-Amz-Target: Prefix.Operation`)."""
    target = headers.get("X-Amz-Target", "")
    operation = target.rpartition(".")[2]
    try:
        body = json.loads(body_bytes or b"{}")
    except ValueError:
        body = {}
    return operation, body if isinstance(body, dict) else {}


def checks_for(service, headers, body_bytes, query, region):
    """The (action, resource) pairs a request needs, and its operation's name."""
    if service == "sagemaker":
        operation, body = json_operation(headers, body_bytes)
        return operation, sagemaker_checks(operation, body, region)
    if service in JSON_SERVICES and headers.get("X-Amz-Target"):
        operation, body = json_operation(headers, body_bytes)
        return operation, JSON_SERVICES[service](operation, body, region)
    # Query protocol (IAM, STS, SQS's older clients): Action= in the query or the form body.
    form = dict(urllib.parse.parse_qsl(query))
    if body_bytes and "x-www-form-urlencoded" in headers.get("Content-Type", ""):
        form.update(urllib.parse.parse_qsl(body_bytes.decode()))
    operation = form.get("Action", "")
    if service == "sqs":
        return operation, sqs_checks(operation, form, region)
    return operation, [(f"{service}:{operation}", "*")]


# --- the gate --------------------------------------------------------------------------------


class Audit:
    def __init__(self):
        self.lock = threading.Lock()
        self.allowed = {}
        self.refused = []

    def allow(self, principal, action):
        with self.lock:
            per = self.allowed.setdefault(principal, {})
            per[action] = per.get(action, 0) + 1

    def refuse(self, entry):
        with self.lock:
            self.refused.append(entry)
        print(f"REFUSED {json.dumps(entry)}", file=sys.stderr, flush=True)

    def report(self):
        with self.lock:
            return {"allowed": self.allowed, "refused": list(self.refused)}


class Gate:
    """WSGI middleware: authorizes each request, then hands it to moto or the emulator."""

    def __init__(self, moto_app, sagemaker_url, root_key):
        self.moto_app = moto_app
        self.sagemaker_url = sagemaker_url.rstrip("/")
        self.root_key = root_key
        self.audit = Audit()

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        if path == "/_stand/audit":
            return self.respond(start_response, 200, {}, json.dumps(self.audit.report()).encode())
        if path.startswith("/moto-api"):
            return self.moto_app(environ, start_response)
        headers = request_headers(environ)
        try:
            key, region, service = credential_scope(headers)
            principal, policies = self.caller(key, environ, headers, body, service)
            operation, checks = checks_for(
                service, headers, body, environ.get("QUERY_STRING", ""), region
            )
            for action, resource in checks:
                if policies is not None and not permitted(policies, action, resource):
                    entry = {"principal": principal, "operation": operation,
                             "action": action, "resource": resource}
                    self.audit.refuse(entry)
                    raise Refusal(
                        400,
                        "AccessDeniedException",
                        f"User: {principal} is not authorized to perform: {action} on "
                        f"resource: {resource} because no identity-based policy allows the "
                        f"{action} action",
                    )
                self.audit.allow(principal, action)
        except Refusal as refusal:
            return self.refuse(start_response, refusal)
        if service == "sagemaker":
            return self.forward_to_emulator(start_response, headers, body)
        return self.moto_app(environ, start_response)

    def caller(self, key, environ, headers, body, service):
        """(principal ARN, policies; None for root) of the request's key, signature checked."""
        if key == self.root_key:
            return f"arn:{PARTITION}:iam::{ACCOUNT}:root", None
        from moto.iam.access_control import IAMRequest

        path = environ.get("RAW_URI") or environ.get("PATH_INFO", "/")
        if environ.get("QUERY_STRING") and "?" not in path:
            path += "?" + environ["QUERY_STRING"]
        try:
            request = IAMRequest(
                account_id=ACCOUNT, method=environ["REQUEST_METHOD"], path=path, data={},
                body=body, headers=headers, action="Authorize",
            )
            request.check_signature()
        except Exception as error:  # moto raises its own HTTP exceptions
            code = type(error).__name__
            if "Signature" in code or "signature" in str(error):
                raise Refusal(400, "InvalidSignatureException",
                              "The request signature we calculated does not match the "
                              "signature you provided.") from None
            raise Refusal(400, "UnrecognizedClientException",
                          "The security token included in the request is invalid.") from None
        access_key = request._access_key
        return access_key.arn, access_key.collect_policies()

    def forward_to_emulator(self, start_response, headers, body):
        forwarded = {k: v for k, v in headers.items()
                     if k in ("Content-Type", "X-Amz-Target")}
        request = urllib.request.Request(self.sagemaker_url + "/", data=body, headers=forwarded,
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return self.respond(start_response, response.status,
                                    dict(response.headers), response.read())
        except urllib.error.HTTPError as error:
            return self.respond(start_response, error.code, dict(error.headers), error.read())
        except OSError as error:
            return self.refuse(start_response, Refusal(
                503, "ServiceUnavailable", f"the SageMaker emulator did not answer: {error}"))

    @staticmethod
    def respond(start_response, status, headers, body):
        keep = {k: v for k, v in headers.items()
                if k.lower() in ("content-type", "x-amzn-requestid", "x-amzn-errortype")}
        keep.setdefault("Content-Type", "application/json")
        keep["Content-Length"] = str(len(body))
        reason = {200: "OK", 400: "Bad Request", 403: "Forbidden"}.get(status, "Status")
        start_response(f"{status} {reason}", list(keep.items()))
        return [body]

    def refuse(self, start_response, refusal):
        body = json.dumps({"__type": refusal.code, "message": refusal.message}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.1",
                   "x-amzn-ErrorType": refusal.code}
        return self.respond(start_response, refusal.status, headers, body)


def permitted(policies, action, resource):
    """IAM's rule over the caller's policies: an explicit deny wins, else some allow is needed."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    allowed = False
    conditions = CONDITION_VALUES.get(action)
    for policy in policies:
        result = IAMPolicy(policy).is_action_permitted(
            action, resource, incoming_condition_values=conditions)
        if result == PermissionResult.DENIED:
            return False
        allowed = allowed or result == PermissionResult.PERMITTED
    return allowed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:0", help="loopback address to serve on")
    parser.add_argument("--sagemaker", required=True, help="the SageMaker emulator's URL")
    parser.add_argument("--root-key", default="test", help="the access key that may do anything")
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    if host not in ("127.0.0.1", "::1", "[::1]", "localhost"):
        parser.error(f"--listen {args.listen}: the stand serves loopback only")

    from werkzeug.serving import make_server
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication, MotoRequestHandler, create_backend_app)

    gate = Gate(DomainDispatcherApplication(create_backend_app), args.sagemaker, args.root_key)
    server = make_server(host.strip("[]"), int(port), gate, threaded=True,
                         request_handler=MotoRequestHandler)
    bound = server.server_address[1]
    # moto builds SQS queue URLs from it.
    os.environ.setdefault("MOTO_PORT", str(bound))
    print(f"aws stand listening on http://127.0.0.1:{bound}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
