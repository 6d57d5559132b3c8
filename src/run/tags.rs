//! A run's tags: `key=value` labels (`customer=acme`) given at enqueue (or by the schedule that
//! fires it), stored as a JSON object in `runs.tags` and one `run_tags` row per tag, so lists
//! and bulk operations can filter by them through `run_tags_tag_idx`.
//!
//! Rules: a key is 1-64 characters of `[A-Za-z0-9_.:/-]` starting with a letter or digit; a
//! value is 1-256 characters without control characters; at most [`MAX_TAGS`] per run; a key
//! given twice is an error. Keys sort (a `BTreeMap`), so the stored JSON is canonical.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::InputError;

/// Most tags one run (or schedule, or filter) may carry.
pub const MAX_TAGS: usize = 16;
/// Longest key, in characters.
pub const MAX_KEY_CHARS: usize = 64;
/// Longest value, in characters.
pub const MAX_VALUE_CHARS: usize = 256;

/// A run's tags, key to value, sorted by key. Empty: none (stored as NULL, no `run_tags` row).
/// As JSON: an object of text values, `{"customer":"acme"}`.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct Tags(BTreeMap<String, String>);

impl Tags {
    /// No tags.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tags from `key=value` texts (`--tag`, `?tag=`), each checked; a key given twice, or more
    /// than [`MAX_TAGS`], is an error naming the tag.
    pub fn parse_all<S: AsRef<str>>(
        items: impl IntoIterator<Item = S>,
    ) -> Result<Self, InputError> {
        let mut tags = Tags::new();
        for item in items {
            let (key, value) = parse_one(item.as_ref())?;
            tags.insert(key, value)?;
        }
        Ok(tags)
    }

    /// Tags from a key-to-value map (an enqueue file's or the API's `"tags"` object), each
    /// checked against the rules.
    pub fn from_map(map: BTreeMap<String, String>) -> Result<Self, InputError> {
        let tags = Tags(map);
        tags.validate()?;
        Ok(tags)
    }

    /// Adds one tag after checking it; a key already present, or one tag too many, is an
    /// error naming it.
    pub fn insert(
        &mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<(), InputError> {
        let (key, value) = (key.into(), value.into());
        check_key(&key, &value)?;
        check_value(&key, &value)?;
        if self.0.contains_key(&key) {
            return Err(InputError::new(
                "tag",
                format!("{key}={value}"),
                format!("key {key:?} is given twice; a run has one value per key"),
            ));
        }
        if self.0.len() >= MAX_TAGS {
            return Err(InputError::new(
                "tag",
                format!("{key}={value}"),
                format!("too many tags: at most {MAX_TAGS} per run"),
            ));
        }
        self.0.insert(key, value);
        Ok(())
    }

    /// Checks every tag against the rules (for tags built by deserializing, which checks
    /// nothing); the error names the first bad tag.
    pub fn validate(&self) -> Result<(), InputError> {
        for (key, value) in &self.0 {
            check_key(key, value)?;
            check_value(key, value)?;
        }
        if self.0.len() > MAX_TAGS {
            return Err(InputError::new(
                "tags",
                self.to_string(),
                format!(
                    "too many tags ({}): at most {MAX_TAGS} per run",
                    self.0.len()
                ),
            ));
        }
        Ok(())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The value of `key`, if tagged.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Key and value pairs, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether every tag of `wanted` is one of these (a filter's test).
    pub fn contains_all(&self, wanted: &Tags) -> bool {
        wanted.iter().all(|(k, v)| self.get(k) == Some(v))
    }

    /// The `run_tags` rows: one `key=value` text per tag.
    pub fn rows(&self) -> impl Iterator<Item = String> + '_ {
        self.0.iter().map(|(k, v)| format!("{k}={v}"))
    }

    /// The stored form (`runs.tags`, `schedules.tags`): compact JSON with sorted keys, or
    /// `None` when there are no tags (NULL: an untagged run costs no text).
    pub fn to_json(&self) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        serde_json::to_string(&self.0).ok()
    }

    /// Reads the stored form; NULL, or text that is not an object of texts, reads as no tags
    /// (a row is never refused for its tags).
    pub fn from_json(text: Option<&str>) -> Self {
        text.and_then(|t| serde_json::from_str(t).ok())
            .map(Tags)
            .unwrap_or_default()
    }

    /// [`Tags::from_json`] from the bytes of a borrowed column.
    pub fn from_json_bytes(bytes: &[u8]) -> Self {
        serde_json::from_slice(bytes).map(Tags).unwrap_or_default()
    }
}

impl fmt::Display for Tags {
    /// `key=value` texts joined by commas (`customer=acme,env=prod`); empty when none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

impl From<Tags> for BTreeMap<String, String> {
    fn from(t: Tags) -> Self {
        t.0
    }
}

/// Splits one `key=value` text at its first `=` and checks both halves.
pub fn parse_one(item: &str) -> Result<(String, String), InputError> {
    let Some((key, value)) = item.split_once('=') else {
        return Err(InputError::new(
            "tag",
            item,
            "must be key=value (e.g. customer=acme)",
        ));
    };
    check_key(key, value)?;
    check_value(key, value)?;
    Ok((key.to_string(), value.to_string()))
}

fn check_key(key: &str, value: &str) -> Result<(), InputError> {
    let bad = |reason: String| Err(InputError::new("tag", format!("{key}={value}"), reason));
    let n = key.chars().count();
    if n == 0 || n > MAX_KEY_CHARS {
        return bad(format!(
            "the key must be 1-{MAX_KEY_CHARS} characters (it has {n})"
        ));
    }
    if !key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
    {
        return bad("the key must start with a letter or digit".into());
    }
    if let Some(c) = key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '/' | '-')))
    {
        return bad(format!(
            "the key may hold only letters, digits and _ . : / - (found {c:?})"
        ));
    }
    Ok(())
}

