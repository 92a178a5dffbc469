//! The session page: one self-contained HTML file (inline CSS, no script, no network) made
//! from the log alone — the conversation, each batch's timeline (one lane per call: policy,
//! approval wait, queue, run, commit wait), every call as its card, and each background
//! shell's life across the calls that touched it.

use std::collections::HashMap;

use serde_json::Value;
use toolrail_session_log::{CallRecord, Event, EventData, call_records};

use crate::registry::Presenters;
use crate::render::html::{escape, render_html};
use crate::shell_lives::{ShellLife, shell_lives};
use crate::timeline::{BatchTimeline, Summary, duration};
use crate::walk::{SessionItem, session_items};

/// The page for a session's events.
pub fn session_page(title: &str, events: &[Event], presenters: &Presenters) -> String {
    let records = call_records(events);
    let summary = Summary::of(&records);
    let mut out = String::new();
    out.push_str(&format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(title),
        escape(title)
    ));
    out.push_str(&facts_html(events));
    out.push_str(&summary_html(&summary));
    out.push_str(&usage_html(events));
    out.push_str(&shells_html(&shell_lives(events)));
    // Anchors already given, page-wide: an id a later answer reused gets one of its own.
    let mut anchors: HashMap<String, usize> = HashMap::new();
    for item in session_items(events, &records) {
        match item {
            SessionItem::User(text) => out.push_str(&format!(
                "<div class=\"msg user\"><span class=\"who\">user</span>{}</div>\n",
                paragraphs(&text)
            )),
            SessionItem::Assistant(text) => out.push_str(&format!(
                "<div class=\"msg assistant\"><span class=\"who\">assistant</span>{}</div>\n",
                paragraphs(&text)
            )),
            SessionItem::Thinking(text) => out.push_str(&format!(
                "<details class=\"msg thinking\"><summary>thinking</summary>{}</details>\n",
                paragraphs(&text)
            )),
            SessionItem::Batch(calls) => {
                out.push_str(&batch_html(&calls, &records, presenters, &mut anchors));
            }
            SessionItem::Context { source, text } => out.push_str(&format!(
                "<div class=\"msg context\"><span class=\"who\">context from {}</span>{}</div>\n",
                escape(&source),
                paragraphs(&text)
            )),
            SessionItem::Recovery { note, calls } => out.push_str(&format!(
                "<p class=\"note recovery\">recovery: {} ({calls} call{} repaired)</p>\n",
                escape(&note),
                if calls == 1 { "" } else { "s" }
            )),
            SessionItem::TurnEnd { kind, message } => {
                let message = message
                    .map(|message| format!(": {}", escape(&message)))
                    .unwrap_or_default();
                out.push_str(&format!(
                    "<p class=\"note turn-end {}\">turn ended: {}{message}</p>\n",
                    escape(&kind),
                    escape(&kind)
                ));
            }
        }
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// When the session started, and which model it talked to (as its recorded configuration
/// says).
fn facts_html(events: &[Event]) -> String {
    let Some(start) = events.first() else {
        return String::new();
    };
    let EventData::SessionStart(session) = &start.data else {
        return String::new();
    };
    let model = session
        .meta
        .as_ref()
        .and_then(|meta| meta.pointer("/config/model"))
        .filter(|model| !model.is_null());
    let model = match model {
        Some(model) => {
            let field = |name: &str| model.get(name).and_then(Value::as_str).unwrap_or_default();
            let at = match field("base_url") {
                "" => String::new(),
                url => format!(" at {url}"),
            };
            format!("{} ({}{at})", field("model"), field("provider"))
        }
        None => "none configured (scripted, or given in code)".to_owned(),
    };
    format!(
        "<dl class=\"facts\"><dt>session</dt><dd class=\"session-id\">{}</dd><dt>started</dt><dd class=\"started\">{}</dd><dt>model</dt><dd class=\"model\">{}</dd></dl>\n",
        escape(session.session_id.as_str()),
        escape(&start.ts.to_string()),
        escape(&model)
    )
}

/// The tokens one model request read and wrote, from the usage its server reported
/// (OpenAI's `prompt_tokens`/`completion_tokens`, Anthropic's `input_tokens`/`output_tokens`).
pub fn tokens(usage: &Value) -> (Option<u64>, Option<u64>) {
    let count = |names: [&str; 2]| {
        names
            .iter()
            .find_map(|name| usage.get(*name).and_then(Value::as_u64))
    };
    (
        count(["prompt_tokens", "input_tokens"]),
        count(["completion_tokens", "output_tokens"]),
    )
}

/// The tokens each model request used, as the server reported them, and their sum.
fn usage_html(events: &[Event]) -> String {
    let mut rows = String::new();
    let (mut input, mut output, mut steps) = (0, 0, 0);
    for event in events {
        let EventData::StepEnd(step) = &event.data else {
            continue;
        };
        let Some(usage) = &step.usage else {
            continue;
        };
        let (tokens_in, tokens_out) = tokens(usage);
        input += tokens_in.unwrap_or(0);
        output += tokens_out.unwrap_or(0);
        steps += 1;
        let shown = |tokens: Option<u64>| {
            tokens.map_or_else(|| "?".to_owned(), |tokens| tokens.to_string())
        };
        rows.push_str(&format!(
            "<tr class=\"step\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            event.turn.map_or(0, |turn| turn.0),
            event.step.map_or(0, |step| step.0),
            shown(tokens_in),
            shown(tokens_out)
        ));
    }
    if steps == 0 {
        return String::new();
    }
    format!(
        "<details class=\"usage\"><summary>tokens: {input} in · {output} out over {steps} model request{}</summary><table class=\"usage\"><tr><th>turn</th><th>step</th><th>in</th><th>out</th></tr>{rows}</table></details>\n",
        if steps == 1 { "" } else { "s" }
    )
}

/// The "background shells" section: each shell's heading (id, command, how it stands at
/// the end of the log), then its start, each call that touched it and its end. Nothing
/// when the session started no shell.
fn shells_html(lives: &[ShellLife]) -> String {
    if lives.is_empty() {
        return String::new();
    }
    let mut out = "<section class=\"shells\">\n<h2>background shells</h2>\n".to_owned();
    for life in lives {
        let fate = life.fate().as_str();
        out.push_str(&format!(
            "<div class=\"shell\" data-shell=\"{}\">\n<p class=\"shell-head\"><span class=\"id\">{}</span> · <code>{}</code> <span class=\"shell-state {fate}\">{}</span></p>\n<ol class=\"shell-life\">\n",
            escape(&life.id),
            escape(&life.id),
            escape(&life.command_words()),
            escape(&life.fate_words())
        ));
        if let Some(start) = life.start_words() {
            out.push_str(&format!("<li class=\"started\">{}</li>\n", escape(&start)));
        }
        for touch in &life.touches {
            out.push_str(&format!(
                "<li class=\"touched {}\" data-call-id=\"{}\">{}</li>\n",
                touch.state.as_str(),
                escape(&touch.call.call_id),
                escape(&touch.words())
            ));
        }
        out.push_str(&format!(
            "<li class=\"ended {fate}\">{}</li>\n</ol>\n</div>\n",
            escape(&life.end_words())
        ));
    }
    out.push_str("</section>\n");
    out
}

fn summary_html(summary: &Summary) -> String {
    format!("<p class=\"summary\">{}</p>\n", escape(&summary.line()))
}

fn paragraphs(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| format!("<p>{}</p>", escape(paragraph)))
        .collect()
}

