//! The AWS Batch service-job API (to be written).
