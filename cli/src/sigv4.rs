//! SigV4 for the CLI and for local mode: the client signs its requests as API Gateway's IAM
//! auth expects (`execute-api`), and `trainyard up --credentials FILE` checks the signatures of
//! the requests it gets against the access keys in that file.
//!
//! Both directions use `aws-sigv4`'s signer: checking a signature is signing the request again
//! with the secret the file holds for its access key, over exactly the headers the client says
//! it signed, and comparing.
//!
//! Credentials come from the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`) or the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else
//! `~/.aws/credentials`) under `AWS_PROFILE` (else `default`). Other sources of the SDKs' chain
//! (SSO, roles, instance metadata) are not read: export their keys first, for example with
//! `eval "$(aws configure export-credentials --format env)"`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;

/// The signing name API Gateway's IAM auth checks.
pub const EXECUTE_API: &str = "execute-api";

/// S3's signing name (the emulator's checkpoint copies, `checkpoints.rs`).
pub const S3: &str = "s3";

/// The signing names local mode accepts: API Gateway's, which the CLI and `trainyard_sigv4.py`
/// use, and Batch's own, which unmodified Batch clients use.
pub const ACCEPTED_SERVICES: [&str; 2] = [EXECUTE_API, "batch"];

/// How far a request's `x-amz-date` may be from the server's clock, as AWS allows.
pub const MAX_SKEW: Duration = Duration::from_secs(15 * 60);

/// An access key and its secret (and session token, when temporary).
#[derive(Clone)]
pub struct Keys {
    /// The access key id.
    pub access_key_id: String,
    secret: String,
    session_token: Option<String>,
    /// Whom a server taking requests signed with these keys (`up --credentials`) takes the
    /// caller for: the profile's `principal_arn` (Trainyard's own setting, which AWS tools
    /// ignore), for example an assumed-role ARN to match the deployment's policies.
    pub principal_arn: Option<String>,
    /// The tags the caller carries for the access policies (`principal.getTag(…)`): the
    /// profile's `principal_tags` (`key=value` pairs separated by commas; Trainyard's own
    /// setting, as IAM tags are on AWS).
    pub principal_tags: BTreeMap<String, String>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

impl Keys {
    /// An access key and its secret, with nothing else.
    #[cfg(test)]
    pub fn new(access_key_id: &str, secret: &str) -> Keys {
        Keys {
            access_key_id: access_key_id.to_owned(),
            secret: secret.to_owned(),
            session_token: None,
            principal_arn: None,
            principal_tags: BTreeMap::new(),
        }
    }

    /// The caller's keys from the environment or the shared credentials file; `None` when
    /// neither has any.
    pub fn from_environment() -> anyhow::Result<Option<Keys>> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if let (Some(id), Some(secret)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            return Ok(Some(Keys {
                access_key_id: id,
                secret,
                session_token: var("AWS_SESSION_TOKEN"),
                principal_arn: None,
                principal_tags: BTreeMap::new(),
            }));
        }
        let Some(path) = var("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|home| Path::new(&home).join(".aws/credentials")))
        else {
            return Ok(None);
        };
        if !path.exists() {
            return Ok(None);
        }
        let profile = var("AWS_PROFILE").unwrap_or_else(|| "default".into());
        let mut profiles = read_credentials_file(&path)?;
        Ok(profiles.remove(&profile))
    }
}

/// The profiles of a shared credentials file (`[name]` sections with `aws_access_key_id`,
/// `aws_secret_access_key` and optionally `aws_session_token`); sections without both keys
/// are left out.
pub fn read_credentials_file(path: &Path) -> anyhow::Result<BTreeMap<String, Keys>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_credentials(&text).with_context(|| format!("reading {}", path.display()))
}

