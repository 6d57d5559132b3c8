//! `toolq schedule add|list|show|cancel|disable|enable|preview`: cron monitors and one-shots.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::input::{as_typed, filter};
use super::{Ctx, render};
use crate::config::parse_duration;
use crate::error::{InputError, Result};
use crate::ids::ScheduleId;
use crate::run::Delivery;
use crate::schedule::{Schedule, ScheduleDetail, ScheduleRequest, Zone, parse_timezone};

/// Flags of `schedule`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: Sub,
}

/// The `schedule` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Sub {
    /// Create a schedule: a cron monitor (--cron, --tz) or a one-shot (--at).
    Add(Box<AddArgs>),
    /// List schedules, newest first.
    #[command(
        after_help = "Examples:\n  toolq schedule list --session ops\n  toolq --json schedule list"
    )]
    List(ListArgs),
    /// Show one schedule with its next 5 fires and recent occurrences.
    #[command(after_help = "Examples:\n  toolq schedule show sch_0193...")]
    Show(IdArgs),
    /// Cancel a schedule: no more ticks fire.
    #[command(after_help = "Examples:\n  toolq schedule cancel sch_0193...")]
    Cancel(IdArgs),
    /// Disable a schedule: no more ticks fire until it is enabled again (not marked cancelled).
    #[command(after_help = "Examples:\n  toolq schedule disable sch_0193...")]
    Disable(IdArgs),
    /// Enable a cancelled or disabled schedule from now on.
    #[command(after_help = "Examples:\n  toolq schedule enable sch_0193...")]
    Enable(IdArgs),
    /// Print the next fire instants of a cron expression, in UTC and local time.
    #[command(
        after_help = "Examples:\n  toolq schedule preview --cron '30 1 * * *' --tz America/Chicago --count 5"
    )]
    Preview(PreviewArgs),
}

/// Flags of `schedule add`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("when").required(true).args(["cron", "at"])))]
#[command(after_help = "Examples:
  toolq schedule add echo --args '{\"message\":\"tick\"}' --cron '*/15 * * * *' --tz Europe/Berlin
  toolq schedule add echo --at 2026-12-01T09:00:00-06:00 --priority 5 --timeout 2m")]
pub struct AddArgs {
    /// The tool each tick runs (see `toolq tools`).
    pub tool: String,
    /// The tool's arguments as a JSON object.
    #[arg(long, default_value = "{}", value_name = "JSON")]
    pub args: String,
    /// A 5-field cron expression (minute hour day-of-month month day-of-week) or @hourly, @daily, ...
    #[arg(long, value_name = "EXPR", conflicts_with = "at")]
    pub cron: Option<String>,
    /// The IANA time zone the cron is evaluated in [default: UTC].
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
    /// A one-shot instant, RFC 3339 with an offset (e.g. 2026-12-01T09:00:00-06:00).
    #[arg(long, value_name = "RFC3339")]
    pub at: Option<String>,
    /// The owning session (its inbox gets the completion messages).
    #[arg(long, default_value = "default")]
    pub session: String,
    /// A title for people [default: the tool's display name].
    #[arg(long)]
    pub title: Option<String>,
    /// After downtime: skip missed ticks, run once for all of them, or run all within the window.
    #[arg(long, default_value = "once", value_name = "skip|once|all")]
    pub missed: String,
    /// A tick while the previous run is still active: skip it, or allow another run.
    #[arg(long, default_value = "skip", value_name = "skip|allow")]
    pub overlap: String,
    /// How old the latest missed tick may be to be caught up (e.g. 30m) [default: one period].
    #[arg(long, value_name = "DURATION")]
    pub catchup_window: Option<String>,
    /// Priority of each run it starts (higher runs first).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i64,
    /// Attempts in all of each run it starts [default: runs.max_attempts from the config].
    #[arg(long)]
    pub max_attempts: Option<i64>,
    /// Timeout of each run it starts (e.g. 30s, 5m) [default: the tool's, else the config's].
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// Do not post an inbox message when a run it starts ends.
    #[arg(long)]
    pub no_signal: bool,
    /// How those completion messages are delivered: interrupt, when_idle, silent.
    #[arg(long, default_value = "when_idle")]
    pub delivery: String,
    /// Tag every run it fires (repeatable): `--tag customer=acme` (the rules of
    /// `enqueue --tag`).
    #[arg(long, value_name = "KEY=VALUE")]
    pub tag: Vec<String>,
}

/// Flags of `schedule list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only this session's schedules.
    #[arg(long)]
    pub session: Option<String>,
}

