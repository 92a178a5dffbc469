//! `toolrail replay SESSION [--store URL] [--html OUT] [--otlp]`: a session from its log alone — the
//! conversation and every call's card, as they were shown live — and optionally its page
//! and its OpenTelemetry spans, exported after the fact at the recorded times.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Result;
use serde_json::json;
use toolrail_presenters::{Presenters, colour_wanted};
use toolrail_runtime::TelemetryConfig;
use toolrail_runtime::telemetry::{ExportReport, export_recorded};

use crate::bad_input;
use crate::session::{events_of, replay_text, session_title, summary_of, write_page};

#[derive(clap::Args)]
pub(crate) struct ReplayArgs {
    /// The session: the path of its log (`<session>.jsonl`), or its id in a store.
    session: String,
    /// The store the session is in (`jsonl:DIR`, `sqlite:FILE`, `postgres://…`; default:
    /// the current folder's sessions).
    #[arg(long)]
    store: Option<String>,
    /// Write the session page here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Print the cards and summary as JSON.
    #[arg(long)]
    json: bool,
    /// Export the session's spans over OTLP/HTTP, as `run --otlp` would have, at the times
    /// the log recorded and with the span ids it recorded (`OTEL_EXPORTER_OTLP_ENDPOINT`,
    /// `[telemetry]` of the current folder's `toolrail.toml`; arguments and results only
    /// with `capture_content`).
    #[arg(long)]
    otlp: bool,
}

pub(crate) fn run(args: ReplayArgs) -> Result<()> {
    if let Some(out) = &args.html {
        crate::run::writable_target(out)?;
    }
    let events = events_of(&args.session, args.store.as_deref())?;
    let colour = colour_wanted(std::io::stdout().is_terminal());
    let (text, cards) = replay_text(&events, &Presenters::new(), colour);
    let summary = summary_of(&events);
    if let Some(out) = &args.html {
        write_page(out, &session_title(&events), &events)?;
    }
    let exported = if args.otlp {
        let config = telemetry_config()?;
        Some(export_recorded(&config, &events).map_err(|error| bad_input!("{error}"))?)
    } else {
        None
    };
    if args.json {
        let mut report = crate::run::report(&events);
        report["cards"] = json!(cards);
        report["page"] = json!(args.html);
        report["otlp"] = json!(exported.map(|exported| json!({
            "sent": exported.sent, "dropped": exported.dropped, "failed": exported.failed,
        })));
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{text}");
        println!("\n{}", summary.line());
        if let Some(out) = &args.html {
            println!("page: {}", out.display());
        }
        if let Some(exported) = exported {
            println!("{}", otlp_line(exported));
        }
    }
    match exported {
        Some(exported) if exported.dropped > 0 || exported.failed > 0 => Err(anyhow::anyhow!(
            "{}: check the collector at OTEL_EXPORTER_OTLP_ENDPOINT",
            otlp_line(exported)
        )),
        Some(_) | None => Ok(()),
    }
}

/// The export's `[telemetry]`: the current folder's `toolrail.toml`, else the defaults (the
/// `OTEL_*` variables apply either way).
fn telemetry_config() -> Result<TelemetryConfig> {
    let file = crate::flags::config_file(&std::env::current_dir()?, None);
    Ok(crate::flags::read_config(file.as_deref())?.telemetry)
}

fn otlp_line(exported: ExportReport) -> String {
    format!(
        "otlp: {} span{} sent, {} dropped (the queue was full), {} not delivered (refused or not answered)",
        exported.sent,
        if exported.sent == 1 { "" } else { "s" },
        exported.dropped,
        exported.failed
    )
}