fn parse_credentials(text: &str) -> anyhow::Result<BTreeMap<String, Keys>> {
    let mut sections: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim();
            let name = name.strip_prefix("profile ").unwrap_or(name).trim();
            sections.entry(name.to_owned()).or_default();
            current = Some(name.to_owned());
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            bail!("line {}: expected `key = value` or `[profile]`", n + 1);
        };
        let Some(section) = &current else {
            bail!("line {}: a setting before any [profile] section", n + 1);
        };
        sections
            .entry(section.clone())
            .or_default()
            .insert(key.trim().to_ascii_lowercase(), value.trim().to_owned());
    }
    let mut profiles = BTreeMap::new();
    for (name, mut settings) in sections {
        let (Some(access_key_id), Some(secret)) = (
            settings.remove("aws_access_key_id"),
            settings.remove("aws_secret_access_key"),
        ) else {
            continue;
        };
        let principal_tags = match settings.remove("principal_tags") {
            Some(text) => {
                parse_tags(&text).with_context(|| format!("profile [{name}]: principal_tags"))?
            }
            None => BTreeMap::new(),
        };
        let keys = Keys {
            access_key_id,
            secret,
            session_token: settings.remove("aws_session_token"),
            principal_arn: settings.remove("principal_arn"),
            principal_tags,
        };
        profiles.insert(name, keys);
    }
    Ok(profiles)
}

/// `key=value` pairs separated by commas (`team=nlp, cost-center=42`), each key once, as IAM
/// tags are: keys of 1-128 characters, values of at most 256.
fn parse_tags(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut tags = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("expected key=value, got {pair:?}");
        };
        let (key, value) = (key.trim(), value.trim());
        if key.is_empty() || key.chars().count() > 128 || value.chars().count() > 256 {
            bail!("a tag key has 1-128 characters and a value at most 256, got {pair:?}");
        }
        if tags.insert(key.to_owned(), value.to_owned()).is_some() {
            bail!("the tag {key:?} is given twice");
        }
    }
    Ok(tags)
}

/// A request about to be sent, for [`sign_request`].
pub struct Outgoing<'a> {
    /// `POST`, `GET`, …
    pub method: &'a str,
    /// The full URL.
    pub url: &'a str,
    /// The headers sent besides `host` (which comes from the URL).
    pub headers: &'a [(&'a str, &'a str)],
    /// The body.
    pub body: &'a [u8],
}

/// The headers that sign `request`: `authorization`, `x-amz-date`, and `x-amz-security-token`
/// for temporary keys.
pub fn sign_request(
    keys: &Keys,
    region: &str,
    service: &str,
    request: &Outgoing<'_>,
    now: SystemTime,
) -> anyhow::Result<Vec<(String, String)>> {
    let Outgoing {
        method,
        url,
        headers,
        body,
    } = *request;
    let host = url
        .split_once("://")
        .map(|(_, rest)| rest.split('/').next().unwrap_or(rest))
        .context("the URL has no host")?;
    let mut signed: Vec<(&str, &str)> = vec![("host", host)];
    signed.extend(headers.iter().copied());
    let credentials = Credentials::new(
        &keys.access_key_id,
        &keys.secret,
        keys.session_token.clone(),
        None,
        "trainyard",
    );
    let identity = credentials.into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(now)
        .settings(settings_for(service))
        .build()
        .context("building the signing parameters")?
        .into();
    let request = SignableRequest::new(method, url, signed.into_iter(), SignableBody::Bytes(body))
        .context("reading the request to sign")?;
    let (instructions, _) = sign(request, &params)
        .context("signing the request")?
        .into_parts();
    Ok(instructions
        .headers()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect())
}

/// How `service` wants its requests signed: S3 signs the payload's hash in
/// `x-amz-content-sha256` and the path as sent (encoded once, not normalized); the rest take
/// SigV4's defaults.
fn settings_for(service: &str) -> SigningSettings {
    let mut settings = SigningSettings::default();
    if service == S3 {
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    }
    settings
}

