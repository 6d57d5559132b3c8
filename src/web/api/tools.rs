//! `/tools`: the registered tools and their argument schemas (`toolq tools --json`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use super::body::Segments;
use super::route::Route;
use super::{ApiResult, Problem};
use crate::error::InputError;
use crate::tool::ToolDef;
use crate::web::AppState;

pub(super) fn routes() -> Vec<Route> {
    vec![
        Route::get("/tools", "listTools", list)
            .doc(
                "tools",
                "List the tools",
                "Every registered tool, as `toolq tools --json` prints them.",
            )
            .ok::<Vec<ToolDef>>(),
        Route::get("/tools/{name}", "getTool", get)
            .doc(
                "tools",
                "Get one tool",
                "One tool with its hints and the JSON Schema of its arguments.",
            )
            .param("name", "The tool's name")
            .ok::<ToolDef>()
            .errors(&[404]),
    ]
}

async fn list(State(st): State<Arc<AppState>>) -> Json<Vec<ToolDef>> {
    Json(st.client.registry().iter().map(|e| e.def.clone()).collect())
}

async fn get(
    State(st): State<Arc<AppState>>,
    Segments(name): Segments<String>,
) -> ApiResult<Json<ToolDef>> {
    let reg = st.client.registry();
    match reg.get(&name) {
        Some(e) => Ok(Json(e.def.clone())),
        None => {
            let known: Vec<String> = reg.iter().map(|e| e.def.name.clone()).collect();
            let e = InputError::new(
                "tool",
                &name,
                format!("is not registered (known tools: {})", known.join(", ")),
            );
            let mut p = Problem::input(&e);
            p.status = 404;
            p.kind = "urn:toolq:problem:not-found".into();
            p.title = "Not Found".into();
            Err(p.into())
        }
    }
}
