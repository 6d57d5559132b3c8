//! What a tool call returns: [`ToolOutcome`] (success, the tool's own error, an internal
//! error, or a connection to set up), the [`ToolSuccess`] it carries and its [`Image`]s.
//! Outcomes are data, not errors.

use serde::Serialize;
use serde_json::Value;

/// The text a session sees for any internal error; the details go to ops only.
pub const INTERNAL_ERROR_TEXT: &str = "An internal error occurred while executing the tool";

/// An image attached to a successful result.
///
/// Accepts both toolq's field names (`mime_type`, `data`) and the seed's (`media_type`,
/// `base64`). It serializes with both pairs, so hosts written against the seed and scripts
/// written against toolq read it alike; a run's stored `result.json` keeps toolq's pair only
/// (see [`Image::stored`]), so the image data is not stored twice.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Image {
    /// MIME type, e.g. `image/png` (the seed's `media_type`).
    #[serde(alias = "media_type")]
    pub mime_type: String,
    /// Base64 data (the seed's `base64`).
    #[serde(alias = "base64")]
    pub data: String,
}

impl Image {
    /// An image from the seed's fields: base64 data and its media type.
    pub fn new(base64: impl Into<String>, media_type: impl Into<String>) -> Self {
        Self {
            mime_type: media_type.into(),
            data: base64.into(),
        }
    }

    /// The seed's name for [`Image::data`].
    pub fn base64(&self) -> &str {
        &self.data
    }

    /// The seed's name for [`Image::mime_type`].
    pub fn media_type(&self) -> &str {
        &self.mime_type
    }

    /// The form kept in a run's `result.json`: toolq's field names only, as before.
    pub fn stored(&self) -> Value {
        serde_json::json!({ "mime_type": self.mime_type, "data": self.data })
    }
}

impl Serialize for Image {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Image", 4)?;
        st.serialize_field("mime_type", &self.mime_type)?;
        st.serialize_field("data", &self.data)?;
        st.serialize_field("media_type", &self.mime_type)?;
        st.serialize_field("base64", &self.data)?;
        st.end()
    }
}

/// A successful result.
#[derive(Debug, Clone, Default)]
pub struct ToolSuccess {
    /// The visible result.
    pub value: Value,
    /// Images shown with it.
    pub images: Vec<Image>,
    /// Raw output kept beside the result for ops; never part of the visible result.
    pub raw_output: Option<String>,
}

/// How a tool call ended.
#[derive(Debug, Clone)]
pub enum ToolOutcome {
    /// It worked.
    Success(ToolSuccess),
    /// The tool's own verdict on its input: shown to the session, never retried.
    ToolError(String),
    /// Something broke inside: the session sees only [`INTERNAL_ERROR_TEXT`]; the details (the
    /// full error chain) go to `internal_error` and tracing. Retried while attempts remain.
    Internal(String),
    /// The tool needs a connection to a provider that is not set up. Inline (the executor)
    /// it is not an error: the host gets the provider to connect. A queued run with it fails
    /// without retry: "Background tool requires connection setup: {provider}" (the seed's).
    ConnectionRequired {
        /// Provider name.
        provider: String,
    },
    /// Run again after this long, without using an attempt (a monitor polling until a
    /// condition holds). The run is suspended meanwhile (no slot held); after
    /// `runs.max_snoozes` snoozes it fails, naming the limit. Inline (the executor) it is a
    /// tool error: there is no queued run to snooze.
    Snooze(std::time::Duration),
}

impl ToolOutcome {
    /// A success with just a JSON value.
    pub fn ok(value: Value) -> Self {
        ToolOutcome::Success(ToolSuccess {
            value,
            ..Default::default()
        })
    }

    /// A success with just a JSON value (the seed's name for [`ToolOutcome::ok`]).
    pub fn success(value: impl Into<Value>) -> Self {
        ToolOutcome::ok(value.into())
    }

    /// A success that also carries the tool's raw output (the seed's
    /// `success_with_raw_output`). The host gets it as [`ToolResult::raw_output`](super::result::ToolResult::raw_output); a queued
    /// run keeps it beside its result as `raw_output.txt`. It is never part of the value the
    /// model sees.
    pub fn success_with_raw_output(value: impl Into<Value>, raw_output: impl Into<String>) -> Self {
        ToolOutcome::Success(ToolSuccess {
            value: value.into(),
            images: Vec::new(),
            raw_output: Some(raw_output.into()),
        })
    }

    /// A success with images (the seed's `success_with_images`).
    pub fn success_with_images(value: impl Into<Value>, images: Vec<Image>) -> Self {
        ToolOutcome::Success(ToolSuccess {
            value: value.into(),
            images,
            raw_output: None,
        })
    }

    /// An internal error from a message (the seed's `internal_error_msg`): the session sees
    /// only [`INTERNAL_ERROR_TEXT`]; the message goes to ops.
    pub fn internal_error_msg(message: impl Into<String>) -> Self {
        ToolOutcome::Internal(message.into())
    }

    /// An internal error from an error value, keeping its source chain (the seed's
    /// `internal_error`; [`ToolOutcome::internal`] takes a reference).
    pub fn internal_error(err: impl std::error::Error + 'static) -> Self {
        ToolOutcome::internal(&err)
    }

    /// Run again after `d` without using an attempt (see [`ToolOutcome::Snooze`]).
    pub fn snooze(d: std::time::Duration) -> Self {
        ToolOutcome::Snooze(d)
    }

    /// A tool error.
    pub fn tool_error(msg: impl Into<String>) -> Self {
        ToolOutcome::ToolError(msg.into())
    }

    /// An internal error from any error, keeping its whole source chain.
    pub fn internal(err: &(dyn std::error::Error + 'static)) -> Self {
        let mut text = err.to_string();
        let mut src = err.source();
        while let Some(s) = src {
            text.push_str(": ");
            text.push_str(&s.to_string());
            src = s.source();
        }
        ToolOutcome::Internal(text)
    }
}
