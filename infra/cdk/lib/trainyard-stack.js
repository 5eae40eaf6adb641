// Trainyard's stack in CDK: resource for resource the same as ../../template.yaml (after the SAM
// transform), written with the CloudFormation-level (Cfn*) constructs so that nothing is added
// implicitly (L2 constructs would attach extra policies and permissions of their own, and
// least privilege would then be read from two places). infra/tests compares the two templates.
'use strict';

const fs = require('fs');
const path = require('path');
const cdk = require('aws-cdk-lib');
const { Fn, Aws } = cdk;
const apigw = require('aws-cdk-lib/aws-apigatewayv2');
const cloudwatch = require('aws-cdk-lib/aws-cloudwatch');
const dynamodb = require('aws-cdk-lib/aws-dynamodb');
const events = require('aws-cdk-lib/aws-events');
const iam = require('aws-cdk-lib/aws-iam');
const kms = require('aws-cdk-lib/aws-kms');
const lambda = require('aws-cdk-lib/aws-lambda');
const logs = require('aws-cdk-lib/aws-logs');
const s3 = require('aws-cdk-lib/aws-s3');
const s3assets = require('aws-cdk-lib/aws-s3-assets');
const sns = require('aws-cdk-lib/aws-sns');
const sqs = require('aws-cdk-lib/aws-sqs');

/**
 * The table's indexes: must match shared/aws/src/dynamodb/schema.rs (names are stored data).
 * [name, partition, sort, projection]. None holds the job document: the runnable index includes
 * what a scheduling cycle's heads need (so it reads them alone), the listing indexes the
 * attributes ListServiceJobs filters on; other readers fetch jobs with BatchGetItem.
 */
const HEADS = {
  projectionType: 'INCLUDE',
  nonKeyAttributes: [
    'job_id', 'version', 'share_identifier', 'quota_share_name', 'prio', 'sr', 'nb', 'ins', 'mrt', 'lo',
  ],
};
const LISTING = {
  projectionType: 'INCLUDE',
  nonKeyAttributes: ['share_identifier', 'quota_share_name', 'name_lower'],
};
// The status listing also filters its dispatched partition (every queue's) on the queue, and
// holds what the scheduler needs of a job holding capacity (so a cycle reads them alone).
const STATUS_LISTING = {
  projectionType: 'INCLUDE',
  nonKeyAttributes: [
    'share_identifier', 'quota_share_name', 'name_lower', 'lq', 'job_id', 'prio', 'ins', 'mrt', 'hs',
    'ck', 'pre', 'stp',
  ],
};
const INDEXES = [
  ['runnable', 'rq', 'rk', HEADS],
  ['by-queue', 'lq', 'lsk', LISTING],
  ['by-queue-status', 'lqs', 'lsk', STATUS_LISTING],
];

const DLQ_RETENTION_SECONDS = 1209600;

// The functions' directories under functions/ (and under cargo lambda's output directory).
const FUNCTION_DIRS = ['api', 'scheduler', 'training-events', 'retry'];

