"""A stand-in for the AWS a deployed Trainyard talks to, as strict as AWS about who may do what.

One loopback HTTP endpoint serves moto (DynamoDB, EventBridge, SQS, S3, IAM, STS; in this process)
and forwards SageMaker's API to the SageMaker emulator (`--sagemaker URL`). Every request is
authorized first, as IAM would:

- the caller is the access key in the request's SigV4 `Authorization` header: an IAM user's key
  or an assumed role's temporary key that moto issued (the signature is checked with moto's own
  SigV4 check), or the account's root key (`--root-key`, default `test`), which may do anything;
- each request is read as the IAM actions and resources AWS authorizes it as: a DynamoDB
  `TransactWriteItems` is a `PutItem`/`UpdateItem`/`DeleteItem`/`ConditionCheckItem` on each
  item's table, a `BatchGetItem` a `BatchGetItem` on each table, a `Query` on an index is on
  `table/T/index/I`, an EventBridge `PutEvents` is on each entry's bus, an S3 request (path
  style) is `s3:GetObject`/`PutObject`/`DeleteObject` on `arn:aws:s3:::BUCKET/KEY` or
  `s3:ListBucket` on the bucket, a SageMaker
  `CreateTrainingJob` also needs `iam:PassRole` on its `RoleArn` (with
  `iam:PassedToService` = `sagemaker.amazonaws.com`) and, with `Tags`, `sagemaker:AddTags`;
- the caller's policies (moto's IAM: inline and attached) are evaluated with moto's evaluator
  against those resources. moto's own access control is left off: it checks DynamoDB and
  EventBridge actions against the resource `*`, which no least-privilege policy allows.

A refused request gets AWS's answer (`AccessDeniedException`, `UnrecognizedClientException`,
`InvalidSignatureException`) and is recorded. `GET /_stand/audit` returns what was allowed (per
principal and action), every refusal and the faults injected, so a test can assert that nothing
was refused even where the code under test tolerates a failed call.

DynamoDB behaves as DynamoDB does, where moto is kinder ([`Faults`], set with `--faults JSON` or
`POST /_stand/faults`):

- global secondary indexes lag: every `Query`/`Scan` with an `IndexName` is answered from a
  replica of the table that receives each written item's new image `index_lag_ms` later (base
  table reads stay consistent);
- `TransactWriteItems` is idempotent in its `ClientRequestToken` for 10 minutes, as DynamoDB's
  is (the SDKs fill the token, and reuse it when they retry): a repeat is answered with success
  and not applied again, a repeat with other parameters is `IdempotentParameterMismatch`;
- seeded faults, each a rate per request, only on the SDK's first attempts (`attempts`, from the
  `amz-sdk-request` header, so that a retry can get through): `throttle`
  (`ProvisionedThroughputExceededException`/`ThrottlingException`), `internal` (500), `conflict`
  (`TransactionCanceledException` with `TransactionConflict` for a transaction,
  `TransactionConflictException` for a single-item write), `lost` (a write applied, its
  answer replaced by a 500, so the SDK retries a write that already happened), and
  `unprocessed` (a `BatchGetItem` answered for part of its keys, the rest returned in
  `UnprocessedKeys`, which the SDK does not retry);
- a query reads its key range only, and names its last item whenever it stopped at its `Limit`
  (`queries_read_their_key_range`).

Usage: python aws_stand.py [--sagemaker http://127.0.0.1:PORT] [--listen 127.0.0.1:0]
           [--faults '{"seed": 1, "index_lag_ms": 500, "throttle": 0.05, "lost": 0.05}']
Prints `aws stand listening on http://127.0.0.1:PORT` once it serves.
"""

import argparse
import hashlib
import heapq
import io
import json
import os
import random
import sys
import threading
import time
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


def s3_checks(method, path, query):
    """(operation, checks) of a path-style S3 request (`/bucket` or `/bucket/key`): what AWS
    authorizes it as, on the bucket's or the object's ARN."""
    bucket, _, key = path.lstrip("/").partition("/")
    form = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    if not key:
        operation = {
            "GET": "ListObjectsV2" if form.get("list-type") == "2" else "ListObjects",
            "HEAD": "HeadBucket",
            "PUT": "CreateBucket",
            "DELETE": "DeleteBucket",
        }.get(method, method)
        action = {
            "ListObjectsV2": "ListBucket", "ListObjects": "ListBucket", "HeadBucket": "ListBucket",
        }.get(operation, operation)
        return operation, [(f"s3:{action}", f"arn:{PARTITION}:s3:::{bucket}")]
    operation = {
        "GET": "GetObject", "HEAD": "HeadObject", "PUT": "PutObject", "DELETE": "DeleteObject",
    }.get(method, method)
    action = "GetObject" if operation == "HeadObject" else operation
    return operation, [(f"s3:{action}", f"arn:{PARTITION}:s3:::{bucket}/{key}")]


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


