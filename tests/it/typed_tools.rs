//! Typed tool arguments: the schema derived from a Rust type is accepted by the registry's
//! validator (nested types, enums, optional fields), checks arguments at enqueue time, and the
//! tool receives them parsed; hand-written schemas keep working beside it.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use toolq::tool::{TypedTool, typed_def};
use toolq::{
    Client, Config, EnqueueRequest, RegistryBuilder, RunState, ToolContext, ToolDef, ToolOutcome,
};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Unit {
    Celsius,
    Fahrenheit,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Place {
    city: String,
    country: Option<String>,
}

/// Arguments of `forecast`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct ForecastArgs {
    place: Place,
    unit: Unit,
    #[serde(default = "one")]
    days: u8,
}

fn one() -> u8 {
    1
}

struct Forecast;

#[async_trait]
impl TypedTool for Forecast {
    type Args = ForecastArgs;
    fn definition(&self) -> ToolDef {
        typed_def::<ForecastArgs>("forecast", "A made-up forecast.")
    }
    async fn call(&self, args: ForecastArgs, _ctx: ToolContext) -> ToolOutcome {
        let unit = match args.unit {
            Unit::Celsius => "C",
            Unit::Fahrenheit => "F",
        };
        ToolOutcome::ok(json!({
            "city": args.place.city,
            "country": args.place.country,
            "days": args.days,
            "unit": unit,
        }))
    }
}

#[tokio::test]
async fn a_typed_tool_gets_a_derived_schema_and_parsed_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        db_path: dir.path().join("t.db").display().to_string(),
        ..Config::default()
    };
    let registry = RegistryBuilder::new()
        .with_builtins()
        .typed(Forecast)
        .build()
        .unwrap();
    let params = &registry.get("forecast").unwrap().def.parameters;
    assert_eq!(
        params["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert!(params["$defs"]["Place"].is_object(), "{params}");
    let client = Client::open(config, registry).unwrap();

    for bad in [
        json!({"place": {"city": "Oslo"}, "unit": "kelvin"}),
        json!({"place": {}, "unit": "celsius"}),
        json!({"unit": "celsius"}),
        json!({"place": {"city": "Oslo"}, "unit": "celsius", "hours": 3}),
        json!({"place": {"city": "Oslo"}, "unit": "celsius", "days": 300}),
    ] {
        let e = client
            .enqueue(EnqueueRequest::new("forecast", bad.clone()))
            .await
            .unwrap_err();
        assert_eq!(e.exit_code(), 2, "{bad}: {e}");
        assert!(e.to_string().contains("forecast"), "{bad}: {e}");
    }
    let good = client
        .enqueue(EnqueueRequest::new(
            "forecast",
            json!({"place": {"city": "Oslo", "country": "NO"}, "unit": "fahrenheit"}),
        ))
        .await
        .unwrap()
        .run_id;
    let raw = client
        .enqueue(EnqueueRequest::new("echo", json!({"message": "raw path"})))
        .await
        .unwrap()
        .run_id;
    let worker = client.worker(toolq::WorkerOptions { drain: true });
    tokio::time::timeout(Duration::from_secs(60), worker.run(Default::default()))
        .await
        .unwrap()
        .unwrap();
    for id in [&good, &raw] {
        assert_eq!(client.wait(id).await.unwrap().state, RunState::Completed);
    }
    let run = client.get(&good).await.unwrap();
    let blob = client.result(&run).await.unwrap().unwrap();
    let v: Value = serde_json::from_slice(&blob.content).unwrap();
    assert_eq!(
        v["result"],
        json!({"city": "Oslo", "country": "NO", "days": 1, "unit": "F"})
    );
}
