//! The OpenAPI 3.1 document of `/api/v1`, built from the route table ([`super::routes`]) and
//! the JSON Schemas of the types the handlers read and answer (schemars, draft 2020-12, which
//! OpenAPI 3.1 uses as is). Served at `/api/v1/openapi.json`, printed by `toolq openapi`, and
//! checked in as `docs/openapi.json` (a test fails when they differ).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use schemars::generate::SchemaSettings;
use schemars::{Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

use super::Problem;
use super::route::{Answer, Route, SchemaFn, schema};
use crate::web::AppState;

/// `GET /openapi.json`.
pub(super) fn route() -> Route {
    Route::get("/openapi.json", "getOpenApi", serve)
        .doc(
            "meta",
            "This document",
            "The OpenAPI 3.1 description of every route, built from the code (also checked in \
             as docs/openapi.json).",
        )
        .ok::<Value>()
}

async fn serve(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(st.api.doc.get_or_init(document).clone())
}

/// The whole document.
pub fn document() -> Value {
    let settings = SchemaSettings::draft2020_12().with(|s| {
        s.definitions_path = "/components/schemas".into();
    });
    let mut g = SchemaGenerator::new(settings);
    let problem = schema::<Problem>(&mut g);
    let mut paths = Map::new();
    for r in super::routes() {
        let item = paths.entry(r.path.to_string()).or_insert_with(|| json!({}));
        item[r.method.as_str().to_ascii_lowercase()] = operation(&r, &mut g);
    }
    let schemas: Map<String, Value> = g.take_definitions(true).into_iter().collect();
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "toolq API",
            "version": "1",
            "description": "The HTTP JSON API of toolq, a durable job queue for tool runs. \
                Resource names and fields are the CLI's `--json` ones. Errors are \
                application/problem+json (RFC 9457). On a loopback address without a \
                configured token no token is needed; otherwise send `Authorization: Bearer \
                TOKEN` (web.token acts, web.read_token only reads).",
            "license": {"name": "MIT OR Apache-2.0"}
        },
        "servers": [{"url": "/api/v1"}],
        "security": [{}, {"bearer": []}],
        "tags": tags(),
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {
                "Problem": {
                    "description": "An error (RFC 9457), naming the field and value when the input was wrong.",
                    "content": {"application/problem+json": {"schema": problem}}
                }
            }
        }
    })
}

fn tags() -> Value {
    json!([
        {"name": "runs", "description": "Enqueue, read, wait for and act on runs."},
        {"name": "output", "description": "A run's log and result."},
        {"name": "batches", "description": "Batches of runs with one completion."},
        {"name": "schedules", "description": "Cron and one-shot schedules."},
        {"name": "inbox", "description": "A session's completion messages, paged or pushed."},
        {"name": "tools", "description": "The registered tools and their argument schemas."},
        {"name": "meta", "description": "This document."}
    ])
}

fn operation(r: &Route, g: &mut SchemaGenerator) -> Value {
    let mut op = json!({
        "operationId": r.id,
        "summary": r.summary,
        "tags": [r.tag],
    });
    if !r.about.is_empty() {
        op["description"] = json!(r.about);
    }
    let mut params: Vec<Value> = r
        .path_params
        .iter()
        .map(|p| {
            json!({"name": p.name, "in": "path", "required": true,
                   "description": p.about, "schema": {"type": "string"}})
        })
        .collect();
    if let Some(q) = r.query {
        params.extend(query_params(q));
    }
    if !params.is_empty() {
        op["parameters"] = json!(params);
    }
    if let Some(b) = r.body {
        op["requestBody"] = json!({
            "required": true,
            "content": {"application/json": {"schema": b(g)}}
        });
    }
    let mut responses = Map::new();
    let (status, ok) = match r.answer {
        Answer::Json(status, s) => (
            status,
            json!({"description": "Success.", "content": {"application/json": {"schema": s(g)}}}),
        ),
        Answer::Events(s) => (
            200,
            json!({
                "description": "A stream of Server-Sent Events; each event's id resumes the \
                    stream (Last-Event-ID) and its data is JSON of this schema.",
                "content": {"text/event-stream": {"itemSchema": s(g)}}
            }),
        ),
        Answer::Bytes(about) => (
            200,
            json!({"description": about,
                   "content": {"text/plain": {"schema": {"type": "string"}}}}),
        ),
    };
    responses.insert(status.to_string(), ok);
    let mut errors = vec![400, 401];
    if r.method != axum::http::Method::GET {
        errors.push(403);
    }
    errors.extend(&r.errors);
    errors.push(500);
    errors.sort_unstable();
    errors.dedup();
    for e in errors {
        responses.insert(
            e.to_string(),
            json!({"$ref": "#/components/responses/Problem"}),
        );
    }
    op["responses"] = Value::Object(responses);
    op
}

/// The fields of a query struct, each as one `in: query` parameter.
fn query_params(q: SchemaFn) -> Vec<Value> {
    // Inlined, so the struct's properties are at hand rather than behind a `$ref`.
    let settings = SchemaSettings::draft2020_12().with(|s| s.inline_subschemas = true);
    let mut g = SchemaGenerator::new(settings);
    let s: Schema = q(&mut g);
    let v = s.to_value();
    let required: Vec<&str> = v["required"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = v["properties"].as_object() else {
        return Vec::new();
    };
    props
        .iter()
        .map(|(name, s)| {
            let mut s = s.clone();
            let about = s
                .as_object_mut()
                .and_then(|o| o.remove("description"))
                .unwrap_or(Value::Null);
            let mut p = json!({"name": name, "in": "query",
                               "required": required.contains(&name.as_str()), "schema": s});
            if !about.is_null() {
                p["description"] = about;
            }
            p
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::document;

    /// docs/openapi.json is what the code describes. After changing a route or a type the
    /// API reads or answers: `cargo run -- openapi > docs/openapi.json`, and review the diff.
    #[test]
    fn the_checked_in_document_is_the_generated_one() {
        let checked_in: serde_json::Value =
            serde_json::from_str(include_str!("../../../docs/openapi.json"))
                .expect("docs/openapi.json is JSON");
        let generated = document();
        assert!(
            checked_in == generated,
            "docs/openapi.json differs from the API the code serves: run \
             `cargo run -- openapi > docs/openapi.json` and review the diff"
        );
    }
}