/// A batch: its timeline, then its cards in model order.
fn batch_html(
    records: &[&CallRecord],
    session: &[CallRecord],
    presenters: &Presenters,
    anchors: &mut HashMap<String, usize>,
) -> String {
    let timeline = BatchTimeline::of(records);
    let span = timeline.span_us.max(1) as f64;
    let mut out = format!(
        "<section class=\"batch\">\n<div class=\"timeline\" data-span-us=\"{}\"><p class=\"span\">batch: {}</p>\n",
        timeline.span_us,
        duration(timeline.span_us)
    );
    for lane in &timeline.lanes {
        let failed = if lane.error.is_some() { " failed" } else { "" };
        out.push_str(&format!(
            "<div class=\"lane{failed}\" data-call-id=\"{}\"><span class=\"label\">{} {}</span><div class=\"track\">",
            escape(&lane.call_id),
            escape(&lane.call_id),
            escape(&lane.tool)
        ));
        for segment in &lane.segments {
            let left = segment.start_us as f64 / span * 100.0;
            let width = (segment.length_us as f64 / span * 100.0).max(0.4);
            out.push_str(&format!(
                "<span class=\"seg {}\" style=\"left:{left:.2}%;width:{width:.2}%\" title=\"{} {}\"></span>",
                segment.phase.as_str(),
                segment.phase.as_str(),
                duration(segment.length_us)
            ));
        }
        out.push_str("</div></div>\n");
    }
    out.push_str("<p class=\"legend\"><span class=\"seg policy\"></span>policy <span class=\"seg approval\"></span>approval <span class=\"seg queued\"></span>queued <span class=\"seg run\"></span>run <span class=\"seg commit\"></span>commit wait</p>\n</div>\n");
    for record in records {
        // `call-c1`, then `call-c1~2` for a reused id.
        let seen = anchors.entry(record.call_id.to_string()).or_insert(0);
        *seen += 1;
        let anchor = match *seen {
            1 => record.call_id.to_string(),
            n => format!("{}~{n}", record.call_id.as_str()),
        };
        out.push_str(&format!(
            "<div class=\"call\" id=\"call-{}\" data-call-id=\"{}\">",
            escape(&anchor),
            escape(record.call_id.as_str())
        ));
        out.push_str(&render_html(&presenters.record_in(record, session)));
        out.push_str("</div>\n");
    }
    out.push_str("</section>\n");
    out
}