def checks_for(service, headers, body_bytes, query, region, method="POST", path="/"):
    """The (action, resource) pairs a request needs, and its operation's name."""
    if service == "s3":
        return s3_checks(method, path, query)
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
    if service == "iam" and operation in IAM_NAMED:
        kind, member = IAM_NAMED[operation]
        return operation, [(f"iam:{operation}",
                            f"arn:{PARTITION}:iam::{ACCOUNT}:{kind}/{form.get(member, '')}")]
    return operation, [(f"{service}:{operation}", "*")]


# IAM reads of one role or user, authorized on that role's or user's ARN.
IAM_NAMED = {"ListRoleTags": ("role", "RoleName"), "ListUserTags": ("user", "UserName")}


# --- DynamoDB as it behaves ------------------------------------------------------------------

DYNAMODB_TARGET = "DynamoDB_20120810"
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}
IDEMPOTENCY_WINDOW_S = 600
REPLICA_SUFFIX = ".lagged-index-replica"


def dynamodb_error(status, code, message, **extra):
    body = {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message, **extra}
    return status, {"Content-Type": "application/x-amz-json-1.0", "x-amzn-ErrorType": code}, \
        json.dumps(body).encode()


def sdk_attempt(headers):
    """The SDK's attempt number (`amz-sdk-request: attempt=2; max=3`); 1 when absent."""
    for part in headers.get("Amz-Sdk-Request", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == "attempt" and value.isdigit():
            return int(value)
    return 1


class Faults:
    """What is done to DynamoDB requests: seeded fault rates and the index lag."""

    KINDS = ("throttle", "internal", "conflict", "lost", "unprocessed")

    def __init__(self, spec=None):
        self.lock = threading.Lock()
        self.configure(spec or {})

    def configure(self, spec):
        unknown = set(spec) - {"seed", "index_lag_ms", "attempts", *self.KINDS}
        if unknown:
            raise ValueError(f"unknown fault settings {sorted(unknown)}")
        with self.lock:
            self.spec = dict(spec)
            self.rng = random.Random(spec.get("seed", 0))
            self.index_lag_ms = int(spec.get("index_lag_ms", 0))
            self.attempts = int(spec.get("attempts", 1))
            self.rates = {kind: float(spec.get(kind, 0)) for kind in self.KINDS}
            self.injected = {kind: 0 for kind in self.KINDS}

    def draw(self, operation, attempt):
        """The fault for one request, or None."""
        with self.lock:
            if attempt > self.attempts:
                return None
            for kind in self.KINDS:
                rate = self.rates[kind]
                if kind == "conflict" and operation not in WRITES - {"BatchWriteItem"}:
                    continue
                if kind == "lost" and operation not in WRITES:
                    continue
                if kind == "unprocessed" and operation != "BatchGetItem":
                    continue
                if rate and self.rng.random() < rate:
                    self.injected[kind] += 1
                    return kind
            return None

    def report(self):
        with self.lock:
            return {"settings": self.spec, "injected": dict(self.injected)}


class Direct:
    """moto's DynamoDB called in this process, past the gate and the faults."""

    def __init__(self, moto_app, region="us-east-1"):
        from werkzeug.test import Client

        self.client = Client(moto_app)
        self.region = region

    def call(self, operation, body):
        try:
            return self.send(operation, body)
        finally:
            if operation in WRITES or operation.endswith("Table"):
                tables_written()

    def send(self, operation, body):
        response = self.client.post("/", data=json.dumps(body), headers={
            "Authorization": f"AWS4-HMAC-SHA256 Credential=test/20260101/{self.region}/dynamodb/"
                             "aws4_request, SignedHeaders=host, Signature=0",
            "X-Amz-Target": f"{DYNAMODB_TARGET}.{operation}",
            "Content-Type": "application/x-amz-json-1.0",
        })
        return response.status_code, json.loads(response.get_data() or b"{}")


class LaggingIndexes:
    """A replica of each table that gets every written item's image `lag` later; index reads go
    to it. Images are applied in the order they were taken, so the replica converges."""

    def __init__(self, direct, faults):
        self.direct = direct
        self.faults = faults
        self.key_schemas = {}
        self.pending = []
        self.sequence = 0
        self.cond = threading.Condition()
        threading.Thread(target=self.apply_due, daemon=True).start()

    def created(self, body):
        self.key_schemas[body["TableName"]] = [k["AttributeName"] for k in body["KeySchema"]]
        replica = dict(body, TableName=body["TableName"] + REPLICA_SUFFIX)
        replica.pop("StreamSpecification", None)
        self.direct.call("CreateTable", replica)

    def deleted(self, body):
        self.key_schemas.pop(body.get("TableName"), None)
        self.direct.call("DeleteTable", {"TableName": body.get("TableName", "") + REPLICA_SUFFIX})

    def keys_of(self, table):
        if table not in self.key_schemas:
            status, described = self.direct.call("DescribeTable", {"TableName": table})
            if status != 200:
                return None
            self.key_schemas[table] = [k["AttributeName"] for k in described["Table"]["KeySchema"]]
        return self.key_schemas[table]

    def written(self, operation, body):
        """Takes the new image of every item the write touched and schedules it."""
        touched = []  # (table, item or key)
        if operation in ("PutItem", "UpdateItem", "DeleteItem"):
            touched.append((body["TableName"], body.get("Item") or body.get("Key")))
        elif operation == "TransactWriteItems":
            for item in body.get("TransactItems", []):
                for kind, part in item.items():
                    if kind != "ConditionCheck":
                        touched.append((part["TableName"], part.get("Item") or part.get("Key")))
        elif operation == "BatchWriteItem":
            for table, requests in body.get("RequestItems", {}).items():
                for request in requests:
                    for part in request.values():
                        touched.append((table, part.get("Item") or part.get("Key")))
        due = time.monotonic() + self.faults.index_lag_ms / 1000
        images = []
        for table, item in touched:
            names = self.keys_of(table)
            if not names or table.endswith(REPLICA_SUFFIX):
                continue
            key = {name: item[name] for name in names if name in item}
            status, found = self.direct.call(
                "GetItem", {"TableName": table, "Key": key, "ConsistentRead": True})
            if status == 200:
                images.append((table, key, found.get("Item")))
        with self.cond:
            for table, key, image in images:
                self.sequence += 1
                heapq.heappush(self.pending, (due, self.sequence, table, key, image))
            self.cond.notify()
        if self.faults.index_lag_ms == 0:
            self.flush()

    def apply(self, table, key, image):
        replica = table + REPLICA_SUFFIX
        if image is None:
            self.direct.call("DeleteItem", {"TableName": replica, "Key": key})
        else:
            self.direct.call("PutItem", {"TableName": replica, "Item": image})

    def take_due(self, now):
        with self.cond:
            due = []
            while self.pending and self.pending[0][0] <= now:
                due.append(heapq.heappop(self.pending))
            return due

    def flush(self):
        for _, _, table, key, image in self.take_due(float("inf")):
            self.apply(table, key, image)

    def apply_due(self):
        while True:
            with self.cond:
                wait = self.pending[0][0] - time.monotonic() if self.pending else None
                if wait is None or wait > 0:
                    self.cond.wait(timeout=wait)
            for _, _, table, key, image in self.take_due(time.monotonic()):
                self.apply(table, key, image)


_ROLLBACK = threading.local()


def restore_points_of_the_named_items():
    """Makes moto's restore point for a `TransactWriteItems` cost what the transaction names,
    not what the table holds. Behaviour is unchanged; only the cost of a transaction is.

    moto deep-copies every table a transaction names (once per part) before applying it, so
    that it can put the copy back if the transaction is cancelled. That copy grows with the
    table: at 25,000 jobs each transaction took seconds, and the cycle over 1,000 shares of
    docs/storage-dynamodb.md could not be measured. A transaction changes only the items it
    names, so the restore point made here is a copy of the table's item map that shares every
    other item (no write of this transaction touches them) and holds deep copies of the named
    ones. Tested by `test_a_cancelled_transaction_leaves_every_item_as_it_was`."""
    import collections
    import copy

    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    if getattr(Table, "_restore_points_of_named_items", False):
        return
    apply = DynamoDBBackend.transact_write_items

    def transact_write_items(backend, transact_items):
        named = collections.defaultdict(set)  # table name -> {(hash, range)}
        for part in transact_items:
            for kind, op in part.items():
                table = backend.tables.get(op.get("TableName")) if isinstance(op, dict) else None
                attrs = op.get("Item") if kind == "Put" else op.get("Key")
                if table is None or not isinstance(attrs, dict):
                    continue
                hash_value = attrs.get(table.hash_key_attr)
                range_value = attrs.get(table.range_key_attr) if table.has_range_key else None
                if hash_value is None or (table.has_range_key and range_value is None):
                    continue  # moto refuses it before writing anything
                named[table.name].add((DynamoType(hash_value),
                                       None if range_value is None else DynamoType(range_value)))
        _ROLLBACK.named = named
        try:
            return apply(backend, transact_items)
        finally:
            _ROLLBACK.named = None

    def deepcopy(table, memo):
        named = getattr(_ROLLBACK, "named", None)
        if named is None:
            # Any other copy is moto's own, whole.
            whole = Table.__new__(Table)
            memo[id(table)] = whole
            whole.__dict__.update(copy.deepcopy(table.__dict__, memo))
            return whole
        restore = copy.copy(table)
        # A dict's copy keeps its keys' hashes (moto's keys hash slowly, in Python); only the
        # entries a write of this transaction can change are copied further.
        restore.items = copy.copy(table.items)
        for hash_value, range_value in named.get(table.name, ()):
            if hash_value not in table.items:
                continue
            if range_value is None:
                restore.items[hash_value] = copy.deepcopy(table.items[hash_value])
                continue
            if restore.items[hash_value] is table.items[hash_value]:
                restore.items[hash_value] = dict(table.items[hash_value])
            if range_value in table.items[hash_value]:
                restore.items[hash_value][range_value] = copy.deepcopy(table.items[hash_value][range_value])
        return restore

    DynamoDBBackend.transact_write_items = transact_write_items
    Table.__deepcopy__ = deepcopy
    Table._restore_points_of_named_items = True


def sorting_by_plain_values():
    """Makes moto sort a table's items, and an index query's matches, by their keys' plain values
    (text, `Decimal`, bytes) rather than by its `DynamoType`s, whose comparisons convert both
    sides again each time: the same order (a `DynamoType` compares by that value), a fraction of
    the time. moto sorts the whole table for every query, and an index query's matches again: a
    query whose partition held 24,000 jobs took five seconds in those sorts (before its `Limit`
    applies), which made a cycle over 1,000 shares unmeasurable."""
    from moto.dynamodb.models.table import Table

    if getattr(Table, "_sorting_by_plain_values", False):
        return

    def sorted_items(table, hash_key_attrs, range_key_attrs, items):
        names = table._generate_attr_to_sort_by(hash_key_attrs, range_key_attrs)
        items.sort(key=lambda item: tuple(item.attrs[name].cast_value for name in names))
        return items

    def all_items(table):
        # Every query and scan starts from the whole table in key order (moto sorts it each time).
        if table.range_key_attr:
            items = [item for partition in table.items.values() for item in partition.values()]
        else:
            items = list(table.items.values())
        return sorted(items, key=lambda x: (x.hash_key.cast_value, x.range_key.cast_value)
                      if x.range_key else x.hash_key.cast_value)

    Table.sorted_items = sorted_items
    Table.all_items = all_items
    Table._sorting_by_plain_values = True


_QUERY = threading.local()
# Bumped after every write the stand passes to moto: index partitions cached for queries are
# valid for one generation.
_GENERATION = [0]
_PARTITIONS = {}


def tables_written():
    _GENERATION[0] += 1


def queries_read_their_key_range():
    """Makes a query read the items its key condition selects, as DynamoDB does, instead of
    the whole table, and return a `LastEvaluatedKey` whenever it stopped at its `Limit`.

    moto starts every query from the whole table in key order and walks the partition from its
    start, computing each item's size on the way: a query for one share's heads in a partition
    of 24,000 jobs took a second, and a cycle over 1,000 shares could not finish in an hour.
    DynamoDB reads only the items of the key condition's range: its `Limit` and its 1 MB page
    count those (moto counted the sizes of the items before the range too) and, when the query
    stops because it evaluated `Limit` items, the answer has a `LastEvaluatedKey` even if no
    item is left (moto gave one only if some item of the partition followed). Tested by
    `test_a_query_reads_its_key_range_and_stops_at_its_limit_with_a_key`."""
    from moto.dynamodb.models.dynamo_type import Item
    from moto.dynamodb.models.table import Table

    if getattr(Table, "_queries_read_their_key_range", False):
        return
    query = Table.query
    all_items = Table.all_items
    sorted_items = Table.sorted_items

    def range_test(table):
        """Whether an item of the query's partition is in its key condition's range."""
        index_name, _, _, range_conditions, comparison, values = _QUERY.keys
        if not comparison:
            return lambda item: True
        if not index_name:
            return lambda item: item.range_key.compare(comparison, values)
        name = range_conditions[-1][0] if range_conditions else next(
            (k["AttributeName"] for k in table.get_index(index_name).schema
             if k["KeyType"] == "RANGE"), None)

        def in_range(item):
            found = item.attrs.get(name) if name else None
            return bool(found) and found.compare(comparison, values)
        return in_range

    def index_partition(table, hash_conditions):
        """The items whose attributes equal `hash_conditions`' values: the table's items
        grouped once per generation by the values of those attributes."""
        names = tuple(name for name, _ in hash_conditions)
        cache_key = (id(table), names)
        generation = _GENERATION[0]
        cached = _PARTITIONS.get(cache_key)
        if cached is None or cached[0] != generation:
            groups = {}
            for partition in list(table.items.values()):
                for item in (list(partition.values()) if table.range_key_attr else [partition]):
                    values = [item.attrs.get(name) for name in names]
                    if not isinstance(item, Item) or not all(values):
                        continue
                    key = tuple((v.type, v.cast_value) for v in values)
                    try:
                        groups.setdefault(key, []).append(item)
                    except TypeError:
                        continue  # a list or map: no index key of any item equals it
            cached = (generation, groups)
            _PARTITIONS[cache_key] = cached
        wanted = tuple((value.type, value.cast_value) for _, value in hash_conditions)
        return cached[1].get(wanted, [])

    def keyed_all_items(table):
        keys = getattr(_QUERY, "keys", None)
        if keys is None:
            return all_items(table)
        index_name, hash_key, hash_conditions = keys[0], keys[1], keys[2]
        if index_name:
            if not hash_conditions:
                return all_items(table)  # moto's own rules for a query without them
            # In any order: moto sorts an index query's matches itself.
            candidates = index_partition(table, hash_conditions)
        else:
            partition = table.items.get(hash_key)
            candidates = [] if partition is None else (
                list(partition.values()) if table.range_key_attr else [partition])
        in_range = range_test(table)
        matches = [item for item in candidates if isinstance(item, Item) and in_range(item)]
        _QUERY.matches = matches
        return matches

    def recorded_sorted_items(table, hash_key_attrs, range_key_attrs, items):
        first = getattr(_QUERY, "first", None)
        if first is not None and len(items) > first:
            # A query with a `Limit` and no start key reads the first `Limit` items of its range
            # and stops at the next (or sooner, at 1 MB): the rest need no order.
            names = table._generate_attr_to_sort_by(hash_key_attrs, range_key_attrs)
            pick = heapq.nsmallest if _QUERY.forward else heapq.nlargest
            items = pick(first, items, key=lambda item: tuple(
                item.attrs[name].cast_value for name in names))
        ordered = sorted_items(table, hash_key_attrs, range_key_attrs, items)
        if getattr(_QUERY, "keys", None) is not None:
            _QUERY.order = ordered  # moto reverses this list in place for a backward query
        return ordered

    def keyed_query(table, hash_key, range_comparison, range_objs, limit, exclusive_start_key,
                    scan_index_forward, projection_expressions, index_name=None,
                    consistent_read=False, filter_expression=None, hash_key_conditions=None,
                    range_key_conditions=None, **filter_kwargs):
        if filter_kwargs:  # the legacy QueryFilter: moto's own walk
            return query(table, hash_key, range_comparison, range_objs, limit,
                         exclusive_start_key, scan_index_forward, projection_expressions,
                         index_name, consistent_read, filter_expression,
                         hash_key_conditions=hash_key_conditions,
                         range_key_conditions=range_key_conditions, **filter_kwargs)
        _QUERY.keys = (index_name, hash_key, hash_key_conditions or [], range_key_conditions,
                       range_comparison, range_objs)
        _QUERY.order = None
        _QUERY.matches = []
        _QUERY.first = limit + 1 if limit and not exclusive_start_key else None
        _QUERY.forward = scan_index_forward
        try:
            results, evaluated, last_key = query(
                table, hash_key, range_comparison, range_objs, limit, exclusive_start_key,
                scan_index_forward, projection_expressions, index_name, consistent_read,
                filter_expression, hash_key_conditions=hash_key_conditions,
                range_key_conditions=range_key_conditions)
            order, matches = _QUERY.order, _QUERY.matches
        finally:
            _QUERY.keys = _QUERY.order = _QUERY.first = _QUERY.matches = None
        if last_key is None and limit and evaluated == limit:
            # Every item of the range after the start was evaluated (each one matches), and
            # there were `Limit` of them: DynamoDB stops there and names the last one.
            if order is None:  # a table query: moto sorted the partition by its range key
                order = sorted(matches, reverse=not scan_index_forward,
                               key=lambda item: item.range_key.cast_value if item.range_key else 0)
            if order:
                last_key = table._get_last_evaluated_key(order[-1], index_name)
        return results, evaluated, last_key

    Table.query = keyed_query
    Table.all_items = keyed_all_items
    Table.sorted_items = recorded_sorted_items
    Table._queries_read_their_key_range = True


class _Untracked(list):
    """An instance list that keeps nothing (see `no_instance_tracking`)."""

    def append(self, _instance):
        pass


def no_instance_tracking():
    """Stops moto from keeping every DynamoDB model object it ever made.

    moto appends each instance of its models to a class-wide list, for its dashboard, and never
    lets go: every item written, every copy a query or a transaction's restore point makes, every
    table copy. In a long run the stand's memory grew with the requests it had served, not with
    what its tables held (past 20 GB during the cycle over 1,000 shares of
    docs/storage-dynamodb.md). The stand has no dashboard, so these lists keep nothing; objects
    live as long as the tables hold them. Tested by
    `test_the_stand_keeps_no_item_its_tables_do_not_hold`."""
    from moto.core.model_instances import model_data
    import moto.dynamodb.models  # noqa: F401 (defines the classes)

    for model in model_data["dynamodb"].values():
        if not isinstance(model.instances_tracked, _Untracked):
            model.instances_tracked = _Untracked()


class DynamoDB:
    """DynamoDB's behaviour around moto: faults, idempotent transactions, lagging indexes."""

    def __init__(self, moto_app, faults):
        restore_points_of_the_named_items()
        sorting_by_plain_values()
        queries_read_their_key_range()
        no_instance_tracking()
        self.moto_app = moto_app
        self.faults = faults
        self.indexes = LaggingIndexes(Direct(moto_app), faults)
        self.tokens = {}  # ClientRequestToken -> (request digest, answer, when)
        self.tokens_lock = threading.Lock()
        # Writes are applied one at a time, so that the images the replica gets are in order.
        self.write_lock = threading.Lock()

    def __call__(self, environ, headers, body, start_response, respond):
        operation, request = json_operation(headers, body)
        fault = self.faults.draw(operation, sdk_attempt(headers))
        if fault == "throttle":
            code = self.faults.rng.choice(
                ["ProvisionedThroughputExceededException", "ThrottlingException"])
            return respond(start_response, *dynamodb_error(400, code, "Rate of requests exceeds the allowed throughput."))
        if fault == "internal":
            return respond(start_response, *dynamodb_error(500, "InternalServerError", "Internal server error"))
        if fault == "conflict":
            if operation == "TransactWriteItems":
                reasons = [{"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}]
                reasons += [{"Code": "None"}] * (len(request.get("TransactItems", [])) - 1)
                return respond(start_response, *dynamodb_error(
                    400, "TransactionCanceledException",
                    "Transaction cancelled, please refer cancellation reasons for specific reasons "
                    f"[{', '.join(r['Code'] for r in reasons)}]",
                    CancellationReasons=reasons))
            return respond(start_response, *dynamodb_error(
                400, "TransactionConflictException", "Transaction is ongoing for the item"))

        if fault == "unprocessed":
            return respond(start_response, *self.partly_processed(environ, request))

        if operation == "TransactWriteItems" and request.get("ClientRequestToken"):
            answer = self.repeated(request)
            if answer is not None:
                return respond(start_response, *answer)
        if request.get("IndexName") and operation in ("Query", "Scan"):
            replica = request["TableName"] + REPLICA_SUFFIX
            status, answer_headers, answer = self.forward(environ, dict(request, TableName=replica))
            answer = answer.replace(json.dumps(replica).encode(), json.dumps(request["TableName"]).encode())
            return respond(start_response, status, answer_headers, answer)
        if operation in WRITES:
            with self.write_lock:
                status, answer_headers, answer = self.forward(environ, request)
                tables_written()
                if status == 200:
                    self.indexes.written(operation, request)
        else:
            status, answer_headers, answer = self.forward(environ, request)
            if operation.endswith("Table"):
                tables_written()
        if status == 200 and operation == "CreateTable":
            self.indexes.created(request)
        if status == 200 and operation == "DeleteTable":
            self.indexes.deleted(request)
        if status == 200 and operation == "TransactWriteItems" and request.get("ClientRequestToken"):
            self.remember(request, (status, answer_headers, answer))
        if fault == "lost" and status == 200:
            return respond(start_response, *dynamodb_error(500, "InternalServerError", "Internal server error"))
        return respond(start_response, status, answer_headers, answer)

    def partly_processed(self, environ, request):
        """A `BatchGetItem` answered for part of its keys, the rest (the later half of each
        table's) in `UnprocessedKeys`, as DynamoDB answers when it throttles part of a batch:
        a success the SDK does not retry, so the caller must ask again for the rest. At least
        one key is answered (with none, DynamoDB refuses the whole batch as a throttle)."""
        answered, left = {}, {}
        for table, wanted in request.get("RequestItems", {}).items():
            keys = wanted.get("Keys", [])
            kept = len(keys) - len(keys) // 2
            answered[table] = dict(wanted, Keys=keys[:kept])
            if keys[kept:]:
                left[table] = dict(wanted, Keys=keys[kept:])
        status, headers, answer = self.forward(environ, dict(request, RequestItems=answered))
        if status == 200 and left:
            body = json.loads(answer)
            body["UnprocessedKeys"] = left
            answer = json.dumps(body).encode()
        return status, headers, answer

    @staticmethod
    def digest(request):
        request = {k: v for k, v in request.items() if k != "ClientRequestToken"}
        return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()

    def repeated(self, request):
        now = time.monotonic()
        with self.tokens_lock:
            # Oldest first (see `remember`), so expiry stops at the first token still current.
            while self.tokens:
                token, (_, _, at) = next(iter(self.tokens.items()))
                if now - at <= IDEMPOTENCY_WINDOW_S:
                    break
                del self.tokens[token]
            seen = self.tokens.get(request["ClientRequestToken"])
        if seen is None:
            return None
        digest, answer, _ = seen
        if digest != self.digest(request):
            return dynamodb_error(400, "IdempotentParameterMismatchException",
                                  "The request uses the same client token as a previous, but "
                                  "non-identical request.")
        return answer

    def remember(self, request, answer):
        with self.tokens_lock:
            # Moved to the end, so that the dict stays in the order the tokens were remembered.
            self.tokens.pop(request["ClientRequestToken"], None)
            self.tokens[request["ClientRequestToken"]] = (self.digest(request), answer, time.monotonic())

    def forward(self, environ, request):
        """moto's answer to `request`: (status, headers, body)."""
        body = json.dumps(request).encode()
        inner = dict(environ, CONTENT_LENGTH=str(len(body)))
        inner["wsgi.input"] = io.BytesIO(body)
        status, headers, answer = call(self.moto_app, inner)
        return int(status.split()[0]), dict(headers), answer


def call(app, environ):
    """A WSGI app's whole answer: (status line, header pairs, body)."""
    captured = {}

    def start(status, headers, exc_info=None):
        captured["status"], captured["headers"] = status, headers

    chunks = app(environ, start)
    answer = b"".join(chunks)
    if hasattr(chunks, "close"):
        chunks.close()
    return captured["status"], captured["headers"], answer


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

    def __init__(self, moto_app, sagemaker_url, root_key, faults=None):
        self.moto_app = moto_app
        self.sagemaker_url = (sagemaker_url or "").rstrip("/")
        self.root_key = root_key
        self.audit = Audit()
        self.faults = faults or Faults()
        self.dynamodb = DynamoDB(moto_app, self.faults)

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        if path == "/_stand/audit":
            report = dict(self.audit.report(), faults=self.faults.report())
            return self.respond(start_response, 200, {}, json.dumps(report).encode())
        if path == "/_stand/faults" and environ["REQUEST_METHOD"] == "POST":
            try:
                self.faults.configure(json.loads(body or b"{}"))
            except ValueError as error:
                return self.respond(start_response, 400, {}, json.dumps({"message": str(error)}).encode())
            return self.respond(start_response, 200, {}, json.dumps(self.faults.report()).encode())
        if path.startswith("/moto-api"):
            return self.moto_app(environ, start_response)
        headers = request_headers(environ)
        try:
            key, region, service = credential_scope(headers)
            principal, policies = self.caller(key, environ, headers, body, service)
            operation, checks = checks_for(
                service, headers, body, environ.get("QUERY_STRING", ""), region,
                environ["REQUEST_METHOD"], path,
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
            return self.refuse(start_response, refusal, s3=service == "s3")
        if service == "sagemaker":
            return self.forward_to_emulator(start_response, headers, body)
        if service == "dynamodb" and headers.get("X-Amz-Target", "").startswith(DYNAMODB_TARGET):
            return self.dynamodb(environ, headers, body, start_response, self.respond)
        if service == "s3" and operation in ("GetObject", "HeadObject") and policies is not None:
            return self.s3_read(environ, start_response, principal, policies, path)
        return self.moto_app(environ, start_response)

    def s3_read(self, environ, start_response, principal, policies, path):
        """An object read as S3 answers it: a key that does not exist is `NoSuchKey` (404) only
        to a caller that may list the bucket, and `AccessDenied` (403) to any other."""
        status, headers, answer = call(self.moto_app, environ)
        bucket = f"arn:{PARTITION}:s3:::{path.lstrip('/').partition('/')[0]}"
        if status.startswith("404") and not permitted(policies, "s3:ListBucket", bucket):
            self.audit.refuse({"principal": principal, "operation": "GetObject (missing key)",
                               "action": "s3:ListBucket", "resource": bucket})
            return self.refuse(start_response, Refusal(403, "AccessDeniedException", "Access Denied"), s3=True)
        start_response(status, headers)
        return [answer]

    def caller(self, key, environ, headers, body, service):
        """(principal ARN, policies; None for root) of the request's key, signature checked."""
        if key == self.root_key:
            return f"arn:{PARTITION}:iam::{ACCOUNT}:root", None
        from moto.iam.access_control import IAMRequest, S3IAMRequest

        path = environ.get("RAW_URI") or environ.get("PATH_INFO", "/")
        if environ.get("QUERY_STRING") and "?" not in path:
            path += "?" + environ["QUERY_STRING"]
        # S3 signs its payload hash as sent (`x-amz-content-sha256`), not the body.
        kind = S3IAMRequest if service == "s3" else IAMRequest
        try:
            request = kind(
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
        if not self.sagemaker_url:
            return self.refuse(start_response, Refusal(
                503, "ServiceUnavailable", "this stand forwards SageMaker nowhere (no --sagemaker)"))
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
        reason = {200: "OK", 400: "Bad Request", 403: "Forbidden", 500: "Internal Server Error",
                  503: "Service Unavailable"}.get(status, "Status")
        start_response(f"{status} {reason}", list(keep.items()))
        return [body]

    def refuse(self, start_response, refusal, s3=False):
        if s3:
            # S3 answers in XML, and a refusal is 403 `AccessDenied`.
            code = "AccessDenied" if refusal.code == "AccessDeniedException" else refusal.code
            status = 403 if code == "AccessDenied" else refusal.status
            message = refusal.message.replace("&", "&amp;").replace("<", "&lt;")
            body = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
            return self.respond(start_response, status, {"Content-Type": "application/xml"}, body)
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
    parser.add_argument("--sagemaker", help="the SageMaker emulator's URL")
    parser.add_argument("--root-key", default="test", help="the access key that may do anything")
    parser.add_argument("--faults", default="{}", help="DynamoDB fault settings, as JSON")
    args = parser.parse_args()
    try:
        faults = Faults(json.loads(args.faults))
    except ValueError as error:
        parser.error(f"--faults: {error}")
    host, _, port = args.listen.rpartition(":")
    if host not in ("127.0.0.1", "::1", "[::1]", "localhost"):
        parser.error(f"--listen {args.listen}: the stand serves loopback only")

    from werkzeug.serving import make_server
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication, MotoRequestHandler, create_backend_app)

    gate = Gate(DomainDispatcherApplication(create_backend_app), args.sagemaker, args.root_key, faults)
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