/// A schedule id argument.
#[derive(Debug, clap::Args)]
pub struct IdArgs {
    /// The schedule id (sch_...).
    pub id: String,
}

/// Flags of `schedule preview`.
#[derive(Debug, clap::Args)]
pub struct PreviewArgs {
    /// A 5-field cron expression or @macro.
    #[arg(long, value_name = "EXPR")]
    pub cron: String,
    /// The IANA time zone [default: UTC].
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
    /// Fires strictly after this RFC 3339 instant [default: now].
    #[arg(long, value_name = "RFC3339")]
    pub from: Option<String>,
    /// How many fires to print (1-1000).
    #[arg(long, default_value_t = 10)]
    pub count: usize,
}

/// Runs the subcommand.
pub async fn run(ctx: &Ctx, args: Args) -> Result<()> {
    match args.command {
        Sub::Add(a) => add(ctx, *a).await,
        Sub::List(a) => {
            let session = filter("--session", a.session.clone())?;
            let list = ctx.client.list_schedules(session.as_deref()).await?;
            if ctx.json {
                render::json(&list);
            } else {
                table(&list);
            }
            Ok(())
        }
        Sub::Show(a) => show(ctx, &a.id).await,
        Sub::Cancel(a) => {
            let s = ctx.client.cancel_schedule(&a.id.parse()?).await?;
            done(ctx, &s, "cancelled");
            Ok(())
        }
        Sub::Disable(a) => {
            let s = ctx.client.disable_schedule(&a.id.parse()?).await?;
            done(ctx, &s, "disabled");
            Ok(())
        }
        Sub::Enable(a) => {
            let s = ctx.client.enable_schedule(&a.id.parse()?).await?;
            done(ctx, &s, "enabled");
            Ok(())
        }
        Sub::Preview(a) => preview(ctx.json, a),
    }
}

async fn add(ctx: &Ctx, a: AddArgs) -> Result<()> {
    let args: Value = serde_json::from_str(&a.args)
        .map_err(|e| InputError::new("--args", &a.args, format!("is not valid JSON ({e})")))?;
    let mut req = ScheduleRequest::new(a.tool, args, a.cron, a.at);
    req.timezone = a.tz;
    req.session = a.session;
    req.title = a.title;
    req.missed = a.missed.parse().map_err(|e: InputError| e.within("--"))?;
    req.overlap = a.overlap.parse().map_err(|e: InputError| e.within("--"))?;
    req.catchup_window = match &a.catchup_window {
        Some(w) => Some(parse_duration(w).map_err(|r| InputError::new("--catchup-window", w, r))?),
        None => None,
    };
    req.priority = a.priority;
    req.max_attempts = a.max_attempts;
    req.timeout = match &a.timeout {
        Some(t) => Some(parse_duration(t).map_err(|r| InputError::new("--timeout", t, r))?),
        None => None,
    };
    req.signal_on_completion = !a.no_signal;
    req.tags = crate::run::Tags::parse_all(&a.tag)?;
    req.delivery = a.delivery.parse::<Delivery>().map_err(|e| InputError {
        field: "--delivery".into(),
        ..e
    })?;
    let typed = [
        ("timeout", a.timeout.as_deref()),
        ("catchup_window", a.catchup_window.as_deref()),
    ];
    let s = ctx
        .client
        .create_schedule(req)
        .await
        .map_err(|e| as_typed(e, &typed))?;
    if ctx.json {
        render::json(&s);
    } else {
        // Only the id on stdout, like `enqueue`, so `id=$(toolq schedule add ...)` works.
        render::line(s.id.as_str());
        render::note(&format!("next fire: {}", next_fire(&s)));
    }
    Ok(())
}

fn utc(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn local(t: &DateTime<Utc>, tz: &Zone) -> String {
    format!(
        "{} {}",
        tz.local(*t).format("%Y-%m-%dT%H:%M:%S%:z"),
        tz.abbreviation(*t)
    )
}

fn zone(s: &Schedule) -> Zone {
    parse_timezone(&s.timezone).unwrap_or_else(|_| Zone::utc())
}

fn when(s: &Schedule) -> String {
    match (&s.cron_expression, &s.scheduled_at) {
        (Some(c), _) => c.clone(),
        (None, Some(at)) => format!("at {}", utc(at)),
        (None, None) => "-".into(),
    }
}

fn done(ctx: &Ctx, s: &Schedule, verb: &str) {
    if ctx.json {
        render::json(s);
        return;
    }
    render::line(&format!(
        "{verb} schedule {}; next fire: {}",
        s.id,
        next_fire(s)
    ));
}

fn next_fire(s: &Schedule) -> String {
    s.next_trigger_at.as_ref().map_or("none".into(), |t| {
        format!("{} ({})", utc(t), local(t, &zone(s)))
    })
}

fn table(list: &[Schedule]) {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|s| {
            vec![
                s.id.to_string(),
                if s.enabled { "yes" } else { "no" }.into(),
                s.session_id.clone(),
                s.tool.clone(),
                when(s),
                s.timezone.clone(),
                s.next_trigger_at.as_ref().map_or("-".into(), utc),
                s.trigger_count.to_string(),
                s.title.clone(),
            ]
        })
        .collect();
    render::table(
        &[
            "ID", "ENABLED", "SESSION", "TOOL", "WHEN", "ZONE", "NEXT", "RUNS", "TITLE",
        ],
        &rows,
    );
}

