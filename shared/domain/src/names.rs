//! The naming rule Batch applies to job names and to queues, environments, policies and quota
//! shares: 1–128 characters of letters, digits, hyphens and underscores.

use crate::limits::MAX_NAME_LEN;

/// Why a name is not acceptable; the message is shown to the client with the field name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty.
    #[error("must not be empty")]
    Empty,
    /// The name is longer than [`MAX_NAME_LEN`].
    #[error("must be at most {MAX_NAME_LEN} characters, got {0}")]
    TooLong(usize),
    /// The name has a character outside `[A-Za-z0-9_-]`.
    #[error("may contain only letters, numbers, hyphens (-) and underscores (_), found {0:?}")]
    BadCharacter(char),
}

/// Checks a Batch resource or job name.
pub fn check_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    let len = name.chars().count();
    if len > MAX_NAME_LEN {
        return Err(NameError::TooLong(len));
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        Some(c) => Err(NameError::BadCharacter(c)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_batch_rules() {
        let long = "a".repeat(129);
        let cases: &[(&str, Result<(), NameError>)] = &[
            ("production", Ok(())),
            ("team_a-2", Ok(())),
            ("", Err(NameError::Empty)),
            (&long, Err(NameError::TooLong(129))),
            ("has space", Err(NameError::BadCharacter(' '))),
            ("slash/name", Err(NameError::BadCharacter('/'))),
        ];
        for (name, expected) in cases {
            assert_eq!(&check_name(name), expected, "name {name:?}");
        }
        assert_eq!(check_name(&"a".repeat(128)), Ok(()));
    }
}
