//! What an enqueue is asked ([`EnqueueRequest`], with its defaults and builders) and what it
//! answers ([`Enqueued`], with its JSON form). Validation and the insert are in `enqueue`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::{Delivery, Tags, Unique};
use crate::ids::{BatchId, RunId};

/// A request to run a tool once.
#[derive(Debug, Clone)]
pub struct EnqueueRequest {
    /// Tool name.
    pub tool: String,
    /// Arguments (must match the tool's schema).
    pub args: Value,
    /// Owning session (default "default").
    pub session: String,
    /// Title (default: the tool's display name).
    pub title: Option<String>,
    /// Higher runs first (default 0).
    pub priority: i64,
    /// Not before this instant (default: now).
    pub run_at: Option<DateTime<Utc>>,
    /// Attempts in all (default from config).
    pub max_attempts: Option<i64>,
    /// Timeout (default: the tool's, else config).
    pub timeout: Option<Duration>,
    /// Same key, same run: a second enqueue returns the first run.
    pub idempotency_key: Option<String>,
    /// Post an inbox message when it ends (default true).
    pub signal_on_completion: bool,
    /// Delivery mode of that message.
    pub delivery: Delivery,
    /// Return a run of the same tool and args (in the given states and period) instead of
    /// inserting another; see [`Unique`].
    pub unique: Option<Unique>,
    /// Runs it waits for (`--after`): it is blocked until they complete (see `after_any`).
    pub after: Vec<RunId>,
    /// Earlier requests of the same [`crate::Client::enqueue_batch`] or
    /// [`crate::Client::create_batch`] call that it waits for, by 0-based index (an enqueue
    /// file's `"after": ["ref"]`). Cycles are refused.
    pub after_requests: Vec<usize>,
    /// `--after-any`: run once each parent is final, whatever its outcome (default: each must
    /// complete, and a failed or cancelled parent cancels this run).
    pub after_any: bool,
    /// Join this existing batch (it must not have completed).
    pub batch: Option<BatchId>,
    /// The run that spawns it (`ctx.spawn_child`; spawn_background inside a run).
    pub parent: Option<RunId>,
    /// Its tags (`--tag k=v`, a file's or the API's `"tags"`); checked at enqueue. Spawned
    /// children and batch callbacks do not inherit their parent's tags.
    pub tags: Tags,
    /// The W3C trace context of the caller's span (`traceparent`), stored with the run so the
    /// worker's spans continue that trace; `None`: none.
    pub traceparent: Option<String>,
}

impl EnqueueRequest {
    /// A request with defaults for everything but tool and args.
    pub fn new(tool: impl Into<String>, args: Value) -> Self {
        Self {
            tool: tool.into(),
            args,
            session: "default".into(),
            title: None,
            priority: 0,
            run_at: None,
            max_attempts: None,
            timeout: None,
            idempotency_key: None,
            signal_on_completion: true,
            delivery: Delivery::WhenIdle,
            unique: None,
            after: Vec::new(),
            after_requests: Vec::new(),
            after_any: false,
            batch: None,
            parent: None,
            tags: Tags::new(),
            traceparent: None,
        }
    }

    /// Sets its tags.
    pub fn tags(mut self, tags: Tags) -> Self {
        self.tags = tags;
        self
    }

    /// Waits for these runs to complete before it runs (`--after`).
    pub fn after(mut self, parents: impl IntoIterator<Item = RunId>) -> Self {
        self.after.extend(parents);
        self
    }

    /// Runs once its parents are final, whatever their outcome (`--after-any`).
    pub fn after_any(mut self, any: bool) -> Self {
        self.after_any = any;
        self
    }

    /// Sets the session.
    pub fn session(mut self, s: impl Into<String>) -> Self {
        self.session = s.into();
        self
    }

    /// Sets the title.
    pub fn title(mut self, t: impl Into<String>) -> Self {
        self.title = Some(t.into());
        self
    }

    /// Makes the run unique (see [`Unique`]).
    pub fn unique(mut self, u: Unique) -> Self {
        self.unique = Some(u);
        self
    }
}

/// The answer to an enqueue. As JSON: `{"id", "run_id", "created"}` (`id` like every other
/// run in toolq's JSON; `run_id` kept for scripts written against the first release).
#[derive(Debug, Clone)]
pub struct Enqueued {
    /// The run id.
    pub run_id: RunId,
    /// False when the idempotency key returned an existing run.
    pub created: bool,
}

impl schemars::JsonSchema for Enqueued {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Enqueued".into()
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let id = g.subschema_for::<RunId>();
        schemars::json_schema!({
            "type": "object",
            "description": "One enqueued run: its id (twice, as `id` and `run_id`) and whether it is new.",
            "properties": {
                "id": id,
                "run_id": id,
                "created": {"type": "boolean", "description": "False when an idempotency key or a unique run returned an existing run."},
            },
            "required": ["id", "run_id", "created"],
        })
    }
}

impl Serialize for Enqueued {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Enqueued", 3)?;
        st.serialize_field("id", &self.run_id)?;
        st.serialize_field("run_id", &self.run_id)?;
        st.serialize_field("created", &self.created)?;
        st.end()
    }
}