async fn show(ctx: &Ctx, id: &str) -> Result<()> {
    let id: ScheduleId = id.parse()?;
    let d = ctx.client.get_schedule(&id).await?;
    if ctx.json {
        render::json(&d);
        return Ok(());
    }
    show_fields(&d.schedule);
    show_fires(&d, &zone(&d.schedule));
    Ok(())
}

/// Every field of the schedule.
fn show_fields(s: &Schedule) {
    let t = |v: &Option<DateTime<Utc>>| v.as_ref().map_or("-".into(), utc);
    render::fields(&[
        ("id", s.id.to_string()),
        ("enabled", s.enabled.to_string()),
        ("type", s.schedule_type.to_string()),
        ("when", when(s)),
        ("timezone", s.timezone.clone()),
        ("tool", s.tool.clone()),
        ("args", s.args.to_string()),
        ("title", s.title.clone()),
        ("session", s.session_id.clone()),
        ("missed", s.missed_policy.to_string()),
        (
            "catchup_window",
            s.catchup_window_ms
                .map_or("one period".into(), render::millis),
        ),
        ("overlap", s.overlap_policy.to_string()),
        ("priority", s.priority.to_string()),
        ("max_attempts", s.max_attempts.to_string()),
        ("timeout", s.timeout_ms.map_or("-".into(), render::millis)),
        ("delivery", s.delivery.as_str().to_string()),
        ("next_trigger_at", t(&s.next_trigger_at)),
        ("last_triggered_at", t(&s.last_triggered_at)),
        ("trigger_count", s.trigger_count.to_string()),
        ("created_at", utc(&s.created_at)),
        ("cancelled_at", t(&s.cancelled_at)),
    ]);
}

/// The next fires (in UTC and the schedule's zone) and the recent occurrences.
fn show_fires(d: &ScheduleDetail, tz: &Zone) {
    render::line("");
    render::line("next fires:");
    let next: Vec<Vec<String>> = d
        .next_fires
        .iter()
        .map(|f| vec![utc(f), local(f, tz)])
        .collect();
    render::table(&["UTC", "LOCAL"], &next);
    render::line("");
    render::line("recent occurrences:");
    let occ: Vec<Vec<String>> = d
        .occurrences
        .iter()
        .map(|o| {
            vec![
                utc(&o.fire_at),
                o.outcome.clone(),
                render::opt(&o.run_id),
                render::opt(&o.run_state),
                render::opt(&o.detail),
            ]
        })
        .collect();
    render::table(&["FIRE_AT", "OUTCOME", "RUN", "RUN_STATE", "DETAIL"], &occ);
}

/// `schedule preview`: needs no database, so it runs without opening one.
pub fn preview(json: bool, a: PreviewArgs) -> Result<()> {
    let from = match &a.from {
        Some(f) => Some(
            DateTime::parse_from_rfc3339(f.trim())
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| {
                    InputError::new(
                        "--from",
                        f,
                        format!("is not an RFC 3339 instant with an offset ({e})"),
                    )
                })?,
        ),
        None => None,
    };
    let tz = parse_timezone(a.tz.as_deref().unwrap_or("UTC"))?;
    let fires = crate::schedule::api::preview(
        &a.cron,
        a.tz.as_deref(),
        from.unwrap_or_else(Utc::now),
        a.count,
    )?;
    if json {
        let list: Vec<Value> = fires
            .iter()
            .map(|f| json!({"utc": utc(f), "local": local(f, &tz)}))
            .collect();
        render::json(&list);
    } else {
        let rows: Vec<Vec<String>> = fires.iter().map(|f| vec![utc(f), local(f, &tz)]).collect();
        render::table(&["UTC", "LOCAL"], &rows);
    }
    Ok(())
}
