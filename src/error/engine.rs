//! An engine's error kept whole behind one type, so no engine type names the public API.

/// An engine's own error, kept whole (its message and source chain) without naming the
/// engine's types in the public API.
/// The engine classifies it when it wraps it ([`super::Fault`]).
#[derive(Debug)]
pub struct EngineError {
    inner: Box<dyn std::error::Error + Send + Sync + 'static>,
    fault: super::Fault,
}

impl EngineError {
    /// Wraps an engine's error with the engine's verdict on it.
    pub(crate) fn new(
        e: impl std::error::Error + Send + Sync + 'static,
        fault: super::Fault,
    ) -> Self {
        Self {
            inner: Box::new(e),
            fault,
        }
    }

    /// What kind of failure it is.
    pub fn fault(&self) -> super::Fault {
        self.fault
    }

    /// The engine's error as its own type, for the engine itself.
    pub(crate) fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.inner.downcast_ref::<T>()
    }
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner.source()
    }
}
