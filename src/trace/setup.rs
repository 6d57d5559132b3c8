//! From `[traces]` and the `OTEL_*` variables to a running exporter: whether tracing is on,
//! where spans go (checked: a bad endpoint is a config error, exit 2), and the provider whose
//! shutdown flushes what is still queued.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

use super::client::Ureq;
use crate::config::TracesConfig;
use crate::error::ConfigError;

/// The OTLP/HTTP default when neither the config nor a variable names an endpoint.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318/v1/traces";
/// How long one export may take before the exporter gives it up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The exporter of this process while it runs; [`Traces::shutdown`] flushes it. Tracing off:
/// holds nothing.
#[derive(Debug)]
#[must_use = "spans still queued are only sent by Traces::shutdown"]
pub struct Traces {
    provider: Option<SdkTracerProvider>,
}

impl Traces {
    /// Whether spans are being exported.
    pub fn is_on(&self) -> bool {
        self.provider.is_some()
    }

    /// Sends the spans still queued and stops the exporter (blocks up to its timeout). A
    /// failure is logged: traces never fail the command that made them.
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            tracing::warn!(error = %e, "traces: could not flush the last spans");
        }
    }
}

/// Reads one variable; unset and empty are the same.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether tracing is on: `OTEL_SDK_DISABLED=true` forces it off; else `traces.enabled`, or
/// `otlp` among `OTEL_TRACES_EXPORTER`'s exporters.
fn wanted(cfg: &TracesConfig) -> bool {
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return false;
    }
    cfg.enabled
        || var("OTEL_TRACES_EXPORTER")
            .is_some_and(|v| v.split(',').any(|e| e.trim().eq_ignore_ascii_case("otlp")))
}

/// The traces URL and where it came from: `traces.endpoint`, else
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as is), else `OTEL_EXPORTER_OTLP_ENDPOINT` +
/// `/v1/traces`, else the OTLP default. Checked here, as the config's own key is.
pub(super) fn endpoint(cfg: &TracesConfig) -> Result<String, ConfigError> {
    let (origin, key, url) = if let Some(e) = &cfg.endpoint {
        ("config", "traces.endpoint", e.clone())
    } else if let Some(e) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        (
            "environment variable OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            e,
        )
    } else if let Some(e) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        (
            "environment variable OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("{}/v1/traces", e.trim_end_matches('/')),
        )
    } else {
        return Ok(DEFAULT_ENDPOINT.into());
    };
    match crate::config::refuse_endpoint(&url) {
        Some(reason) => Err(ConfigError::Invalid {
            path: origin.into(),
            key: key.into(),
            value: format!("{url:?}"),
            reason: reason.into(),
        }),
        None => Ok(url),
    }
}

/// Only OTLP over HTTP with protobuf bodies is built in: another protocol named by the
/// standard variables is refused rather than silently not used.
fn check_protocol() -> Result<(), ConfigError> {
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(p) = var(name)
            && p.trim() != "http/protobuf"
        {
            return Err(ConfigError::Invalid {
                path: format!("environment variable {name}"),
                key: name.into(),
                value: format!("{p:?}"),
                reason: "toolq exports traces over http/protobuf only".into(),
            });
        }
    }
    Ok(())
}

/// Starts the exporter when tracing is on (else returns a [`Traces`] holding nothing), and
/// makes the span helpers use it. The SDK reads its own variables (headers, resource
/// attributes, sampler, batch sizes). Only the first call of a process installs a tracer;
/// a later one returns an empty [`Traces`].
pub fn init(cfg: &TracesConfig) -> Result<Traces, ConfigError> {
    if !wanted(cfg) {
        return Ok(Traces { provider: None });
    }
    let url = endpoint(cfg)?;
    check_protocol()?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(Ureq::new(EXPORT_TIMEOUT))
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| ConfigError::Invalid {
            path: "traces".into(),
            key: "traces.endpoint".into(),
            value: format!("{url:?}"),
            reason: format!("the OTLP exporter could not start: {e}"),
        })?;
    let mut resource = Resource::builder();
    // The config's name wins; else OTEL_SERVICE_NAME (the builder's env detector), else toolq.
    if let Some(name) = &cfg.service_name {
        resource = resource.with_service_name(name.clone());
    } else if var("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("toolq");
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("toolq");
    if !super::spans::install(tracer) {
        // Another init already installed its tracer: keep that one and drop this exporter.
        let _ = provider.shutdown();
        return Ok(Traces { provider: None });
    }
    tracing::info!(endpoint = %url, "traces: exporting spans over OTLP/HTTP");
    Ok(Traces {
        provider: Some(provider),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_endpoint_is_checked() {
        let cfg = TracesConfig {
            enabled: true,
            endpoint: Some("localhost:4318".into()),
            service_name: None,
        };
        let e = endpoint(&cfg).unwrap_err().to_string();
        assert!(
            e.contains("traces.endpoint") && e.contains("localhost:4318"),
            "{e}"
        );
        let cfg = TracesConfig {
            endpoint: Some("https://collector:4318/v1/traces".into()),
            ..cfg
        };
        assert_eq!(endpoint(&cfg).unwrap(), "https://collector:4318/v1/traces");
    }
}
