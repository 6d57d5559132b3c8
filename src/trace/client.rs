//! The exporter's HTTP client: ureq (already a dependency) instead of the SDK's reqwest, to
//! keep the build small. The batch processor exports from its own thread, so a blocking call
//! inside the async method blocks nothing else.

use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// The largest response body read back (collectors answer with a short status message).
const MAX_RESPONSE: u64 = 1024 * 1024;

/// A ureq agent that hands back every status (the exporter judges them).
#[derive(Debug)]
pub(super) struct Ureq(ureq::Agent);

impl Ureq {
    /// An agent whose calls give up after `timeout`.
    pub(super) fn new(timeout: Duration) -> Self {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .build();
        Ureq(ureq::Agent::new_with_config(config))
    }
}

#[async_trait::async_trait]
impl HttpClient for Ureq {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let request = Request::from_parts(parts, body.to_vec());
        let mut response = self.0.run(request)?;
        let status = response.status();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE)
            .read_to_vec()?;
        Ok(Response::builder().status(status).body(Bytes::from(body))?)
    }
}
