//! The span helpers: start a span under a stored traceparent, the current context or another
//! span; add attributes; end it. Each checks first whether a tracer is installed, so with
//! tracing off they return an empty [`Span`] without allocating, and attribute closures are
//! never called.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;

/// The tracer of this process, once [`super::init`] started an exporter.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Installs `tracer` for the helpers; false when one was installed already.
pub(super) fn install(tracer: SdkTracer) -> bool {
    TRACER.set(tracer).is_ok()
}

/// What a new span hangs under.
#[derive(Debug, Clone, Copy)]
pub enum Parent<'a> {
    /// A stored W3C traceparent; none (or an unreadable one) starts a new trace.
    Traceparent(Option<&'a str>),
    /// The caller's current OpenTelemetry context when it has a span, else a new trace.
    Current,
    /// Another span of ours; an empty one starts a new trace.
    Span(&'a Span),
}

/// A started span, ended by [`Span::end`] (or when dropped). Empty when tracing is off.
#[derive(Debug, Default, Clone)]
#[must_use = "a span is sent when it ends"]
pub struct Span(Option<Context>);

impl Span {
    /// Starts span `name` under `parent`, with the attributes `attrs` gives (called only when
    /// tracing is on). `took`: the span began that long ago (the work already happened).
    pub fn start(
        name: &'static str,
        parent: Parent<'_>,
        took: Option<Duration>,
        attrs: impl FnOnce() -> Vec<KeyValue>,
    ) -> Span {
        let Some(tracer) = TRACER.get() else {
            return Span(None);
        };
        let parent_cx = match parent {
            Parent::Traceparent(tp) => match tp.and_then(super::traceparent::decode) {
                Some(sc) => Context::new().with_remote_span_context(sc),
                None => Context::new(),
            },
            Parent::Current => {
                let cx = Context::current();
                if cx.has_active_span() {
                    cx
                } else {
                    Context::new()
                }
            }
            Parent::Span(s) => s.0.clone().unwrap_or_default(),
        };
        let kind = match name {
            super::names::ENQUEUE => SpanKind::Producer,
            super::names::CLAIM | super::names::EXECUTE => SpanKind::Consumer,
            _ => SpanKind::Internal,
        };
        let mut builder = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attrs());
        if let Some(t) = took {
            // The SDK's clock, the one its end times use (spans are wall time, not the
            // injectable clock's).
            builder = builder.with_start_time(opentelemetry::time::now() - t);
        }
        let span = builder.start_with_context(tracer, &parent_cx);
        Span(Some(parent_cx.with_span(span)))
    }

    /// A handle on the span a stored traceparent names, to hang spans under with
    /// [`Parent::Span`]; empty when tracing is off or `tp` is none (or unreadable).
    pub fn remote(tp: Option<&str>) -> Span {
        if TRACER.get().is_none() {
            return Span(None);
        }
        Span(
            tp.and_then(super::traceparent::decode)
                .map(|sc| Context::new().with_remote_span_context(sc)),
        )
    }

    /// Ends the span now and keeps it as a parent for later spans.
    pub fn ended(self) -> Span {
        if let Some(cx) = &self.0 {
            cx.span().end();
        }
        self
    }

    /// Whether this span is being recorded (tracing on).
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// This span as a W3C traceparent (what a run stores), None when empty.
    pub fn traceparent(&self) -> Option<String> {
        let cx = self.0.as_ref()?;
        Some(super::traceparent::encode(cx.span().span_context()))
    }

    /// Adds the attributes `attrs` gives (called only when tracing is on).
    pub fn set(&self, attrs: impl FnOnce() -> Vec<KeyValue>) {
        if let Some(cx) = &self.0 {
            cx.span().set_attributes(attrs());
        }
    }

    /// Marks the span as failed with `why` (called only when tracing is on).
    pub fn fail(&self, why: impl FnOnce() -> String) {
        if let Some(cx) = &self.0 {
            cx.span().set_status(Status::error(why()));
        }
    }

    /// Ends the span now.
    pub fn end(self) {
        if let Some(cx) = &self.0 {
            cx.span().end();
        }
    }
}

/// Runs `fut` with `span` as the current context, so spans started inside it under
/// [`Parent::Current`] (steps, waits, background runs a tool enqueues) are its children.
pub async fn within<F: Future>(span: &Span, fut: F) -> F::Output {
    match &span.0 {
        Some(cx) => fut.with_context(cx.clone()).await,
        None => fut.await,
    }
}
