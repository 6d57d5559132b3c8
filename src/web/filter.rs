//! The filter of `/runs`, as its query string and the bulk form carry it: read into a
//! [`RunFilter`], written back as a query string (links that keep it) and as hidden fields.

use chrono::{DateTime, Utc};
use maud::{Markup, html};
use serde::{Deserialize, Serialize};

use super::view::encode;
use crate::error::{InputError, Result};
use crate::ids::BatchId;
use crate::run::{RunFilter, RunState};

/// The filter fields of `/runs` (query string, and the bulk form's fields).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct Filter {
    /// One state.
    #[serde(default)]
    pub state: String,
    /// One tool.
    #[serde(default)]
    pub tool: String,
    /// One session.
    #[serde(default)]
    pub session: String,
    /// One schedule.
    #[serde(default)]
    pub schedule: String,
    /// Created within this long (e.g. `2h`).
    #[serde(default)]
    pub newer_than: String,
    /// Created longer ago than this.
    #[serde(default)]
    pub older_than: String,
    /// One batch (`bt_…`).
    #[serde(default)]
    pub batch: String,
    /// Tags, `key=value`, comma-separated (all must match).
    #[serde(default)]
    pub tag: String,
}

impl Filter {
    /// The library's filter at `now` (ages become instants); an error names the bad field.
    pub fn to_run_filter(&self, now: DateTime<Utc>) -> Result<RunFilter> {
        let opt = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
        let ago = |field: &str, s: &str| -> Result<Option<DateTime<Utc>>> {
            match opt(s) {
                None => Ok(None),
                Some(s) => {
                    let d = crate::clock::parse_duration(&s)
                        .map_err(|r| InputError::new(field, &s, r))?;
                    let t = chrono::Duration::from_std(d)
                        .ok()
                        .and_then(|d| now.checked_sub_signed(d))
                        .ok_or_else(|| InputError::new(field, &s, "is too long"))?;
                    Ok(Some(t))
                }
            }
        };
        let states = match opt(&self.state) {
            None => Vec::new(),
            Some(s) => vec![s.parse::<RunState>().map_err(|_| {
                InputError::new("state", &s, "is not a run state (queued, awaiting_approval, running, completed, failed, cancelled)")
            })?],
        };
        let batch_id = match opt(&self.batch) {
            None => None,
            Some(b) => Some(b.parse::<BatchId>()?.to_string()),
        };
        Ok(RunFilter {
            states,
            tool: opt(&self.tool),
            session: opt(&self.session),
            schedule_id: opt(&self.schedule),
            created_after: ago("newer_than", &self.newer_than)?,
            created_before: ago("older_than", &self.older_than)?,
            batch_id,
            parent_run_id: None,
            tags: crate::run::Tags::parse_all(
                self.tag.split(',').map(str::trim).filter(|t| !t.is_empty()),
            )?,
        })
    }

    /// As a query string (for links that keep the filter).
    pub fn query(&self) -> String {
        let pairs = [
            ("state", &self.state),
            ("tool", &self.tool),
            ("session", &self.session),
            ("schedule", &self.schedule),
            ("newer_than", &self.newer_than),
            ("older_than", &self.older_than),
            ("batch", &self.batch),
            ("tag", &self.tag),
        ];
        pairs
            .iter()
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(k, v)| format!("{k}={}", encode(v.trim())))
            .collect::<Vec<_>>()
            .join("&")
    }

    /// As hidden form fields (the bulk forms carry the filter they act on).
    pub fn hidden(&self) -> Markup {
        html! {
            input type="hidden" name="state" value=(self.state);
            input type="hidden" name="tool" value=(self.tool);
            input type="hidden" name="session" value=(self.session);
            input type="hidden" name="schedule" value=(self.schedule);
            input type="hidden" name="newer_than" value=(self.newer_than);
            input type="hidden" name="older_than" value=(self.older_than);
            input type="hidden" name="batch" value=(self.batch);
            input type="hidden" name="tag" value=(self.tag);
        }
    }
}