const STYLE: &str = r#"
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 980px; color: #1d2327; background: #fafafa; }
h1 { font-size: 1.3rem; }
pre { background: #f0f2f4; padding: .5rem .7rem; overflow-x: auto; margin: .3rem 0; font: 12px/1.4 ui-monospace, monospace; }
.summary { background: #eef3fb; padding: .5rem .8rem; border-radius: 6px; }
.msg { margin: .8rem 0; padding: .4rem .8rem; border-left: 3px solid #bbb; }
.msg.user { border-color: #4a7bd0; } .msg.assistant { border-color: #6a9f58; } .msg.context { border-color: #c9a227; }
.who { font-size: .75rem; text-transform: uppercase; color: #777; display: block; }
.batch { margin: .6rem 0 1.4rem 1rem; }
.timeline { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .5rem .8rem; margin-bottom: .6rem; }
.timeline .span { margin: 0 0 .3rem; color: #555; font-size: .8rem; }
.lane { display: flex; align-items: center; height: 20px; }
.lane .label { width: 150px; font: 12px ui-monospace, monospace; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.lane.failed .label { color: #b3261e; }
.track { position: relative; flex: 1; height: 12px; background: #f3f3f3; }
.track .seg { position: absolute; top: 0; height: 12px; }
.seg { display: inline-block; min-width: 2px; }
.legend .seg { width: 12px; height: 10px; margin: 0 .2rem 0 .6rem; }
.legend { font-size: .75rem; color: #666; margin: .3rem 0 0; }
.seg.policy { background: #9e9e9e; } .seg.approval { background: #e0a100; } .seg.queued { background: #90caf9; }
.seg.run { background: #2e7d32; } .seg.commit { background: #ce93d8; }
.card { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .5rem .8rem; margin: .4rem 0; }
.card header { font-weight: 600; }
.card .mark::before { content: "·"; margin-right: .4rem; color: #999; }
.card.status-succeeded .mark::before { content: "✓"; color: #2e7d32; }
.card.status-failed { border-color: #e6a19b; }
.card.status-failed .mark::before { content: "✗"; color: #b3261e; }
.card .code { margin-left: .6rem; font: 12px ui-monospace, monospace; color: #b3261e; }
.card .synthetic { font-weight: normal; font-size: .75rem; color: #777; margin-left: .4rem; }
.card .error { color: #b3261e; margin: .2rem 0; }
.card .description { color: #666; margin: .2rem 0; }
.exit.ok { color: #2e7d32; } .exit.bad { color: #b3261e; } .cut { color: #8d6e00; } .quiet { color: #777; }
.card header .shell-state { margin-left: .6rem; font-weight: normal; font-size: .85rem; }
.shells { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .5rem .8rem; margin: .6rem 0; }
.shells h2 { font-size: 1rem; margin: 0 0 .3rem; }
.shell-head { margin: .4rem 0 .1rem; } .shell-head .id { font-weight: 600; font-family: ui-monospace, monospace; }
.shell-head .shell-state { font-size: .85rem; color: #b3261e; } .shell-head .shell-state.running { color: #8d6e00; } .shell-head .shell-state.exited { color: #555; }
.shell-life { margin: 0; font: 12px/1.5 ui-monospace, monospace; color: #444; }
.diff .add, .file .add { color: #2e7d32; } .diff .del, .file .del { color: #b3261e; } .diff .hunk { color: #00838f; }
.file { margin: .3rem 0 0; font-family: ui-monospace, monospace; }
.matches .hit { font-weight: 600; } .matches .ctx { color: #777; }
.todo li.completed { text-decoration: line-through; color: #777; } .todo li.in_progress { font-weight: 600; }
.effects { color: #8d6e00; margin: .3rem 0; }
.children { margin: .4rem 0 .2rem 1.2rem; padding-left: .6rem; border-left: 2px solid #d0d7de; }
.children > .card { margin: .4rem 0; }
.note { color: #555; font-style: italic; }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: .1rem .8rem; font-size: .85rem; color: #444; }
.facts dt { font-weight: 600; } .facts dd { margin: 0; font-family: ui-monospace, monospace; }
details.usage { margin: .4rem 0; font-size: .85rem; } table.usage td, table.usage th { padding: 0 .6rem; text-align: right; }
"#;
