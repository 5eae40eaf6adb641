//! The caller: who a request comes from, read from its IAM ARN.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The ARN of a caller nobody authenticated (local mode without `--credentials`).
pub const ANONYMOUS: &str = "anonymous";

/// Who calls, as policies see it (`principal.arn`, `.account`, `.kind`, `.name`, and its tags
/// through `principal.hasTag(k)` / `principal.getTag(k)`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Principal {
    /// The full ARN, or [`ANONYMOUS`].
    pub arn: String,
    /// The 12-digit account; empty when anonymous.
    pub account: String,
    /// `user`, `role`, `root`, `anonymous` or `other`.
    pub kind: String,
    /// The user or role name, without path or session.
    pub name: String,
    /// The IAM tags of the user or role (on AWS, read from IAM; in local mode, from the access
    /// keys file), which policies group principals by.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

impl Principal {
    /// A caller nobody authenticated.
    pub fn anonymous() -> Self {
        Self {
            arn: ANONYMOUS.to_owned(),
            account: String::new(),
            kind: ANONYMOUS.to_owned(),
            name: ANONYMOUS.to_owned(),
            tags: BTreeMap::new(),
        }
    }

    /// Reads an IAM or STS ARN: `arn:aws:iam::ACCOUNT:user/PATH/NAME`,
    /// `arn:aws:iam::ACCOUNT:role/PATH/NAME`, `arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION`,
    /// `arn:aws:iam::ACCOUNT:root`. Anything else keeps its ARN with kind `other` and the text
    /// after the last `/` (or `:`) as its name, so a policy can still match it by `arn`.
    pub fn from_arn(arn: &str) -> Self {
        let fields: Vec<&str> = arn.splitn(6, ':').collect();
        let (account, resource) = match fields.as_slice() {
            ["arn", _, "iam" | "sts", _, account, resource] => (*account, *resource),
            _ => ("", arn),
        };
        let segments: Vec<&str> = resource.split('/').collect();
        let (kind, name) = match segments.as_slice() {
            ["user", .., name] if segments.len() >= 2 => ("user", *name),
            ["role", .., name] if segments.len() >= 2 => ("role", *name),
            ["assumed-role", role, _session] => ("role", *role),
            ["root"] => ("root", "root"),
            _ => (
                "other",
                resource.rsplit(['/', ':']).next().unwrap_or(resource),
            ),
        };
        Self {
            arn: arn.to_owned(),
            account: account.to_owned(),
            kind: kind.to_owned(),
            name: name.to_owned(),
            tags: BTreeMap::new(),
        }
    }

    /// The same principal with `tags`.
    pub fn with_tags(self, tags: BTreeMap<String, String>) -> Self {
        Self { tags, ..self }
    }

    /// The IAM role or user whose tags this principal carries, as (kind, name): `("role",
    /// name)` for a role or an assumed role, `("user", name)` for a user; none for the root,
    /// the anonymous caller and other ARNs.
    pub fn tagged_identity(&self) -> Option<(&str, &str)> {
        matches!(self.kind.as_str(), "role" | "user").then_some((self.kind.as_str(), &self.name))
    }

    /// Whether nobody authenticated this caller.
    pub fn is_anonymous(&self) -> bool {
        self.kind == ANONYMOUS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iam_and_sts_arns_read_as_kind_account_and_name() {
        let cases = [
            (
                "arn:aws:iam::123456789012:user/alice",
                "user",
                "123456789012",
                "alice",
            ),
            (
                "arn:aws:iam::123456789012:user/team/vision/bob",
                "user",
                "123456789012",
                "bob",
            ),
            (
                "arn:aws:iam::123456789012:role/platform-admin",
                "role",
                "123456789012",
                "platform-admin",
            ),
            (
                "arn:aws:sts::123456789012:assumed-role/vision-researcher/alice@example.com",
                "role",
                "123456789012",
                "vision-researcher",
            ),
            (
                "arn:aws:iam::123456789012:root",
                "root",
                "123456789012",
                "root",
            ),
            (
                "arn:aws:sts::123456789012:federated-user/carol",
                "other",
                "123456789012",
                "carol",
            ),
            ("not-an-arn", "other", "", "not-an-arn"),
        ];
        for (arn, kind, account, name) in cases {
            let p = Principal::from_arn(arn);
            assert_eq!(
                (p.kind.as_str(), p.account.as_str(), p.name.as_str()),
                (kind, account, name),
                "{arn}"
            );
            assert_eq!(p.arn, arn);
            assert!(!p.is_anonymous());
        }
        assert!(Principal::anonymous().is_anonymous());
    }
}