/// Why local mode refused a request's signature: the error type Batch clients know, and a
/// message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `MissingAuthenticationTokenException`, `IncompleteSignatureException`,
    /// `UnrecognizedClientException` or `InvalidSignatureException`.
    pub kind: &'static str,
    /// What was wrong, for the caller.
    pub message: String,
}

fn refuse(kind: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        kind,
        message: message.into(),
    }
}

/// A request as the server got it, for [`verify`].
pub struct Received<'a> {
    /// `POST`, `GET`, …
    pub method: &'a str,
    /// The path and query exactly as sent (still percent-encoded).
    pub path_and_query: &'a str,
    /// Every header, names in lower case.
    pub headers: &'a [(String, String)],
    /// The body.
    pub body: &'a [u8],
}

/// Checks the request's SigV4 signature against `keys` (by access key id) in `region`, at
/// `now`; returns the access key id that signed it.
pub fn verify(
    request: &Received<'_>,
    keys: &BTreeMap<String, Keys>,
    region: &str,
    now: SystemTime,
) -> Result<String, Refusal> {
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let Some(authorization) = header("authorization") else {
        return Err(refuse(
            "MissingAuthenticationTokenException",
            "Missing Authentication Token: this server checks SigV4 signatures (trainyard up \
             --credentials); sign the request with one of its access keys",
        ));
    };
    let parsed = parse_authorization(authorization)?;
    let scope: Vec<&str> = parsed.credential.split('/').collect();
    let [access_key_id, date, scope_region, service, "aws4_request"] = scope[..] else {
        return Err(refuse(
            "IncompleteSignatureException",
            format!(
                "Credential {:?} is not KEY/DATE/REGION/SERVICE/aws4_request",
                parsed.credential
            ),
        ));
    };
    let Some(known) = keys.values().find(|k| k.access_key_id == access_key_id) else {
        return Err(refuse(
            "UnrecognizedClientException",
            format!(
                "The security token included in the request is invalid: access key {access_key_id:?} is not in this server's credentials file"
            ),
        ));
    };
    if scope_region != region {
        return Err(refuse(
            "InvalidSignatureException",
            format!(
                "Credential should be scoped to a valid region: this server is in {region}, the request was signed for {scope_region}"
            ),
        ));
    }
    if !ACCEPTED_SERVICES.contains(&service) {
        return Err(refuse(
            "InvalidSignatureException",
            format!(
                "Credential should be scoped to the correct service: {} (got {service:?})",
                ACCEPTED_SERVICES.join(" or ")
            ),
        ));
    }
    let Some(signed_at) = header("x-amz-date").and_then(parse_amz_date) else {
        return Err(refuse(
            "IncompleteSignatureException",
            "the request has no valid x-amz-date header (YYYYMMDDTHHMMSSZ)",
        ));
    };
    if header("x-amz-date").is_some_and(|d| !d.starts_with(date)) {
        return Err(refuse(
            "InvalidSignatureException",
            "the credential scope's date is not the x-amz-date's",
        ));
    }
    let skew = now
        .duration_since(signed_at)
        .unwrap_or_else(|e| e.duration());
    if skew > MAX_SKEW {
        return Err(refuse(
            "InvalidSignatureException",
            format!(
                "Signature expired: signed {} s from this server's clock (at most {} s)",
                skew.as_secs(),
                MAX_SKEW.as_secs()
            ),
        ));
    }

    // Sign again over the headers the client signed; the signer adds `x-amz-date` and the
    // session token itself, so they are passed as its inputs rather than as headers.
    let mut signed = Vec::new();
    for name in &parsed.signed_headers {
        if matches!(name.as_str(), "x-amz-date" | "x-amz-security-token") {
            continue;
        }
        let Some(value) = header(name) else {
            return Err(refuse(
                "IncompleteSignatureException",
                format!("signed header {name:?} is not in the request"),
            ));
        };
        signed.push((name.as_str(), value));
    }
    let session_token = header("x-amz-security-token").map(str::to_owned);
    let credentials = Credentials::new(
        access_key_id,
        &known.secret,
        session_token,
        None,
        "trainyard-up",
    );
    let identity = credentials.into();
    let mut settings = SigningSettings::default();
    // Exactly the client's list: nothing excluded, nothing added.
    settings.excluded_headers = None;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(scope_region)
        .name(service)
        .time(signed_at)
        .settings(settings)
        .build()
        .map_err(|e| refuse("IncompleteSignatureException", e.to_string()))?
        .into();
    let url = format!("http://local{}", request.path_and_query);
    let expected = SignableRequest::new(
        request.method,
        url,
        signed.into_iter(),
        SignableBody::Bytes(request.body),
    )
    .and_then(|signable| sign(signable, &params))
    .map_err(|e| refuse("IncompleteSignatureException", e.to_string()))?
    .signature()
    .to_owned();
    if !constant_time_eq(expected.as_bytes(), parsed.signature.as_bytes()) {
        return Err(refuse(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. \
             Check your AWS Secret Access Key and signing method.",
        ));
    }
    Ok(access_key_id.to_owned())
}

