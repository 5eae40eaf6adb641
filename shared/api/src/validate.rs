//! Checks shared by the operations. Each failure is a `ClientException` whose message names the
//! field and the limit, e.g. `schedulingPriority must be between 0 and 9999, got 10000`.

use std::ops::RangeInclusive;

use trainyard_domain::Tags;
use trainyard_domain::limits::{MAX_TAG_VALUE_LEN, MAX_TAGS, TAG_KEY_LEN};
use trainyard_domain::names::{check_name, check_share_identifier};

use crate::error::ApiError;

/// `field` must lie in `range`.
pub fn range(field: &str, value: i64, range: RangeInclusive<i64>) -> Result<(), ApiError> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(ApiError::client(format!(
            "{field} must be between {} and {}, got {value}",
            range.start(),
            range.end()
        )))
    }
}

/// A required member that is absent.
pub fn required<T>(field: &str, value: Option<T>) -> Result<T, ApiError> {
    value.ok_or_else(|| ApiError::client(format!("{field} is required")))
}

/// A Batch name (letters, digits, `-`, `_`; 1–128).
pub fn name(field: &str, value: &str) -> Result<(), ApiError> {
    check_name(value).map_err(|e| ApiError::client(format!("{field} {e}")))
}

/// A job's share identifier.
pub fn share_identifier(field: &str, value: &str) -> Result<(), ApiError> {
    check_share_identifier(value, false).map_err(|e| ApiError::client(format!("{field} {e}")))
}

/// A string's length (in characters) must lie in `range`.
pub fn length(field: &str, value: &str, range: RangeInclusive<usize>) -> Result<(), ApiError> {
    let len = value.chars().count();
    if range.contains(&len) {
        Ok(())
    } else {
        Err(ApiError::client(format!(
            "{field} must be {}–{} characters long, got {len}",
            range.start(),
            range.end()
        )))
    }
}

/// Batch's tag rules: 1–50 tags, keys 1–128 characters, values up to 256. `aws:` keys are
/// reserved.
pub fn tags(field: &str, tags: &Tags) -> Result<(), ApiError> {
    if tags.len() > MAX_TAGS {
        return Err(ApiError::client(format!(
            "{field} may have at most {MAX_TAGS} tags, got {}",
            tags.len()
        )));
    }
    for (key, value) in tags {
        length(&format!("{field} key {key:?}"), key, TAG_KEY_LEN.clone())?;
        if value.chars().count() > MAX_TAG_VALUE_LEN {
            return Err(ApiError::client(format!(
                "{field}[{key:?}] must be at most {MAX_TAG_VALUE_LEN} characters long"
            )));
        }
        if key.to_ascii_lowercase().starts_with("aws:") {
            return Err(ApiError::client(format!(
                "{field} key {key:?}: the aws: prefix is reserved"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_messages_name_field_and_limits() {
        let err = range("schedulingPriority", 10_000, 0..=9999).unwrap_err();
        assert_eq!(
            err.message,
            "schedulingPriority must be between 0 and 9999, got 10000"
        );
        assert!(range("schedulingPriority", 9999, 0..=9999).is_ok());
    }

    #[test]
    fn tag_rules() {
        let ok: Tags = [("team".to_owned(), "vision".to_owned())].into();
        assert!(tags("tags", &ok).is_ok());
        let too_many: Tags = (0..51).map(|i| (format!("k{i}"), String::new())).collect();
        assert!(
            tags("tags", &too_many)
                .unwrap_err()
                .message
                .contains("at most 50")
        );
        let long_value: Tags = [("k".to_owned(), "v".repeat(257))].into();
        assert!(
            tags("tags", &long_value)
                .unwrap_err()
                .message
                .contains("256")
        );
        let long_key: Tags = [("k".repeat(129), String::new())].into();
        assert!(
            tags("tags", &long_key)
                .unwrap_err()
                .message
                .contains("1–128")
        );
        let empty_key: Tags = [(String::new(), String::new())].into();
        assert!(tags("tags", &empty_key).is_err());
        let reserved: Tags = [("aws:x".to_owned(), String::new())].into();
        assert!(tags("tags", &reserved).is_err());
    }
}
