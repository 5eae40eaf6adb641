//! Decoding request bodies in two steps: the text into a JSON value (a syntax error is
//! "Malformed JSON"), then the value into the request's type through `Strict`, which refuses a
//! structure given as a list. Messages name the member at fault (`retryStrategy.attempts:
//! invalid type …`) using the path serde was at when it failed.

use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{self, DeserializeOwned, IntoDeserializer, Unexpected, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::Value;

use crate::error::ApiError;

/// Decodes a JSON request body into `T`. An empty body is read as `{}` (botocore sends `{}` for
/// operations without input, some clients send nothing).
pub fn json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::client(format!("Malformed JSON in request body: {e}")))?;
    serde_path_to_error::deserialize(Strict(&value)).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if path == "." {
            ApiError::client(format!("Invalid request body: {inner}"))
        } else {
            ApiError::client(format!("Invalid value for {path}: {inner}"))
        }
    })
}

/// A JSON value read as a request's members are declared, and no more loosely: serde's derived
/// structures also accept a list of their members in order (`"retryStrategy": [3, []]`), which
/// no AWS client sends and which would let a body mean something else than it shows; here a
/// structure must be an object. An enum given anything but a string or an object is a type
/// error with its member's path (serde_json reports it as a syntax error).
#[derive(Clone, Copy)]
struct Strict<'a>(&'a Value);

impl<'de> IntoDeserializer<'de, serde_json::Error> for Strict<'de> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(_) => Unexpected::Other("number"),
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

impl<'de> de::Deserializer<'de> for Strict<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(items) => {
                let mut seq = SeqDeserializer::new(items.iter().map(Strict));
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Value::Object(members) => {
                let mut map =
                    MapDeserializer::new(members.iter().map(|(k, v)| (k.as_str(), Strict(v))));
                let value = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(value)
            }
            Value::String(s) => visitor.visit_borrowed_str(s),
            // Null, booleans and numbers as serde_json reads them.
            other => de::Deserializer::deserialize_any(other, visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Object(_) => self.deserialize_any(visitor),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            Value::Object(members) if members.len() == 1 => {
                visitor.visit_enum(de::value::MapAccessDeserializer::new(MapDeserializer::new(
                    members.iter().map(|(k, v)| (k.as_str(), Strict(v))),
                )))
            }
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map identifier
    }
}

/// Encodes a response body. Serialising our own wire types cannot fail in practice; if it ever
/// does, it is Trainyard's fault (a `ServerException`), logged with the cause.
pub fn to_value<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, ApiError> {
    serde_json::to_value(value).map_err(|e| {
        tracing::error!(error = %e, "response encoding failed");
        ApiError::server("Trainyard could not encode the response; please retry")
    })
}
#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Req {
        job_name: String,
        retry_strategy: Option<Retry>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Retry {
        attempts: i64,
    }

    #[test]
    fn messages_name_the_member_at_fault() {
        let cases = [
            (
                r#"{"jobName": "a", "retryStrategy": {"attempts": "x"}}"#,
                "retryStrategy.attempts",
            ),
            (r#"{"jobName": 5}"#, "jobName"),
            (
                r#"{"retryStrategy": {"attempts": 1}}"#,
                "missing field `jobName`",
            ),
            (r#"{"jobName": "a""#, "Malformed JSON"),
            (r#"{"jobName": "a"} trailing"#, "Malformed JSON"),
            (r#"{"jobName": "a", "retryStrategy": [3]}"#, "retryStrategy"),
            (r#"["a", null]"#, "Invalid request body"),
        ];
        for (body, needle) in cases {
            let err = json::<Req>(body.as_bytes()).unwrap_err();
            assert!(err.message.contains(needle), "{body}: {}", err.message);
            assert_eq!(err.error_type(), "ClientException");
        }
    }

    #[test]
    fn an_empty_body_is_an_empty_object() {
        #[derive(serde::Deserialize)]
        struct Empty {}
        assert!(json::<Empty>(b"").is_ok());
        assert!(json::<Empty>(b"  ").is_ok());
    }
}