struct Authorization<'a> {
    credential: &'a str,
    signed_headers: Vec<String>,
    signature: &'a str,
}

fn parse_authorization(value: &str) -> Result<Authorization<'_>, Refusal> {
    let Some(rest) = value.strip_prefix("AWS4-HMAC-SHA256 ") else {
        return Err(refuse(
            "IncompleteSignatureException",
            "Authorization must be AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…",
        ));
    };
    let mut credential = None;
    let mut signed_headers = None;
    let mut signature = None;
    for part in rest.split(',') {
        match part.trim().split_once('=') {
            Some(("Credential", v)) => credential = Some(v),
            Some(("SignedHeaders", v)) => signed_headers = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => {}
        }
    }
    match (credential, signed_headers, signature) {
        (Some(credential), Some(signed_headers), Some(signature)) => Ok(Authorization {
            credential,
            signed_headers: signed_headers
                .split(';')
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
            signature,
        }),
        _ => Err(refuse(
            "IncompleteSignatureException",
            "Authorization lacks Credential, SignedHeaders or Signature",
        )),
    }
}

/// `20261201T183000Z` as a time.
fn parse_amz_date(value: &str) -> Option<SystemTime> {
    let b = value.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> { value.get(range)?.parse().ok() };
    let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hour, minute, second) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