fn check_value(key: &str, value: &str) -> Result<(), InputError> {
    let bad = |reason: String| Err(InputError::new("tag", format!("{key}={value}"), reason));
    let n = value.chars().count();
    if n == 0 || n > MAX_VALUE_CHARS {
        return bad(format!(
            "the value must be 1-{MAX_VALUE_CHARS} characters (it has {n})"
        ));
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return bad(format!(
            "the value may not hold control characters (found {c:?})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sorts_and_stores_canonically() {
        let t = Tags::parse_all(["env=prod", "customer=acme", "a/b.c:d_e-f=x=y"]).unwrap();
        assert_eq!(t.get("a/b.c:d_e-f"), Some("x=y"), "split at the first =");
        assert_eq!(
            t.to_json().as_deref(),
            Some(r#"{"a/b.c:d_e-f":"x=y","customer":"acme","env":"prod"}"#)
        );
        assert_eq!(Tags::from_json(t.to_json().as_deref()), t);
        assert_eq!(
            t.rows().collect::<Vec<_>>(),
            ["a/b.c:d_e-f=x=y", "customer=acme", "env=prod"]
        );
        assert_eq!(t.to_string(), "a/b.c:d_e-f=x=y,customer=acme,env=prod");
        assert_eq!(Tags::new().to_json(), None, "no tags: NULL");
        assert!(Tags::from_json(None).is_empty());
        assert!(Tags::from_json(Some("[1]")).is_empty());
    }

    #[test]
    fn each_rule_is_refused_naming_the_tag() {
        let cases = [
            ("novalue", "key=value"),
            ("=v", "1-64"),
            (&format!("{}=v", "k".repeat(65)), "1-64"),
            ("_k=v", "start with a letter or digit"),
            ("k k=v", "only letters"),
            ("k=", "1-256"),
            (&format!("k={}", "v".repeat(257)), "1-256"),
            ("k=a\u{7}b", "control characters"),
        ];
        for (item, rule) in cases {
            let e = Tags::parse_all([item]).unwrap_err();
            assert_eq!(e.field, "tag", "{item}");
            assert!(e.reason.contains(rule), "{item}: {}", e.reason);
        }
        let e = Tags::parse_all(["k=a", "k=b"]).unwrap_err();
        assert!(e.reason.contains("twice"), "{}", e.reason);
        let many: Vec<String> = (0..=MAX_TAGS).map(|i| format!("k{i}=v")).collect();
        let e = Tags::parse_all(&many).unwrap_err();
        assert!(e.reason.contains("at most 16"), "{}", e.reason);
        assert!(Tags::parse_all(&many[..MAX_TAGS]).is_ok());
        let long_ok = format!("{}={}", "k".repeat(64), "é".repeat(256));
        assert!(
            Tags::parse_all([long_ok]).is_ok(),
            "limits count characters"
        );
    }

    #[test]
    fn a_deserialized_map_is_checked_by_validate() {
        let t: Tags = serde_json::from_str(r#"{"ok":"1","bad key":"2"}"#).unwrap();
        let e = t.validate().unwrap_err();
        assert_eq!(e.value, "bad key=2");
        let mut m = BTreeMap::new();
        m.insert("k".to_string(), "v".to_string());
        assert!(Tags::from_map(m).is_ok());
    }
}
