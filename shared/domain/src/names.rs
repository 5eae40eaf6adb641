//! The naming rule Batch applies to job names and to queues, environments, policies and quota
//! shares: 1–128 characters of letters, digits, hyphens and underscores.

use crate::limits::{MAX_NAME_LEN, MAX_SHARE_IDENTIFIER};

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

/// Why a share identifier is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareIdentifierError {
    /// Empty, or longer than [`MAX_SHARE_IDENTIFIER`].
    #[error("must be 1-{MAX_SHARE_IDENTIFIER} characters, got {0}")]
    Length(usize),
    /// A character outside `[A-Za-z0-9]` (or a `*` anywhere but at the end of a prefix).
    #[error("may contain only letters and digits{}, found {found:?}",
        if *prefix { ", and end with * to name a prefix" } else { "" })]
    BadCharacter {
        /// Whether a prefix was allowed.
        prefix: bool,
        /// The character.
        found: char,
    },
}

/// Checks a share identifier: 1-255 letters and digits, as Batch documents it. With `prefix`,
/// as in a fair-share policy's `shareDistribution`, it may end with `*`.
pub fn check_share_identifier(id: &str, prefix: bool) -> Result<(), ShareIdentifierError> {
    let body = match id.strip_suffix('*') {
        Some(body) if prefix => body,
        _ => id,
    };
    let len = id.chars().count();
    if body.is_empty() || len > MAX_SHARE_IDENTIFIER {
        return Err(ShareIdentifierError::Length(len));
    }
    match body.chars().find(|c| !c.is_ascii_alphanumeric()) {
        Some(found) => Err(ShareIdentifierError::BadCharacter { prefix, found }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_identifiers_are_letters_and_digits_and_prefixes_end_with_a_star() {
        for ok in ["vision", "teamA", "Team2", &"a".repeat(255)] {
            assert_eq!(check_share_identifier(ok, false), Ok(()), "{ok}");
            assert_eq!(check_share_identifier(ok, true), Ok(()), "{ok}");
        }
        assert_eq!(check_share_identifier("vision*", true), Ok(()));
        let cases: &[(&str, bool, ShareIdentifierError)] = &[
            ("", false, ShareIdentifierError::Length(0)),
            ("*", true, ShareIdentifierError::Length(1)),
            (&"a".repeat(256), false, ShareIdentifierError::Length(256)),
            (
                "vision*",
                false,
                ShareIdentifierError::BadCharacter {
                    prefix: false,
                    found: '*',
                },
            ),
            (
                "a*b*",
                true,
                ShareIdentifierError::BadCharacter {
                    prefix: true,
                    found: '*',
                },
            ),
            (
                "nul\0",
                false,
                ShareIdentifierError::BadCharacter {
                    prefix: false,
                    found: '\0',
                },
            ),
            (
                "team-a",
                false,
                ShareIdentifierError::BadCharacter {
                    prefix: false,
                    found: '-',
                },
            ),
            (
                "two words",
                false,
                ShareIdentifierError::BadCharacter {
                    prefix: false,
                    found: ' ',
                },
            ),
            (
                "équipe",
                false,
                ShareIdentifierError::BadCharacter {
                    prefix: false,
                    found: 'é',
                },
            ),
        ];
        for (id, prefix, expected) in cases {
            assert_eq!(
                &check_share_identifier(id, *prefix).unwrap_err(),
                expected,
                "{id:?}"
            );
        }
    }

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