/// Days from 1970-01-01 to a proleptic Gregorian date (the inverse of `table`'s
/// `civil_from_days`), counting in 400-year eras whose years start on March 1st.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> BTreeMap<String, Keys> {
        parse_credentials(
            "# local mode's callers\n[alice]\naws_access_key_id = AKIDALICE\n\
             aws_secret_access_key = alice-secret\n\n[profile bob]\n\
             aws_access_key_id=AKIDBOB\naws_secret_access_key=bob-secret\n[half]\n\
             aws_access_key_id = AKIDHALF\n",
        )
        .expect("parses")
    }

    fn signed(keys: &Keys, service: &str, body: &[u8], at: SystemTime) -> Vec<(String, String)> {
        let mut headers = vec![
            ("host".to_owned(), "127.0.0.1:8080".to_owned()),
            ("content-type".to_owned(), "application/json".to_owned()),
        ];
        headers.extend(
            sign_request(
                keys,
                "us-east-1",
                service,
                &Outgoing {
                    method: "POST",
                    url: "http://127.0.0.1:8080/v1/describejobqueues",
                    headers: &[("content-type", "application/json")],
                    body,
                },
                at,
            )
            .expect("signs"),
        );
        headers
    }

    fn check(
        headers: &[(String, String)],
        body: &[u8],
        now: SystemTime,
    ) -> Result<String, Refusal> {
        let request = Received {
            method: "POST",
            path_and_query: "/v1/describejobqueues",
            headers,
            body,
        };
        verify(&request, &keys(), "us-east-1", now)
    }

    #[test]
    fn the_credentials_file_names_profiles_with_both_keys() {
        let keys = keys();
        assert_eq!(keys.keys().collect::<Vec<_>>(), ["alice", "bob"]);
        assert_eq!(keys["bob"].access_key_id, "AKIDBOB");
        assert!(parse_credentials("aws_access_key_id = x\n").is_err());
        assert!(parse_credentials("[a]\nno equals sign\n").is_err());
    }

    #[test]
    fn principal_tags_are_key_value_pairs_and_malformed_ones_name_their_profile() {
        let profile = |tags: &str| {
            format!(
                "[erin]\naws_access_key_id = A\naws_secret_access_key = s\nprincipal_tags = {tags}\n"
            )
        };
        let parsed = parse_credentials(&profile("team=nlp, cost-center = 42")).expect("parses");
        assert_eq!(
            parsed["erin"].principal_tags,
            BTreeMap::from([
                ("cost-center".to_owned(), "42".to_owned()),
                ("team".to_owned(), "nlp".to_owned()),
            ])
        );
        assert!(keys()["alice"].principal_tags.is_empty());
        for bad in ["team", "=nlp", "team=nlp,team=cv"] {
            let error = parse_credentials(&profile(bad)).expect_err(bad);
            assert!(format!("{error:#}").contains("profile [erin]"), "{error:#}");
        }
    }

    #[test]
    fn a_request_signed_with_a_known_key_verifies_for_either_service_and_nothing_else_does() {
        let at = UNIX_EPOCH + Duration::from_secs(1_796_083_200);
        let alice = &keys()["alice"];
        let body = b"{}";
        for service in ACCEPTED_SERVICES {
            assert_eq!(
                check(&signed(alice, service, body, at), body, at),
                Ok("AKIDALICE".into())
            );
        }
        let kind = |r: Result<String, Refusal>| r.map_err(|e| e.kind);

        // Another body, a wrong secret, an unknown key, another service, an old signature.
        assert_eq!(
            kind(check(&signed(alice, EXECUTE_API, body, at), b"{ }", at)),
            Err("InvalidSignatureException")
        );
        let mut forged = alice.clone();
        forged.secret = "guess".into();
        assert_eq!(
            kind(check(&signed(&forged, EXECUTE_API, body, at), body, at)),
            Err("InvalidSignatureException")
        );
        forged.access_key_id = "AKIDNOBODY".into();
        assert_eq!(
            kind(check(&signed(&forged, EXECUTE_API, body, at), body, at)),
            Err("UnrecognizedClientException")
        );
        assert_eq!(
            kind(check(&signed(alice, "s3", body, at), body, at)),
            Err("InvalidSignatureException")
        );
        let later = at + MAX_SKEW + Duration::from_secs(1);
        assert_eq!(
            kind(check(&signed(alice, EXECUTE_API, body, at), body, later)),
            Err("InvalidSignatureException")
        );
        assert_eq!(
            kind(check(&[], body, at)),
            Err("MissingAuthenticationTokenException")
        );
    }

    #[test]
    fn amz_dates_read_as_utc_times() {
        assert_eq!(parse_amz_date("19700101T000000Z"), Some(UNIX_EPOCH));
        assert_eq!(
            parse_amz_date("20261201T183000Z"),
            Some(UNIX_EPOCH + Duration::from_secs(1_796_149_800))
        );
        assert_eq!(
            parse_amz_date("20000229T000000Z"),
            Some(UNIX_EPOCH + Duration::from_secs(951_782_400))
        );
        for bad in [
            "20261201183000Z",
            "20261301T000000Z",
            "2026-12-01T18:30:00Z",
            "",
        ] {
            assert_eq!(parse_amz_date(bad), None, "{bad}");
        }
    }
}