class TrainyardStack extends cdk.Stack {
  constructor(scope, id, props) {
    super(scope, id, props);
    const lambdaDir = path.resolve(__dirname, '..', props.lambdaDir || '../../target/lambda');

    // --- parameters (the same names, types and defaults as the SAM template) ------------------
    const param = (name, options) => new cdk.CfnParameter(this, name, options);
    const trainingRoleArns = param('TrainingRoleArns', {
      type: 'CommaDelimitedList',
      description: 'ARNs of the IAM roles that submitted jobs may name as their SageMaker RoleArn.',
    });
    const initialEnvironment = param('InitialServiceEnvironment', {
      type: 'String', default: 'default', allowedPattern: '^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$',
      description: 'Service environment created on first start if no environment exists.',
    });
    const initialMaxInstances = param('InitialMaxInstances', {
      type: 'Number', default: 4, minValue: 0, maxValue: 10000,
      description: 'Capacity limit (NUM_INSTANCES) of the initial service environment.',
    });
    const initialQueue = param('InitialJobQueue', {
      type: 'String', default: 'default', allowedPattern: '^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$',
      description: 'Job queue created on first start, feeding the initial service environment.',
    });
    const initialQueuePriority = param('InitialJobQueuePriority', {
      type: 'Number', default: 1, minValue: 0, maxValue: 1000,
      description: 'Priority of the initial job queue (higher first).',
    });
    const cycleSchedule = param('CycleSchedule', {
      type: 'String', default: 'rate(1 minute)',
      description: 'How often the scheduler and retry functions run when no event arrives.',
    });
    const stuckRunnableSeconds = param('StuckRunnableSeconds', {
      type: 'Number', default: 3600, minValue: 60,
      description: 'Alarm when the oldest RUNNABLE job has waited longer than this.',
    });
    const auditRetentionDays = param('AuditRetentionDays', {
      type: 'Number', default: 90, minValue: 1, maxValue: 400,
      description: 'How long the audit trail (every call that asked to change something: who, what, '
        + 'allowed or refused, by which policy) is kept in the table; DynamoDB\'s TTL deletes older records.',
    });
    const decisionRetentionDays = param('DecisionRetentionDays', {
      type: 'Number', default: 14, minValue: 1, maxValue: 400,
      description: "How long each scheduling cycle's decision record (what it planned, from which "
        + 'snapshot, replayable with `trainyard replay --file`) is kept: the records bucket\'s lifecycle '
        + 'rule and the TTL of their summaries in the table.',
    });
    const checkpointBucketArns = param('CheckpointBucketArns', {
      type: 'CommaDelimitedList', default: '',
      description: "ARNs of the S3 buckets that jobs' CheckpointConfig.S3Uri point into "
        + '(arn:aws:s3:::NAME). Before it preempts, the scheduler lists the running jobs\' checkpoint '
        + 'prefixes there (s3:ListBucket) and spares the jobs that would lose least. Empty: it lists '
        + 'nothing, and every job counts as publishing no checkpoint.',
    });
    const checkpointMarker = param('CheckpointMarker', {
      type: 'String', default: '_SUCCESS', allowedPattern: '^[^/]{1,255}$',
      description: 'The object name a training script writes after the files of a checkpoint '
        + '(.../step-1000/_SUCCESS): only checkpoints with it count.',
    });
    const alarmEmail = param('AlarmEmail', {
      type: 'String', default: '', description: 'Optional e-mail address subscribed to the alarm topic.',
    });
    const logRetentionDays = param('LogRetentionDays', {
      type: 'Number', default: '30',
      allowedValues: ['1', '3', '5', '7', '14', '30', '60', '90', '120', '150', '180', '365'],
      description: "Retention of the functions' log groups.",
    });
    // The functions' instruction set is the one their built `bootstrap`s were compiled for, read
    // from the binaries (so the stack can never pair an x86_64 build with arm64 Lambdas); the
    // SAM template's parameter of the same name drives its build instead.
    const built = this.builtArchitecture(lambdaDir);
    const architecture = param('Architecture', {
      type: 'String', default: built, allowedValues: [built],
      description: 'Instruction set of the functions: the one `cargo lambda build --release` '
        + '(x86_64) or `cargo lambda build --release --arm64` compiled the packaged binaries for.',
    });
    const schedulerReservedConcurrency = param('SchedulerReservedConcurrency', {
      type: 'Number', default: 0, minValue: 0, maxValue: 1,
      description: '1 reserves one concurrent execution for the scheduler, so that scheduling passes '
        + 'rarely overlap (Lambda keeps 100 executions of the account\'s quota unreserved, so an '
        + 'account whose quota is at or near 100 cannot deploy it). 0 reserves none. Overlapping passes are safe either '
        + 'way: every dispatch is a version-checked transaction, and the lease makes overlap cheap.',
    });
    const hasAlarmEmail = new cdk.CfnCondition(this, 'HasAlarmEmail', {
      expression: Fn.conditionNot(Fn.conditionEquals(alarmEmail.valueAsString, '')),
    });
    const hasCheckpointBuckets = new cdk.CfnCondition(this, 'HasCheckpointBuckets', {
      expression: Fn.conditionNot(Fn.conditionEquals(Fn.join('', checkpointBucketArns.valueAsList), '')),
    });
    const reservesSchedulerConcurrency = new cdk.CfnCondition(this, 'ReservesSchedulerConcurrency', {
      expression: Fn.conditionEquals(schedulerReservedConcurrency.valueAsNumber, 1),
    });

    // --- store ---------------------------------------------------------------------------------
    const attributes = ['pk', 'sk'];
    for (const [, hash, range] of INDEXES) {
      for (const name of [hash, range]) if (!attributes.includes(name)) attributes.push(name);
    }
    const table = new dynamodb.CfnTable(this, 'Table', {
      billingMode: 'PAY_PER_REQUEST',
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      sseSpecification: { sseEnabled: true },
      timeToLiveSpecification: { attributeName: 'ttl', enabled: true },
      keySchema: [
        { attributeName: 'pk', keyType: 'HASH' },
        { attributeName: 'sk', keyType: 'RANGE' },
      ],
      attributeDefinitions: attributes.map((a) => ({ attributeName: a, attributeType: 'S' })),
      globalSecondaryIndexes: INDEXES.map(([indexName, hash, range, projection]) => ({
        indexName,
        keySchema: [
          { attributeName: hash, keyType: 'HASH' },
          { attributeName: range, keyType: 'RANGE' },
        ],
        projection,
      })),
    });
    table.applyRemovalPolicy(cdk.RemovalPolicy.RETAIN);

    // Each scheduling cycle's decision record, under decisions/; its summary item in the table
    // names the object. Private, encrypted, expired by age.
    const decisionsBucket = new s3.CfnBucket(this, 'DecisionsBucket', {
      bucketEncryption: {
        serverSideEncryptionConfiguration: [{ serverSideEncryptionByDefault: { sseAlgorithm: 'AES256' } }],
      },
      publicAccessBlockConfiguration: {
        blockPublicAcls: true, blockPublicPolicy: true, ignorePublicAcls: true, restrictPublicBuckets: true,
      },
      ownershipControls: { rules: [{ objectOwnership: 'BucketOwnerEnforced' }] },
      lifecycleConfiguration: {
        rules: [{
          id: 'expire-decision-records', status: 'Enabled', prefix: 'decisions/',
          expirationInDays: decisionRetentionDays.valueAsNumber,
        }],
      },
    });
    decisionsBucket.applyRemovalPolicy(cdk.RemovalPolicy.RETAIN);
    new s3.CfnBucketPolicy(this, 'DecisionsBucketPolicy', {
      bucket: decisionsBucket.ref,
      policyDocument: {
        Version: '2012-10-17',
        Statement: [{
          Sid: 'TlsOnly', Effect: 'Deny', Principal: '*', Action: 's3:*',
          Resource: [decisionsBucket.attrArn, `${decisionsBucket.attrArn}/*`],
          Condition: { Bool: { 'aws:SecureTransport': 'false' } },
        }],
      },
    });

    // --- events and dead-letter queues -----------------------------------------------------------
    const bus = new events.CfnEventBus(this, 'EventBus', { name: `${Aws.STACK_NAME}-trainyard` });
    const dlq = (name) => new sqs.CfnQueue(this, name, {
      messageRetentionPeriod: DLQ_RETENTION_SECONDS,
      sqsManagedSseEnabled: true,
    });
    const schedulerDlq = dlq('SchedulerDlq');
    const trainingEventsDlq = dlq('TrainingEventsDlq');
    const retryDlq = dlq('RetryDlq');
    const eventDeliveryDlq = dlq('EventDeliveryDlq');
    new sqs.CfnQueuePolicy(this, 'EventDeliveryDlqPolicy', {
      queues: [eventDeliveryDlq.ref],
      policyDocument: {
        Version: '2012-10-17',
        Statement: [{
          Sid: 'EventBridgeDeadLetters',
          Effect: 'Allow',
          Principal: { Service: 'events.amazonaws.com' },
          Action: 'sqs:SendMessage',
          Resource: eventDeliveryDlq.attrArn,
        }],
      },
    });

    // --- functions: log group, role, code, function -------------------------------------------
    const tableResources = [table.attrArn, `${table.attrArn}/index/*`];
    const trainingJobs = `arn:${Aws.PARTITION}:sagemaker:${Aws.REGION}:${Aws.ACCOUNT_ID}:training-job/ty-*`;
    const readWrite = [
      'dynamodb:GetItem', 'dynamodb:BatchGetItem', 'dynamodb:Query', 'dynamodb:PutItem',
      'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:ConditionCheckItem',
    ];
    const eventsWriter = [
      'dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:PutItem', 'dynamodb:UpdateItem',
      'dynamodb:ConditionCheckItem',
    ];
    // The due work reads the jobs holding capacity from the index's keys, then fetches them.
    const dueWork = ['dynamodb:BatchGetItem', ...eventsWriter];
    const environment = {
      RUST_LOG: 'info',
      TRAINYARD_TABLE: table.ref,
      TRAINYARD_EVENT_BUS: bus.ref,
      TRAINYARD_TRAINING_ROLE_ARNS: Fn.join(',', trainingRoleArns.valueAsList),
      TRAINYARD_INITIAL_ENVIRONMENT: initialEnvironment.valueAsString,
      TRAINYARD_INITIAL_MAX_INSTANCES: initialMaxInstances.valueAsString,
      TRAINYARD_INITIAL_QUEUE: initialQueue.valueAsString,
      TRAINYARD_INITIAL_QUEUE_PRIORITY: initialQueuePriority.valueAsString,
      TRAINYARD_AUDIT_RETENTION_DAYS: auditRetentionDays.valueAsString,
      TRAINYARD_STACK_NAME: Aws.STACK_NAME,
      TRAINYARD_ACCOUNT_ID: Aws.ACCOUNT_ID,
      TRAINYARD_CHECKPOINT_MARKER: checkpointMarker.valueAsString,
      TRAINYARD_DECISIONS_BUCKET: decisionsBucket.ref,
      TRAINYARD_DECISION_RETENTION_DAYS: decisionRetentionDays.valueAsString,
    };

    const fn = (prefix, dir, { statements, timeout = 30, memorySize = 256, dlq: deadLetters, reserved }) => {
      const logGroup = new logs.CfnLogGroup(this, `${prefix}LogGroup`, {
        logGroupName: `/aws/lambda/${Aws.STACK_NAME}-${dir}`,
        retentionInDays: logRetentionDays.valueAsNumber,
      });
      const policyStatements = [
        { Sid: 'Logs', Effect: 'Allow', Action: ['logs:CreateLogStream', 'logs:PutLogEvents'], Resource: logGroup.attrArn },
        ...statements,
      ];
      if (deadLetters) {
        policyStatements.push({ Sid: 'DeadLetters', Effect: 'Allow', Action: 'sqs:SendMessage', Resource: deadLetters.attrArn });
      }
      const role = new iam.CfnRole(this, `${prefix}Role`, {
        assumeRolePolicyDocument: {
          Version: '2012-10-17',
          Statement: [{ Effect: 'Allow', Principal: { Service: 'lambda.amazonaws.com' }, Action: 'sts:AssumeRole' }],
        },
        policies: [{ policyName: dir, policyDocument: { Version: '2012-10-17', Statement: policyStatements } }],
      });
      const code = new s3assets.Asset(this, `${prefix}Code`, { path: this.codeDir(lambdaDir, dir, props.allowMissingBuild) });
      const func = new lambda.CfnFunction(this, `${prefix}Function`, {
        runtime: 'provided.al2023',
        handler: 'bootstrap',
        architectures: [architecture.valueAsString],
        memorySize,
        timeout,
        role: role.attrArn,
        code: { s3Bucket: code.s3BucketName, s3Key: code.s3ObjectKey },
        environment: { variables: environment },
        loggingConfig: { logGroup: logGroup.ref, logFormat: 'JSON' },
        deadLetterConfig: deadLetters ? { targetArn: deadLetters.attrArn } : undefined,
        reservedConcurrentExecutions: reserved,
      });
      // The same source directory the SAM template's CodeUri names (checked by infra/tests).
      func.addMetadata('trainyard:source', `functions/${dir}`);
      return func;
    };

    const api = fn('Api', 'api', {
      statements: [
        { Sid: 'Store', Effect: 'Allow', Action: readWrite, Resource: tableResources },
        { Sid: 'Events', Effect: 'Allow', Action: 'events:PutEvents', Resource: bus.attrArn },
        // Callers' IAM tags, which access policies may group principals by.
        {
          Sid: 'CallerTags',
          Effect: 'Allow',
          Action: ['iam:ListRoleTags', 'iam:ListUserTags'],
          Resource: [
            Fn.sub('arn:${AWS::Partition}:iam::${AWS::AccountId}:role/*'),
            Fn.sub('arn:${AWS::Partition}:iam::${AWS::AccountId}:user/*'),
          ],
        },
      ],
    });
    const scheduler = fn('Scheduler', 'scheduler', {
      timeout: 60,
      memorySize: 512,
      // Opt-in: one pass at a time (the lease and the version checks make overlap safe anyway).
      reserved: Fn.conditionIf(reservesSchedulerConcurrency.logicalId,
        schedulerReservedConcurrency.valueAsNumber, Aws.NO_VALUE),
      dlq: schedulerDlq,
      statements: [
        { Sid: 'Store', Effect: 'Allow', Action: readWrite, Resource: tableResources },
        {
          Sid: 'LaunchAndPreempt', Effect: 'Allow',
          Action: ['sagemaker:CreateTrainingJob', 'sagemaker:DescribeTrainingJob', 'sagemaker:StopTrainingJob', 'sagemaker:AddTags'],
          Resource: trainingJobs,
        },
        {
          Sid: 'PassTrainingRoles', Effect: 'Allow', Action: 'iam:PassRole',
          Resource: trainingRoleArns.valueAsList,
          Condition: { StringEquals: { 'iam:PassedToService': 'sagemaker.amazonaws.com' } },
        },
        { Sid: 'Events', Effect: 'Allow', Action: 'events:PutEvents', Resource: bus.attrArn },
        {
          Sid: 'DecisionRecords', Effect: 'Allow', Action: 's3:PutObject',
          Resource: `${decisionsBucket.attrArn}/decisions/*`,
        },
        // What the forecaster learnt, kept across cold starts (one object).
        {
          Sid: 'ForecasterState', Effect: 'Allow', Action: ['s3:GetObject', 's3:PutObject'],
          Resource: `${decisionsBucket.attrArn}/forecaster/*`,
        },
        // So that the state's absence (the first cold start) reads as NoSuchKey, not AccessDenied.
        { Sid: 'ListDecisionsBucket', Effect: 'Allow', Action: 's3:ListBucket', Resource: decisionsBucket.attrArn },
        // Checkpoints observed before a preemption, where the stack names their buckets.
        Fn.conditionIf(hasCheckpointBuckets.logicalId, {
          Sid: 'ListCheckpoints', Effect: 'Allow', Action: 's3:ListBucket',
          Resource: checkpointBucketArns.valueAsList,
        }, Aws.NO_VALUE),
      ],
    });
    const trainingEvents = fn('TrainingEvents', 'training-events', {
      dlq: trainingEventsDlq,
      statements: [
        { Sid: 'Store', Effect: 'Allow', Action: eventsWriter, Resource: tableResources },
        { Sid: 'Reconcile', Effect: 'Allow', Action: 'sagemaker:DescribeTrainingJob', Resource: trainingJobs },
        { Sid: 'Events', Effect: 'Allow', Action: 'events:PutEvents', Resource: bus.attrArn },
      ],
    });
    const retry = fn('Retry', 'retry', {
      timeout: 120,
      dlq: retryDlq,
      statements: [
        { Sid: 'Store', Effect: 'Allow', Action: dueWork, Resource: tableResources },
        {
          Sid: 'TimeoutsAndReconcile', Effect: 'Allow',
          Action: ['sagemaker:DescribeTrainingJob', 'sagemaker:StopTrainingJob'], Resource: trainingJobs,
        },
        { Sid: 'Events', Effect: 'Allow', Action: 'events:PutEvents', Resource: bus.attrArn },
      ],
    });

    // --- API: HTTP API with IAM auth, every route to the api function ------------------------
    const httpApi = new apigw.CfnApi(this, 'HttpApi', {
      body: {
        openapi: '3.0.1',
        info: { title: Aws.STACK_NAME, version: '1.0' },
        paths: {
          $default: {
            'x-amazon-apigateway-any-method': {
              isDefaultRoute: true,
              security: [{ AWS_IAM: [] }],
              'x-amazon-apigateway-integration': {
                type: 'aws_proxy',
                httpMethod: 'POST',
                uri: `arn:${Aws.PARTITION}:apigateway:${Aws.REGION}:lambda:path/2015-03-31/functions/${api.attrArn}/invocations`,
                payloadFormatVersion: '2.0',
              },
              responses: {},
            },
          },
        },
        components: {
          securitySchemes: {
            AWS_IAM: { type: 'apiKey', name: 'Authorization', in: 'header', 'x-amazon-apigateway-authtype': 'awsSigv4' },
          },
        },
        description: "Trainyard's Batch service-job API (POST /v1/...), IAM-authorized",
      },
    });
    new apigw.CfnStage(this, 'HttpApiDefaultStage', { apiId: httpApi.ref, stageName: '$default', autoDeploy: true });
    const permission = (name, func, principal, sourceArn) => new lambda.CfnPermission(this, name, {
      action: 'lambda:InvokeFunction', functionName: func.ref, principal, sourceArn,
    });
    permission('ApiFunctionApiPermission', api, 'apigateway.amazonaws.com',
      `arn:${Aws.PARTITION}:execute-api:${Aws.REGION}:${Aws.ACCOUNT_ID}:${httpApi.ref}/*`);

    // --- rules ---------------------------------------------------------------------------------
    const rule = (name, func, props) => {
      const r = new events.CfnRule(this, name, {
        ...props,
        targets: [{ id: `${name}Target`, arn: func.attrArn, ...(props.target || {}) }],
        target: undefined,
      });
      permission(`${name}Permission`, func, 'events.amazonaws.com', r.attrArn);
      return r;
    };
    const deliveryDlq = { deadLetterConfig: { arn: eventDeliveryDlq.attrArn } };
    rule('SchedulerFunctionInternalEvents', scheduler, {
      eventBusName: bus.ref,
      eventPattern: { source: ['trainyard'], 'detail-type': ['Job Submitted', 'Capacity Released'] },
      target: { retryPolicy: { maximumRetryAttempts: 3, maximumEventAgeInSeconds: 3600 }, ...deliveryDlq },
    });
    rule('SchedulerFunctionTick', scheduler, {
      scheduleExpression: cycleSchedule.valueAsString,
      target: { input: '{"trigger":"schedule"}' },
    });
    rule('TrainingEventsFunctionSageMakerStateChange', trainingEvents, {
      // Only Trainyard's attempts (trainyard_domain::training::ATTEMPT_NAME_PREFIX): the
      // account's other training jobs do not invoke the function.
      eventPattern: {
        source: ['aws.sagemaker'],
        'detail-type': ['SageMaker Training Job State Change'],
        detail: { TrainingJobName: [{ prefix: 'ty-' }] },
      },
      target: { retryPolicy: { maximumRetryAttempts: 185, maximumEventAgeInSeconds: 86400 }, ...deliveryDlq },
    });
    rule('RetryFunctionTick', retry, {
      scheduleExpression: cycleSchedule.valueAsString,
      target: { input: '{"trigger":"schedule"}' },
    });

    // --- alarms and dashboard --------------------------------------------------------------------
    // CloudWatch alarms cannot publish to a topic encrypted with the AWS-managed alias/aws/sns
    // key (its policy cannot be changed to let them); this key's policy lets them, from this
    // account.
    const topicKey = new kms.CfnKey(this, 'AlarmTopicKey', {
      description: cdk.Fn.sub("Encrypts ${AWS::StackName}'s alarm topic; CloudWatch alarms may use it."),
      enableKeyRotation: true,
      keyPolicy: {
        Version: '2012-10-17',
        Statement: [
          {
            Sid: 'TheAccountManagesTheKeyThroughIam',
            Effect: 'Allow',
            Principal: { AWS: cdk.Fn.sub('arn:${AWS::Partition}:iam::${AWS::AccountId}:root') },
            Action: 'kms:*',
            Resource: '*',
          },
          {
            Sid: 'CloudWatchAlarmsPublishToTheTopic',
            Effect: 'Allow',
            Principal: { Service: 'cloudwatch.amazonaws.com' },
            Action: ['kms:Decrypt', 'kms:GenerateDataKey'],
            Resource: '*',
            Condition: { StringEquals: { 'aws:SourceAccount': cdk.Aws.ACCOUNT_ID } },
          },
        ],
      },
    });
    const topic = new sns.CfnTopic(this, 'AlarmTopic', { kmsMasterKeyId: topicKey.ref });
    const subscription = new sns.CfnSubscription(this, 'AlarmEmailSubscription', {
      topicArn: topic.ref, protocol: 'email', endpoint: alarmEmail.valueAsString,
    });
    subscription.cfnOptions.condition = hasAlarmEmail;
    const alarm = (name, description, namespace, metricName, dimensions, extra = {}) =>
      new cloudwatch.CfnAlarm(this, name, {
        alarmDescription: description,
        namespace,
        metricName,
        dimensions,
        statistic: 'Sum',
        period: 300,
        evaluationPeriods: 1,
        threshold: 0,
        comparisonOperator: 'GreaterThanThreshold',
        treatMissingData: 'notBreaching',
        alarmActions: [topic.ref],
        ...extra,
      });
    const fnDim = (f) => [{ name: 'FunctionName', value: f.ref }];
    const qDim = (q) => [{ name: 'QueueName', value: q.attrQueueName }];
    alarm('ApiErrorsAlarm', 'The api function failed invocations.', 'AWS/Lambda', 'Errors', fnDim(api));
    alarm('SchedulerErrorsAlarm', 'The scheduler failed cycles in two consecutive 5-minute periods.',
      'AWS/Lambda', 'Errors', fnDim(scheduler), { evaluationPeriods: 2 });
    alarm('TrainingEventsErrorsAlarm', 'The training-events function failed invocations.', 'AWS/Lambda', 'Errors', fnDim(trainingEvents));
    alarm('RetryErrorsAlarm', 'The retry/reconcile function failed invocations.', 'AWS/Lambda', 'Errors', fnDim(retry));
    const depth = { statistic: 'Maximum' };
    alarm('SchedulerDlqDepthAlarm', 'Scheduler invocations were dead-lettered.', 'AWS/SQS',
      'ApproximateNumberOfMessagesVisible', qDim(schedulerDlq), depth);
    alarm('TrainingEventsDlqDepthAlarm', 'SageMaker state changes were dead-lettered.', 'AWS/SQS',
      'ApproximateNumberOfMessagesVisible', qDim(trainingEventsDlq), depth);
    alarm('RetryDlqDepthAlarm', 'Retry/reconcile invocations were dead-lettered.', 'AWS/SQS',
      'ApproximateNumberOfMessagesVisible', qDim(retryDlq), depth);
    alarm('EventDeliveryDlqDepthAlarm', 'EventBridge could not deliver events to a Trainyard function.',
      'AWS/SQS', 'ApproximateNumberOfMessagesVisible', qDim(eventDeliveryDlq), depth);
    alarm('StuckRunnableAlarm', 'A job has been RUNNABLE longer than StuckRunnableSeconds.',
      'Trainyard', 'OldestRunnableJobAgeSeconds', [{ name: 'Stack', value: Aws.STACK_NAME }],
      { statistic: 'Maximum', evaluationPeriods: 3, threshold: stuckRunnableSeconds.valueAsNumber });

    const fnMetrics = (metric) => [
      ['AWS/Lambda', metric, 'FunctionName', api.ref], ['...', scheduler.ref],
      ['...', trainingEvents.ref], ['...', retry.ref],
    ];
    const widget = (x, y, width, title, stat, metrics) => ({
      type: 'metric', x, y, width, height: 6,
      properties: { title, region: Aws.REGION, stat, period: 300, metrics },
    });
    new cloudwatch.CfnDashboard(this, 'Dashboard', {
      dashboardName: `${Aws.STACK_NAME}-trainyard`,
      dashboardBody: this.toJsonString({
        widgets: [
          widget(0, 0, 12, 'Function errors', 'Sum', fnMetrics('Errors')),
          widget(12, 0, 12, 'Invocations', 'Sum', fnMetrics('Invocations')),
          widget(0, 6, 12, 'Oldest RUNNABLE job (s)', 'Maximum',
            [['Trainyard', 'OldestRunnableJobAgeSeconds', 'Stack', Aws.STACK_NAME]]),
          widget(12, 6, 12, 'Dead-lettered messages', 'Maximum', [
            ['AWS/SQS', 'ApproximateNumberOfMessagesVisible', 'QueueName', schedulerDlq.attrQueueName],
            ['...', trainingEventsDlq.attrQueueName], ['...', retryDlq.attrQueueName],
            ['...', eventDeliveryDlq.attrQueueName],
          ]),
          widget(0, 12, 24, 'Store', 'Sum', [
            ['AWS/DynamoDB', 'ConsumedWriteCapacityUnits', 'TableName', table.ref],
            ['.', 'ConsumedReadCapacityUnits', '.', '.'], ['.', 'ThrottledRequests', '.', '.'],
          ]),
        ],
      }),
    });

    new cdk.CfnOutput(this, 'ApiEndpoint', {
      description: 'Set AWS_ENDPOINT_URL_BATCH to this (requests must be SigV4-signed for execute-api).',
      value: `https://${httpApi.ref}.execute-api.${Aws.REGION}.${Aws.URL_SUFFIX}`,
    });
    new cdk.CfnOutput(this, 'TableName', { value: table.ref });
    new cdk.CfnOutput(this, 'EventBusName', { value: bus.ref });
    new cdk.CfnOutput(this, 'AlarmTopicArn', { value: topic.ref });
  }

