#!/usr/bin/env node
// Entry point of the CDK app: one stack, the same resources as ../../template.yaml.
'use strict';

const cdk = require('aws-cdk-lib');
const { TrainyardStack } = require('../lib/trainyard-stack');

const app = new cdk.App({ analyticsReporting: false });
const truthy = (v) => v === true || v === 'true';
new TrainyardStack(app, app.node.tryGetContext('stackName') || 'Trainyard', {
  lambdaDir: app.node.tryGetContext('lambdaDir'),
  allowMissingBuild: truthy(app.node.tryGetContext('allowMissingBuild')),
  env: {
    account: process.env.CDK_DEFAULT_ACCOUNT,
    region: process.env.CDK_DEFAULT_REGION,
  },
});
