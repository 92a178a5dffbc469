//! The session page: one self-contained HTML file (inline CSS, no script, no network) made
//! from the log alone — the conversation, each batch's timeline (one lane per call: policy,
//! approval wait, queue, run, commit wait) and every call as its card.

use std::collections::HashMap;

use toolrail_session_log::{
    AssistantBlock, CallRecord, ContentBlock, Event, EventData, call_records,
};

use crate::registry::Presenters;
use crate::render::html::{escape, render_html};
use crate::timeline::{BatchTimeline, Summary};

/// The page for a session's events.
pub fn session_page(title: &str, events: &[Event], presenters: &Presenters) -> String {
    let records = call_records(events);
    let by_id: HashMap<&str, &CallRecord> = records
        .iter()
        .map(|record| (record.call_id.as_str(), record))
        .collect();
    let summary = Summary::of(&records);
    let mut out = String::new();
    out.push_str(&format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(title),
        escape(title)
    ));
    out.push_str(&summary_html(&summary));
    let mut shown = std::collections::HashSet::new();
    for event in events {
        match &event.data {
            EventData::TurnStart(turn) => {
                out.push_str(&format!(
                    "<div class=\"msg user\"><span class=\"who\">user</span>{}</div>\n",
                    blocks_html(&turn.user)
                ));
            }
            EventData::AssistantMessage(message) => {
                let mut text = String::new();
                let mut calls = Vec::new();
                for block in &message.blocks {
                    match block {
                        AssistantBlock::Text { text: said } => {
                            text.push_str(&format!("<p>{}</p>", escape(said)));
                        }
                        AssistantBlock::Thinking { text: thought } => {
                            text.push_str(&format!(
                                "<details class=\"thinking\"><summary>thinking</summary><p>{}</p></details>",
                                escape(thought)
                            ));
                        }
                        AssistantBlock::ToolCall { call_id, .. } => {
                            if let Some(record) = by_id.get(call_id.as_str()) {
                                calls.push(*record);
                            }
                        }
                    }
                }
                out.push_str(&format!(
                    "<div class=\"msg assistant\"><span class=\"who\">assistant</span>{text}</div>\n"
                ));
                if !calls.is_empty() {
                    shown.extend(calls.iter().map(|record| record.call_id.as_str()));
                    out.push_str(&batch_html(&calls, presenters));
                }
            }
            EventData::ContextMessage(message) => {
                out.push_str(&format!(
                    "<div class=\"msg context\"><span class=\"who\">context from {}</span>{}</div>\n",
                    escape(&message.source),
                    blocks_html(&message.content)
                ));
            }
            EventData::RecoveryRepaired(repaired) => {
                out.push_str(&format!(
                    "<p class=\"note recovery\">recovery: {} ({} calls repaired)</p>\n",
                    escape(&repaired.note),
                    repaired.calls.len()
                ));
            }
            EventData::TurnEnd(end) => {
                let kind = serde_json::to_value(end.kind)
                    .ok()
                    .and_then(|kind| kind.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let message = end
                    .message
                    .as_deref()
                    .map(|message| format!(": {}", escape(message)))
                    .unwrap_or_default();
                out.push_str(&format!(
                    "<p class=\"note turn-end {}\">turn ended: {}{message}</p>\n",
                    escape(&kind),
                    escape(&kind)
                ));
            }
            // Shown through the call records, or not shown at all.
            EventData::SessionStart(_)
            | EventData::StepStart(_)
            | EventData::ToolCall(_)
            | EventData::ArgsRewritten(_)
            | EventData::ApprovalAsked(_)
            | EventData::ApprovalDecided(_)
            | EventData::ToolStart(_)
            | EventData::CodeDispatchStart(_)
            | EventData::CodeDispatch(_)
            | EventData::ToolResult(_)
            | EventData::TodoWrite(_)
            | EventData::QuestionAsked(_)
            | EventData::QuestionAnswered(_)
            | EventData::FsObserved(_)
            | EventData::FsWriteIntent(_)
            | EventData::PlanMode(_)
            | EventData::ToolsLoaded(_)
            | EventData::StepEnd(_)
            | EventData::Unknown(_) => {}
        }
    }
    // Calls no assistant message named (run outside the agent loop) still get their cards.
    let rest: Vec<&CallRecord> = records
        .iter()
        .filter(|record| !shown.contains(record.call_id.as_str()))
        .collect();
    if !rest.is_empty() {
        out.push_str(&batch_html(&rest, presenters));
    }
    out.push_str("</body>\n</html>\n");
    out
}

fn summary_html(summary: &Summary) -> String {
    let errors: Vec<String> = summary
        .errors
        .iter()
        .map(|(code, count)| format!("{} × {count}", escape(code)))
        .collect();
    format!(
        "<p class=\"summary\">{} calls in {} batches · {} parallel groups · {} saved against one by one · errors: {}</p>\n",
        summary.calls,
        summary.batches,
        summary.parallel_groups,
        duration(summary.saved_us),
        if errors.is_empty() {
            "none".to_owned()
        } else {
            errors.join(", ")
        }
    )
}

fn blocks_html(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(ContentBlock::as_text)
        .map(|text| format!("<p>{}</p>", escape(text)))
        .collect()
}

/// A batch: its timeline, then its cards in model order.
fn batch_html(records: &[&CallRecord], presenters: &Presenters) -> String {
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
        out.push_str(&format!(
            "<div class=\"call\" id=\"call-{}\" data-call-id=\"{}\">",
            escape(record.call_id.as_str()),
            escape(record.call_id.as_str())
        ));
        out.push_str(&render_html(&presenters.record(record)));
        out.push_str("</div>\n");
    }
    out.push_str("</section>\n");
    out
}

/// `850 µs`, `12.3 ms`, `4.20 s`.
pub fn duration(us: u64) -> String {
    match us {
        0..1_000 => format!("{us} µs"),
        1_000..1_000_000 => format!("{:.1} ms", us as f64 / 1_000.0),
        _ => format!("{:.2} s", us as f64 / 1_000_000.0),
    }
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
.exit.ok { color: #2e7d32; } .exit.bad { color: #b3261e; } .cut { color: #8d6e00; }
.diff .add, .file .add { color: #2e7d32; } .diff .del, .file .del { color: #b3261e; } .diff .hunk { color: #00838f; }
.file { margin: .3rem 0 0; font-family: ui-monospace, monospace; }
.matches .hit { font-weight: 600; } .matches .ctx { color: #777; }
.todo li.completed { text-decoration: line-through; color: #777; } .todo li.in_progress { font-weight: 600; }
.effects { color: #8d6e00; margin: .3rem 0; }
.note { color: #555; font-style: italic; }
"#;