  /**
   * The directory holding a function's built `bootstrap` (cargo lambda's output). Missing is
   * an error unless asked for explicitly: a stack must never be deployed with the placeholder.
   */
  codeDir(lambdaDir, name, allowMissingBuild) {
    const dir = path.join(lambdaDir, name);
    if (fs.existsSync(path.join(dir, 'bootstrap'))) return dir;
    if (!allowMissingBuild) {
      throw new Error(`no built function at ${dir}/bootstrap: run \`cargo lambda build --release\` ` +
        'first, or pass -c allowMissingBuild=true for an offline synth check');
    }
    cdk.Annotations.of(this).addWarningV2('trainyard:placeholder-code',
      `${name}: synthesized with placeholder code (no ${dir}/bootstrap)`);
    return path.resolve(__dirname, '..', 'placeholder');
  }

  /**
   * The architecture (`arm64` or `x86_64`) of the four built `bootstrap`s, from their ELF
   * headers; they must agree. With no build (the offline check's placeholder), `arm64`.
   */
  builtArchitecture(lambdaDir) {
    const MACHINES = { 0x3e: 'x86_64', 0xb7: 'arm64' };
    const found = new Set();
    for (const name of FUNCTION_DIRS) {
      const file = path.join(lambdaDir, name, 'bootstrap');
      if (!fs.existsSync(file)) continue;
      const header = Buffer.alloc(20);
      const fd = fs.openSync(file, 'r');
      try { fs.readSync(fd, header, 0, 20, 0); } finally { fs.closeSync(fd); }
      const machine = header.toString('latin1', 1, 4) === 'ELF' ? MACHINES[header.readUInt16LE(18)] : undefined;
      if (!machine) throw new Error(`${file} is not an x86_64 or arm64 Linux executable`);
      found.add(machine);
    }
    if (found.size > 1) {
      throw new Error(`the built functions in ${lambdaDir} mix architectures (${[...found].join(', ')}): build all four alike`);
    }
    return found.size ? [...found][0] : 'arm64';
  }
}

module.exports = { TrainyardStack, INDEXES };
