//! End-to-end tests of the Lambda functions live in `tests/`; this crate has no library code.
