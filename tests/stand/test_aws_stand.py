"""The AWS stand is a test oracle, so its strictness is tested: it must refuse what IAM refuses
(including the parts of a transaction and a PassRole without its condition) and allow what a
policy grants, and it must not be fooled by a wrong secret or an unknown key.

Runs the stand's gate in this process over moto, with a stub SageMaker that answers 200.
"""

import http.server
import json
import threading

import boto3
import botocore.config
import botocore.exceptions
import pytest
from werkzeug.serving import make_server

import aws_stand

REGION = "us-east-1"
ROOT = {"aws_access_key_id": "test", "aws_secret_access_key": "test", "region_name": REGION}
TABLE = "t"
TABLE_ARN = f"arn:aws:dynamodb:{REGION}:123456789012:table/{TABLE}"
TRAINING_ROLE = "arn:aws:iam::123456789012:role/Training"


class StubSageMaker(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/x"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def stand():
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app

    sagemaker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StubSageMaker)
    threading.Thread(target=sagemaker.serve_forever, daemon=True).start()
    gate = aws_stand.Gate(DomainDispatcherApplication(create_backend_app),
                          f"http://127.0.0.1:{sagemaker.server_address[1]}", "test")
    server = make_server("127.0.0.1", 0, gate, threaded=True, request_handler=MotoRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    dynamodb = boto3.client("dynamodb", endpoint_url=url, **ROOT)
    dynamodb.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                          KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
    yield url, gate
    server.shutdown()
    sagemaker.shutdown()


def session(url, name, statements):
    """Credentials of a role granted `statements`, assumed through the stand."""
    iam = boto3.client("iam", endpoint_url=url, **ROOT)
    trust = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
    arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    iam.put_role_policy(RoleName=name, PolicyName="p",
                        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}))
    creds = boto3.client("sts", endpoint_url=url, **ROOT).assume_role(
        RoleArn=arn, RoleSessionName=name)["Credentials"]
    return {"aws_access_key_id": creds["AccessKeyId"], "aws_secret_access_key": creds["SecretAccessKey"],
            "aws_session_token": creds["SessionToken"], "region_name": REGION}


def refused(call, code="AccessDeniedException"):
    with pytest.raises(botocore.exceptions.ClientError) as error:
        call()
    assert error.value.response["Error"]["Code"] == code, error.value.response
    return error.value.response["Error"]["Message"]


def item(key):
    return {"pk": {"S": key}}


def test_a_role_may_do_what_its_policy_grants_on_the_resources_it_names(stand):
    url, _ = stand
    creds = session(url, "reader", [
        {"Effect": "Allow", "Action": ["dynamodb:GetItem", "dynamodb:PutItem"], "Resource": TABLE_ARN}])
    dynamodb = boto3.client("dynamodb", endpoint_url=url, **creds)
    dynamodb.put_item(TableName=TABLE, Item=item("a"))
    assert dynamodb.get_item(TableName=TABLE, Key=item("a"))["Item"] == item("a")
    message = refused(lambda: dynamodb.delete_item(TableName=TABLE, Key=item("a")))
    assert "dynamodb:DeleteItem" in message and TABLE_ARN in message
    # A table the policy does not name.
    refused(lambda: dynamodb.get_item(TableName="other", Key=item("a")))
    # An index is a resource of its own.
    refused(lambda: dynamodb.query(TableName=TABLE, IndexName="idx", KeyConditionExpression="pk = :k",
                                   ExpressionAttributeValues={":k": {"S": "a"}}))


def test_each_part_of_a_transaction_and_each_table_of_a_batch_is_authorized(stand):
    url, gate = stand
    creds = session(url, "writer", [
        {"Effect": "Allow", "Action": ["dynamodb:PutItem", "dynamodb:ConditionCheckItem"], "Resource": TABLE_ARN}])
    dynamodb = boto3.client("dynamodb", endpoint_url=url, **creds)
    dynamodb.transact_write_items(TransactItems=[{"Put": {"TableName": TABLE, "Item": item("b")}}])
    refused(lambda: dynamodb.transact_write_items(TransactItems=[
        {"Put": {"TableName": TABLE, "Item": item("c")}},
        {"Delete": {"TableName": TABLE, "Key": item("b")}},
    ]))
    refused(lambda: dynamodb.batch_get_item(RequestItems={TABLE: {"Keys": [item("b")]}}))
    assert {"action": "dynamodb:DeleteItem", "resource": TABLE_ARN}.items() <= gate.audit.report()["refused"][-2].items()


