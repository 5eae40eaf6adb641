//! The IAM tags of callers, which the access policies group principals by
//! (`principal.getTag("team")`). API Gateway's IAM authorizer names the caller but carries none
//! of its tags, so the `api` function reads them from IAM: `ListRoleTags` for a role (an
//! assumed role's role), `ListUserTags` for a user.
//!
//! Each caller's tags are kept for [`TAGS_TTL_MS`], so IAM (whose API is throttled account-wide)
//! is asked at most once per caller per 5 minutes per warm instance; a change of tags takes
//! effect within that. A role or user IAM does not know has no tags. When IAM cannot be read
//! (throttled, or the function's role lacks the permission) the last tags read are used if there
//! are any; otherwise [`TagsUnreadable`] is returned and the request is refused as throttled, so
//! that a `forbid` written on a tag cannot be slipped past while IAM is unreachable.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use aws_sdk_iam::error::ProvideErrorMetadata;

/// How long a caller's tags are used before IAM is asked again.
pub const TAGS_TTL_MS: i64 = 5 * 60 * 1000;

/// The most callers whose tags are kept; past it, the cache starts again.
const MAX_CACHED: usize = 10_000;

/// IAM's error code for a role or user that does not exist.
const NO_SUCH_ENTITY: &str = "NoSuchEntity";

/// The caller's tags could not be read from IAM, and none were read before.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the IAM tags of {kind} {name} cannot be read: {reason}")]
pub struct TagsUnreadable {
    /// `role` or `user`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// What IAM answered.
    pub reason: String,
}

/// Callers' IAM tags, read through and kept for [`TAGS_TTL_MS`].
#[derive(Debug)]
pub struct PrincipalTags {
    client: aws_sdk_iam::Client,
    cache: Mutex<HashMap<(String, String), Cached>>,
}

#[derive(Debug, Clone)]
struct Cached {
    read_at_ms: i64,
    tags: BTreeMap<String, String>,
}

impl PrincipalTags {
    /// Tags read with `client`.
    pub fn new(client: aws_sdk_iam::Client) -> Self {
        Self {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The tags of the IAM `kind` (`role` or `user`) named `name`, as of at most
    /// [`TAGS_TTL_MS`] before `now_ms`. Any other kind has none.
    pub async fn of(
        &self,
        kind: &str,
        name: &str,
        now_ms: i64,
    ) -> Result<BTreeMap<String, String>, TagsUnreadable> {
        if !matches!(kind, "role" | "user") {
            return Ok(BTreeMap::new());
        }
        let key = (kind.to_owned(), name.to_owned());
        let cached = self.lock().get(&key).cloned();
        if let Some(cached) = cached
            .as_ref()
            .filter(|c| now_ms - c.read_at_ms < TAGS_TTL_MS)
        {
            return Ok(cached.tags.clone());
        }
        match self.read(kind, name).await {
            Ok(tags) => {
                let mut cache = self.lock();
                if cache.len() >= MAX_CACHED {
                    cache.clear();
                }
                let cached = Cached {
                    read_at_ms: now_ms,
                    tags: tags.clone(),
                };
                cache.insert(key, cached);
                Ok(tags)
            }
            Err(reason) => {
                tracing::warn!(kind, name, %reason, "reading the caller's IAM tags failed");
                cached.map(|c| c.tags).ok_or_else(|| TagsUnreadable {
                    kind: kind.to_owned(),
                    name: name.to_owned(),
                    reason,
                })
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Cached>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every tag of the role or user, following IAM's pages; a name IAM does not know has none.
    async fn read(&self, kind: &str, name: &str) -> Result<BTreeMap<String, String>, String> {
        let mut tags = BTreeMap::new();
        let mut marker: Option<String> = None;
        loop {
            let page = if kind == "role" {
                let request = self.client.list_role_tags().role_name(name);
                let answer = request.set_marker(marker.take()).send().await;
                answer
                    .map(|o| (o.tags, o.is_truncated, o.marker))
                    .map_err(|e| failed(&e))
            } else {
                let request = self.client.list_user_tags().user_name(name);
                let answer = request.set_marker(marker.take()).send().await;
                answer
                    .map(|o| (o.tags, o.is_truncated, o.marker))
                    .map_err(|e| failed(&e))
            };
            let (page, truncated, next) = match page {
                Ok(page) => page,
                Err(None) => return Ok(BTreeMap::new()),
                Err(Some(reason)) => return Err(reason),
            };
            tags.extend(page.into_iter().map(|t| (t.key, t.value)));
            match next.filter(|_| truncated) {
                Some(next) => marker = Some(next),
                None => return Ok(tags),
            }
        }
    }
}

/// Why a read failed: `None` when IAM does not know the name (it has no tags), else IAM's error.
fn failed(error: &impl ProvideErrorMetadata) -> Option<String> {
    (error.code() != Some(NO_SUCH_ENTITY)).then(|| describe(error))
}

fn describe(error: &impl ProvideErrorMetadata) -> String {
    format!(
        "{}: {}",
        error.code().unwrap_or("no error code"),
        error.message().unwrap_or("no message")
    )
}