def test_s3_objects_and_buckets_are_authorized_on_their_own_arns(stand):
    url, gate = stand
    boto3.client("s3", endpoint_url=url, **ROOT).create_bucket(Bucket="records")
    creds = session(url, "recorder", [
        {"Effect": "Allow", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::records/decisions/*"}])
    path_style = botocore.config.Config(s3={"addressing_style": "path"})
    s3 = boto3.client("s3", endpoint_url=url, config=path_style, **creds)
    s3.put_object(Bucket="records", Key="decisions/2026-12-03/a.json", Body=b"{}")
    refused(lambda: s3.put_object(Bucket="records", Key="elsewhere/a.json", Body=b"{}"), "AccessDenied")
    refused(lambda: s3.get_object(Bucket="records", Key="decisions/2026-12-03/a.json"), "AccessDenied")
    refused(lambda: s3.list_objects_v2(Bucket="records"), "AccessDenied")
    assert {"action": "s3:ListBucket", "resource": "arn:aws:s3:::records"}.items() \
        <= gate.audit.report()["refused"][-1].items()
    root = boto3.client("s3", endpoint_url=url, config=path_style, **ROOT)
    assert root.get_object(Bucket="records", Key="decisions/2026-12-03/a.json")["Body"].read() == b"{}"


def test_a_missing_object_is_access_denied_unless_the_caller_may_list_the_bucket(stand):
    url, gate = stand
    boto3.client("s3", endpoint_url=url, **ROOT).create_bucket(Bucket="kept")
    path_style = botocore.config.Config(s3={"addressing_style": "path"})
    read = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::kept/forecaster/*"}
    blind = boto3.client("s3", endpoint_url=url, config=path_style,
                         **session(url, "state-reader", [read]))
    refused(lambda: blind.get_object(Bucket="kept", Key="forecaster/learned.json"), "AccessDenied")
    assert {"action": "s3:ListBucket", "resource": "arn:aws:s3:::kept"}.items() \
        <= gate.audit.report()["refused"][-1].items()
    lister = boto3.client("s3", endpoint_url=url, config=path_style, **session(url, "state-lister", [
        read, {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::kept"}]))
    refused(lambda: lister.get_object(Bucket="kept", Key="forecaster/learned.json"), "NoSuchKey")
    boto3.client("s3", endpoint_url=url, config=path_style, **ROOT).put_object(
        Bucket="kept", Key="forecaster/learned.json", Body=b"{}")
    assert blind.get_object(Bucket="kept", Key="forecaster/learned.json")["Body"].read() == b"{}"


def test_pass_role_is_needed_to_create_a_training_job_and_only_to_sagemaker(stand):
    url, _ = stand
    job = f"arn:aws:sagemaker:{REGION}:123456789012:training-job/ty-*"
    launch = {"TrainingJobName": "ty-a-1", "RoleArn": TRAINING_ROLE,
              "AlgorithmSpecification": {"TrainingImage": "i", "TrainingInputMode": "File"},
              "OutputDataConfig": {"S3OutputPath": "s3://b/o"},
              "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1},
              "StoppingCondition": {"MaxRuntimeInSeconds": 60}}
    without = boto3.client("sagemaker", endpoint_url=url, **session(url, "no-pass", [
        {"Effect": "Allow", "Action": "sagemaker:CreateTrainingJob", "Resource": job}]))
    assert "iam:PassRole" in refused(lambda: without.create_training_job(**launch))
    elsewhere = boto3.client("sagemaker", endpoint_url=url, **session(url, "pass-elsewhere", [
        {"Effect": "Allow", "Action": "sagemaker:CreateTrainingJob", "Resource": job},
        {"Effect": "Allow", "Action": "iam:PassRole", "Resource": TRAINING_ROLE,
         "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}}]))
    refused(lambda: elsewhere.create_training_job(**launch))
    allowed = boto3.client("sagemaker", endpoint_url=url, **session(url, "launcher", [
        {"Effect": "Allow", "Action": "sagemaker:CreateTrainingJob", "Resource": job},
        {"Effect": "Allow", "Action": "iam:PassRole", "Resource": TRAINING_ROLE,
         "Condition": {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}}]))
    assert allowed.create_training_job(**launch)["TrainingJobArn"]
    # Tags need AddTags too; a name outside ty-* is another resource.
    assert "sagemaker:AddTags" in refused(
        lambda: allowed.create_training_job(**launch, Tags=[{"Key": "k", "Value": "v"}]))
    refused(lambda: allowed.create_training_job(**{**launch, "TrainingJobName": "other"}))


def test_a_wrong_secret_or_an_unknown_key_is_refused(stand):
    url, _ = stand
    creds = session(url, "forger", [{"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": TABLE_ARN}])
    forged = boto3.client("dynamodb", endpoint_url=url, **{**creds, "aws_secret_access_key": "guess"})
    refused(lambda: forged.get_item(TableName=TABLE, Key=item("a")), "InvalidSignatureException")
    unknown = boto3.client("dynamodb", endpoint_url=url, aws_access_key_id="AKIAUNKNOWN",
                           aws_secret_access_key="x", region_name=REGION)
    refused(lambda: unknown.get_item(TableName=TABLE, Key=item("a")), "UnrecognizedClientException")


# --- DynamoDB as it behaves ------------------------------------------------------------------


@pytest.fixture
def indexed(stand):
    """A table with a global secondary index, and the root's client; faults off afterwards."""
    url, gate = stand
    dynamodb = boto3.client("dynamodb", endpoint_url=url, **ROOT)
    name = f"indexed-{len(dynamodb.list_tables()['TableNames'])}"
    dynamodb.create_table(
        TableName=name, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                              {"AttributeName": "g", "AttributeType": "S"}],
        GlobalSecondaryIndexes=[{"IndexName": "by-g", "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                                 "Projection": {"ProjectionType": "ALL"}}])
    yield name, dynamodb, gate
    gate.faults.configure({})


def in_index(dynamodb, table):
    found = dynamodb.query(TableName=table, IndexName="by-g", KeyConditionExpression="g = :g",
                           ExpressionAttributeValues={":g": {"S": "x"}})["Items"]
    return sorted(i["pk"]["S"] for i in found)


def test_an_index_shows_a_write_only_after_the_lag_and_the_table_at_once(indexed):
    import time
    table, dynamodb, gate = indexed
    gate.faults.configure({"index_lag_ms": 300})
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "a"}, "g": {"S": "x"}})
    assert in_index(dynamodb, table) == []
    assert dynamodb.get_item(TableName=table, Key=item("a"), ConsistentRead=True)["Item"]
    time.sleep(0.45)
    assert in_index(dynamodb, table) == ["a"]
    dynamodb.delete_item(TableName=table, Key=item("a"))
    assert in_index(dynamodb, table) == ["a"], "the delete is not in the index yet"
    time.sleep(0.45)
    assert in_index(dynamodb, table) == []


def test_a_lost_answer_leaves_the_write_applied_and_a_retried_transaction_is_not_applied_twice(indexed):
    table, dynamodb, gate = indexed
    no_retry = boto3.client("dynamodb", endpoint_url=dynamodb.meta.endpoint_url,
                            config=botocore.config.Config(retries={"total_max_attempts": 1, "mode": "standard"}), **ROOT)
    gate.faults.configure({"lost": 1.0})
    refused(lambda: no_retry.put_item(TableName=table, Item={"pk": {"S": "b"}, "g": {"S": "x"}}),
            "InternalServerError")
    assert dynamodb.get_item(TableName=table, Key=item("b"))["Item"]["g"] == {"S": "x"}
    # The SDK retries with the same client token: the repeat answers success, applies nothing.
    transaction = {"TransactItems": [{"Update": {
        "TableName": table, "Key": item("b"), "UpdateExpression": "ADD n :one",
        "ExpressionAttributeValues": {":one": {"N": "1"}}}}], "ClientRequestToken": "t-1"}
    refused(lambda: no_retry.transact_write_items(**transaction), "InternalServerError")
    gate.faults.configure({})
    no_retry.transact_write_items(**transaction)
    assert dynamodb.get_item(TableName=table, Key=item("b"))["Item"]["n"] == {"N": "1"}
    transaction["TransactItems"][0]["Update"]["ExpressionAttributeValues"][":one"] = {"N": "2"}
    refused(lambda: no_retry.transact_write_items(**transaction), "IdempotentParameterMismatchException")
    assert set(gate.faults.report()["injected"].values()) == {0}


def test_faults_fall_only_on_first_attempts_so_the_sdks_retry_gets_through(indexed):
    table, dynamodb, gate = indexed
    gate.faults.configure({"seed": 3, "throttle": 1.0})
    # botocore sends amz-sdk-request: attempt=N; the second attempt is spared.
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "c"}, "g": {"S": "y"}})
    assert gate.faults.report()["injected"]["throttle"] == 1
    gate.faults.configure({"conflict": 1.0})
    message = refused(lambda: dynamodb.transact_write_items(TransactItems=[
        {"Put": {"TableName": table, "Item": {"pk": {"S": "d"}, "g": {"S": "y"}}}}]),
        "TransactionCanceledException")
    assert "TransactionConflict" in message
    assert "Item" not in dynamodb.get_item(TableName=table, Key=item("d"))


def test_a_batch_read_can_leave_keys_unprocessed_for_the_caller_to_ask_again(indexed):
    """DynamoDB may answer a `BatchGetItem` for part of its keys and return the rest in
    `UnprocessedKeys`, a success that no SDK retries: the stand does so too."""
    table, dynamodb, gate = indexed
    for pk in ("u1", "u2", "u3"):
        dynamodb.put_item(TableName=table, Item={"pk": {"S": pk}, "g": {"S": "z"}})
    gate.faults.configure({"unprocessed": 1.0})
    wanted = {table: {"Keys": [item("u1"), item("u2"), item("u3")], "ConsistentRead": True}}
    answer = dynamodb.batch_get_item(RequestItems=wanted)
    got = sorted(i["pk"]["S"] for i in answer["Responses"][table])
    left = answer["UnprocessedKeys"][table]
    assert got == ["u1", "u2"] and left["Keys"] == [item("u3")] and left["ConsistentRead"]
    assert gate.faults.report()["injected"]["unprocessed"] == 1
    # A batch of one key is answered: with none, DynamoDB throttles the whole batch instead.
    answer = dynamodb.batch_get_item(RequestItems={table: {"Keys": [item("u3")]}})
    assert [i["pk"]["S"] for i in answer["Responses"][table]] == ["u3"]
    assert not answer.get("UnprocessedKeys")


@pytest.mark.parametrize("range_key", [False, True])
def test_a_cancelled_transaction_leaves_every_item_as_it_was(stand, range_key):
    """The stand keeps a restore point of the items a transaction names only (moto copied the
    whole table): a cancelled transaction must still leave every item, named or not, as it was."""
    url, _ = stand
    dynamodb = boto3.client("dynamodb", endpoint_url=url, **ROOT)
    name = f"rollback-{range_key}"
    keys = [{"AttributeName": "pk", "KeyType": "HASH"}]
    attributes = [{"AttributeName": "pk", "AttributeType": "S"}]
    if range_key:
        keys.append({"AttributeName": "sk", "KeyType": "RANGE"})
        attributes.append({"AttributeName": "sk", "AttributeType": "S"})
    dynamodb.create_table(TableName=name, BillingMode="PAY_PER_REQUEST", KeySchema=keys,
                          AttributeDefinitions=attributes)

    def key(name):
        # With a range key, every item shares one partition (one inner map in moto).
        return {"pk": {"S": "p"}, "sk": {"S": name}} if range_key else {"pk": {"S": name}}

    def n(item_name):
        found = dynamodb.get_item(TableName=name, Key=key(item_name), ConsistentRead=True).get("Item")
        return found and int(found["n"]["N"])

    for item_name in ("a", "b", "x", "y"):
        dynamodb.put_item(TableName=name, Item=dict(key(item_name), n={"N": "1"}))
    add_to_a = {"Update": {"TableName": name, "Key": key("a"), "UpdateExpression": "ADD n :one",
                           "ExpressionAttributeValues": {":one": {"N": "1"}}}}
    put_c = {"Put": {"TableName": name, "Item": dict(key("c"), n={"N": "7"})}}
    message = refused(lambda: dynamodb.transact_write_items(TransactItems=[
        add_to_a,
        put_c,
        {"Delete": {"TableName": name, "Key": key("x")}},
        {"ConditionCheck": {"TableName": name, "Key": key("b"), "ConditionExpression": "n = :five",
                            "ExpressionAttributeValues": {":five": {"N": "5"}}}},
    ]), "TransactionCanceledException")
    assert "ConditionalCheckFailed" in message
    assert (n("a"), n("b"), n("c"), n("x"), n("y")) == (1, 1, None, 1, 1)
    dynamodb.transact_write_items(TransactItems=[add_to_a, put_c])
    assert (n("a"), n("c"), n("x")) == (2, 7, 1)


def test_a_client_token_is_forgotten_after_the_idempotency_window(indexed, monkeypatch):
    import time
    table, dynamodb, _ = indexed
    monkeypatch.setattr(aws_stand, "IDEMPOTENCY_WINDOW_S", 0.3)

    def add(token, n):
        dynamodb.transact_write_items(ClientRequestToken=token, TransactItems=[{"Update": {
            "TableName": table, "Key": item("w"), "UpdateExpression": "ADD n :n",
            "ExpressionAttributeValues": {":n": {"N": str(n)}}}}])

    add("w-old", 1)
    time.sleep(0.2)
    add("w-new", 10)
    add("w-new", 10)  # a repeat within the window: not applied again
    time.sleep(0.15)
    # "w-old" has expired, "w-new" has not: expiry stops at the first current token.
    add("w-old", 100)
    refused(lambda: add("w-new", 5), "IdempotentParameterMismatchException")
    assert dynamodb.get_item(TableName=table, Key=item("w"))["Item"]["n"] == {"N": "111"}


def test_an_index_query_returns_its_matches_in_key_order(stand):
    """The stand sorts an index's matches by their keys' plain values (moto compared its own
    types): numbers by value, not as text, and backwards when asked."""
    url, _ = stand
    dynamodb = boto3.client("dynamodb", endpoint_url=url, **ROOT)
    name = "ordered"
    dynamodb.create_table(
        TableName=name, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                              {"AttributeName": "g", "AttributeType": "S"},
                              {"AttributeName": "r", "AttributeType": "N"}],
        GlobalSecondaryIndexes=[{"IndexName": "by-r", "KeySchema": [
            {"AttributeName": "g", "KeyType": "HASH"}, {"AttributeName": "r", "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "ALL"}}])
    for pk, r in (("a", "10"), ("b", "9"), ("c", "100"), ("d", "-1.5"), ("e", "9")):
        dynamodb.put_item(TableName=name, Item={"pk": {"S": pk}, "g": {"S": "x"}, "r": {"N": r}})

    def ordered(forward):
        found = dynamodb.query(TableName=name, IndexName="by-r", KeyConditionExpression="g = :g",
                               ExpressionAttributeValues={":g": {"S": "x"}},
                               ScanIndexForward=forward)["Items"]
        return [(i["r"]["N"], i["pk"]["S"]) for i in found]

    ascending = [("-1.5", "d"), ("9", "b"), ("9", "e"), ("10", "a"), ("100", "c")]
    assert ordered(True) == ascending
    assert ordered(False) == ascending[::-1]
    # A scan walks the table in key order: numbers by value too.
    dynamodb.create_table(TableName="numbered", BillingMode="PAY_PER_REQUEST",
                          KeySchema=[{"AttributeName": "n", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "n", "AttributeType": "N"}])
    for n in ("10", "9", "100", "-2"):
        dynamodb.put_item(TableName="numbered", Item={"n": {"N": n}})
    scanned = [i["n"]["N"] for i in dynamodb.scan(TableName="numbered")["Items"]]
    assert scanned == ["-2", "9", "10", "100"]


def test_the_stand_keeps_no_item_its_tables_do_not_hold(stand):
    """moto kept every item object it ever made (each write, each query's copies, each restore
    point), so the stand's memory grew with the requests served: past 20 GB in a long run. Items
    the tables no longer hold must be freed."""
    import gc

    from moto.dynamodb.models.dynamo_type import Item

    def items_alive():
        gc.collect()
        return sum(1 for o in gc.get_objects() if isinstance(o, Item))

    url, _ = stand
    dynamodb = boto3.client("dynamodb", endpoint_url=url, **ROOT)
    name = "served"
    dynamodb.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                          KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
    for n in range(20):
        dynamodb.put_item(TableName=name, Item={"pk": {"S": f"k{n}"}, "n": {"N": "0"}})
    before = items_alive()
    for _ in range(30):
        assert len(dynamodb.scan(TableName=name)["Items"]) == 20
        dynamodb.transact_write_items(TransactItems=[{"Update": {
            "TableName": name, "Key": {"pk": {"S": "k0"}}, "UpdateExpression": "ADD n :one",
            "ExpressionAttributeValues": {":one": {"N": "1"}}}}])
        dynamodb.put_item(TableName=name, Item={"pk": {"S": "k1"}, "n": {"N": "1"}})
    # 30 scans copied 600 items, 60 writes made new ones; the table still holds 20.
    assert items_alive() - before < 20


def test_a_query_reads_its_key_range_and_stops_at_its_limit_with_a_key(stand):
    """The stand reads only the items a query's key condition selects (moto walked the whole
    partition), and, as DynamoDB does, a query that evaluated `Limit` items names the last one
    in `LastEvaluatedKey` even when nothing follows it (moto did so only if an item followed)."""
    url, _ = stand
    dynamodb = boto3.client("dynamodb", endpoint_url=url, **ROOT)
    name = "ranged"
    dynamodb.create_table(
        TableName=name, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                              {"AttributeName": "sk", "AttributeType": "S"},
                              {"AttributeName": "g", "AttributeType": "S"},
                              {"AttributeName": "r", "AttributeType": "S"}],
        GlobalSecondaryIndexes=[{"IndexName": "by-r", "KeySchema": [
            {"AttributeName": "g", "KeyType": "HASH"}, {"AttributeName": "r", "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "ALL"}}])
    for sk in ("a#1", "a#2", "b#1", "b#2", "b#3", "c#1"):
        dynamodb.put_item(TableName=name, Item={"pk": {"S": "p"}, "sk": {"S": sk},
                                                "g": {"S": "x"}, "r": {"S": sk}})
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "other"}, "sk": {"S": "b#9"},
                                            "g": {"S": "y"}, "r": {"S": "b#9"}})
    # Not in the index: it has none of the index's keys.
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "q"}, "sk": {"S": "b#5"}})

    def pages(prefix, limit, forward=True, index=False):
        keys, start, found = ("g", "r") if index else ("pk", "sk"), None, []
        while True:
            args = dict(TableName=name, Limit=limit, ScanIndexForward=forward,
                        KeyConditionExpression=f"{keys[0]} = :h AND begins_with({keys[1]}, :p)",
                        ExpressionAttributeValues={":h": {"S": "x" if index else "p"}, ":p": {"S": prefix}})
            if index:
                args["IndexName"] = "by-r"
            if start:
                args["ExclusiveStartKey"] = start
            answer = dynamodb.query(**args)
            found.append([i["sk"]["S"] for i in answer["Items"]])
            start = answer.get("LastEvaluatedKey")
            if not start:
                return found

    for index in (False, True):
        assert pages("b", 2, index=index) == [["b#1", "b#2"], ["b#3"]]
        assert pages("b", 3, index=index) == [["b#1", "b#2", "b#3"], []], "stopped at its Limit: a key"
        assert pages("b", 4, index=index) == [["b#1", "b#2", "b#3"]]
        assert pages("c", 1, index=index) == [["c#1"], []], "the partition's last item"
        assert pages("a", 1, forward=False, index=index) == [["a#2"], ["a#1"], []]
        assert pages("b", 1, index=index) == [["b#1"], ["b#2"], ["b#3"], []]
        assert pages("b", 1, forward=False, index=index) == [["b#3"], ["b#2"], ["b#1"], []]
        assert pages("d", 5, index=index) == [[]]
    # An item whose index key changed is found in its new partition only.
    dynamodb.update_item(TableName=name, Key={"pk": {"S": "p"}, "sk": {"S": "b#2"}},
                         UpdateExpression="SET g = :y", ExpressionAttributeValues={":y": {"S": "y"}})
    assert pages("b", 5, index=True) == [["b#1", "b#3"]]
