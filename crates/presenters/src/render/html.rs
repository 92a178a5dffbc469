//! Cards as HTML fragments for the session page: every text escaped, long outputs collapsed
//! into `<details>` (expandable without script). The classes are styled by the page's CSS.

use crate::card::{Card, CardBody, CardStatus, DiffLineKind, FactTone, TerminalFact};

/// Lines shown open; longer texts are collapsed.
const OPEN_LINES: usize = 12;
/// Characters shown open; a longer text (one huge line) is collapsed too.
const OPEN_CHARS: usize = 2_000;

/// The card as an `<article>`.
pub fn render_html(card: &Card) -> String {
    let state = match &card.status {
        CardStatus::Pending => "pending",
        CardStatus::Succeeded => "succeeded",
        CardStatus::Failed { .. } => "failed",
    };
    // A background shell's cards share its id, so a page or a UI can show them as one
    // terminal over time.
    let shell = card
        .body
        .shell()
        .map(|shell| format!(" data-shell=\"{}\"", escape(&shell.id)))
        .unwrap_or_default();
    let mut out = format!(
        "<article class=\"card kind-{} status-{state}\" data-tool=\"{}\"{shell}>\n<header><span class=\"mark\"></span><span class=\"title\">{}</span>",
        card.kind.as_str(),
        escape(&card.tool),
        escape(&card.title)
    );
    if let Some(fact @ TerminalFact::ShellState(state)) = card.body.shell_state() {
        out.push_str(&format!(
            "<span class=\"shell-state {} {}\">{}</span>",
            state.as_str(),
            tone_class(fact.tone()),
            fact.words()
        ));
    }
    if let CardStatus::Failed {
        code,
        message,
        synthetic,
    } = &card.status
    {
        let by = if *synthetic {
            " <span class=\"synthetic\">by the runtime</span>"
        } else {
            ""
        };
        out.push_str(&format!(
            "<span class=\"code\">{}</span>{by}</header>\n<p class=\"error\">{}</p>\n",
            escape(code),
            escape(message)
        ));
    } else {
        out.push_str("</header>\n");
    }
    for note in &card.notes {
        out.push_str(&format!("<p class=\"note policy\">{}</p>\n", escape(note)));
    }
    body(&card.body, &card.children, &mut out);
    if !matches!(card.body, CardBody::CodeRun { .. }) {
        children(&card.children, &mut out);
    }
    if !card.effects.is_empty() {
        out.push_str("<ul class=\"effects\">");
        for effect in &card.effects {
            out.push_str(&format!("<li>{}</li>", escape(effect)));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</article>\n");
    out
}

/// The class a fact's tone is styled by (the page's CSS colours them).
fn tone_class(tone: FactTone) -> &'static str {
    match tone {
        FactTone::Note => "cut",
        FactTone::Bad => "exit bad",
        FactTone::Good => "exit ok",
        FactTone::Quiet => "quiet",
    }
}

/// The char boundary at or before `at`.
fn floor_boundary(text: &str, mut at: usize) -> usize {
    while at > 0 && !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// The char boundary at or after `at`.
fn ceil_boundary(text: &str, mut at: usize) -> usize {
    while at < text.len() && !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// `812 bytes`, `4.2 KB`, `5.0 MB`.
fn human_bytes(bytes: usize) -> String {
    match bytes {
        0..1_000 => format!("{bytes} bytes"),
        1_000..1_000_000 => format!("{:.1} KB", bytes as f64 / 1e3),
        _ => format!("{:.1} MB", bytes as f64 / 1e6),
    }
}

/// Escapes text for HTML element content and quoted attributes.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// Bytes of one output a page holds: its start and end, this much each; the log has it all.
const PAGE_HALF: usize = 128 * 1024;

/// A `<pre>`, inside a closed `<details>` when it is long; an output too long for a page
/// keeps its start and end, with what was left out said between them.
fn block(out: &mut String, class: &str, text: &str) {
    let lines = text.lines().count();
    let shown = if text.len() > 2 * PAGE_HALF {
        let head = floor_boundary(text, PAGE_HALF);
        let tail = ceil_boundary(text, text.len() - PAGE_HALF);
        format!(
            "{}\n… {} bytes left out of the page (the session log holds them) …\n{}",
            &text[..head],
            tail - head,
            &text[tail..]
        )
    } else {
        text.to_owned()
    };
    let pre = format!("<pre class=\"{class}\">{}</pre>", escape(&shown));
    if lines > OPEN_LINES || text.len() > OPEN_CHARS {
        out.push_str(&format!(
            "<details class=\"long-output\" data-bytes=\"{}\"><summary>{lines} lines, {}</summary>{pre}</details>\n",
            text.len(),
            human_bytes(text.len())
        ));
    } else {
        out.push_str(&pre);
        out.push('\n');
    }
}

/// Each call a call made, as a card of its own, nested in it.
fn children(children: &[Card], out: &mut String) {
    if children.is_empty() {
        return;
    }
    out.push_str("<div class=\"children\">\n");
    for child in children {
        out.push_str(&render_html(child));
    }
    out.push_str("</div>\n");
}

/// The body; a program's body shows the calls it made (`children`) between the program and
/// what it printed.
fn body(body: &CardBody, children_of: &[Card], out: &mut String) {
    match body {
        CardBody::Generic { arguments, output } => {
            block(out, "arguments", arguments);
            if let Some(output) = output {
                block(out, "output", output);
            }
        }
        CardBody::Terminal {
            description,
            output,
            ..
        } => {
            if let Some(description) = description {
                out.push_str(&format!(
                    "<p class=\"description\">{}</p>\n",
                    escape(description)
                ));
            }
            if let Some(output) = output {
                block(out, "output terminal", output);
            }
            let facts: Vec<String> = body
                .terminal_facts()
                .into_iter()
                .map(|fact| {
                    format!(
                        "<span class=\"{}\">{}</span>",
                        tone_class(fact.tone()),
                        fact.words()
                    )
                })
                .collect();
            if !facts.is_empty() {
                out.push_str(&format!("<p class=\"facts\">{}</p>\n", facts.join(" ")));
            }
        }
        CardBody::Diff { files } => {
            for file in files {
                let mut text = String::new();
                for line in &file.lines {
                    let (class, sign) = match line.kind {
                        DiffLineKind::Hunk => ("hunk", ""),
                        DiffLineKind::Added => ("add", "+"),
                        DiffLineKind::Removed => ("del", "-"),
                        DiffLineKind::Context => ("ctx", " "),
                    };
                    text.push_str(&format!(
                        "<span class=\"{class}\">{sign}{}</span>\n",
                        escape(&line.text)
                    ));
                }
                let head = format!(
                    "<p class=\"file\">{} <span class=\"add\">+{}</span> <span class=\"del\">−{}</span></p>",
                    escape(&file.path),
                    file.added,
                    file.removed
                );
                let pre = format!("<pre class=\"diff\">{text}</pre>");
                if file.lines.len() > OPEN_LINES {
                    out.push_str(&format!(
                        "{head}<details><summary>{} lines</summary>{pre}</details>\n",
                        file.lines.len()
                    ));
                } else {
                    out.push_str(&format!("{head}{pre}\n"));
                }
            }
        }
        CardBody::Search {
            files,
            omitted_files,
            omitted_matches,
            ..
        } => {
            out.push_str("<ul class=\"search\">");
            for file in files {
                let count = file
                    .count
                    .map(|count| format!(" <span class=\"count\">{count}</span>"))
                    .unwrap_or_default();
                out.push_str(&format!("<li>{}{count}", escape(&file.path)));
                if !file.lines.is_empty() {
                    out.push_str("<pre class=\"matches\">");
                    for line in &file.lines {
                        let class = if line.is_match { "hit" } else { "ctx" };
                        out.push_str(&format!(
                            "<span class=\"{class}\">{:>5}  {}</span>\n",
                            line.line,
                            escape(&line.text)
                        ));
                    }
                    out.push_str("</pre>");
                }
                out.push_str("</li>");
            }
            out.push_str("</ul>\n");
            if *omitted_files > 0 || *omitted_matches > 0 {
                out.push_str(&format!(
                    "<p class=\"omitted\">{omitted_files} more files, {omitted_matches} more matches not shown</p>\n"
                ));
            }
        }
        CardBody::Read { .. } => {
            let words = body.window_words();
            out.push_str(&format!("<p class=\"window\">{}</p>\n", escape(&words)));
        }
        CardBody::Web {
            url,
            status,
            title,
            excerpt,
        } => {
            out.push_str(&format!("<p class=\"url\">{}", escape(url)));
            if let Some(status) = status {
                out.push_str(&format!(" <span class=\"status\">HTTP {status}</span>"));
            }
            if let Some(title) = title {
                out.push_str(&format!(" — {}", escape(title)));
            }
            out.push_str("</p>\n");
            if let Some(excerpt) = excerpt {
                block(out, "excerpt", excerpt);
            }
        }
        CardBody::Todo { items } => {
            out.push_str("<ul class=\"todo\">");
            for item in items {
                out.push_str(&format!(
                    "<li class=\"{}\">{}</li>",
                    escape(&item.status),
                    escape(&item.content)
                ));
            }
            out.push_str("</ul>\n");
        }
        CardBody::Question { questions } => {
            out.push_str("<dl class=\"questions\">");
            for question in questions {
                out.push_str(&format!("<dt>{}</dt>", escape(&question.question)));
                if !question.options.is_empty() {
                    let options: Vec<String> = question
                        .options
                        .iter()
                        .map(|option| escape(option))
                        .collect();
                    out.push_str(&format!(
                        "<dd class=\"options\">{}</dd>",
                        options.join(" | ")
                    ));
                }
                match (&question.state, &question.answer) {
                    (_, Some(answer)) => {
                        out.push_str(&format!("<dd class=\"answer\">{}</dd>", escape(answer)));
                    }
                    (Some(state), None) => {
                        out.push_str(&format!("<dd class=\"unanswered\">{}</dd>", escape(state)));
                    }
                    (None, None) => {}
                }
            }
            out.push_str("</dl>\n");
        }
        CardBody::CodeRun {
            language,
            program,
            sub_calls,
            logs,
            result,
        } => {
            block(out, &format!("program {}", escape(language)), program);
            children(children_of, out);
            if !sub_calls.is_empty() {
                out.push_str("<ol class=\"sub-calls\">");
                for call in sub_calls {
                    let outcome = match &call.error {
                        None => "<span class=\"ok\">ok</span>".to_owned(),
                        Some(code) => format!("<span class=\"code\">{}</span>", escape(code)),
                    };
                    out.push_str(&format!(
                        "<li>{} {} {outcome}</li>",
                        escape(&call.call_id),
                        escape(&call.tool)
                    ));
                }
                out.push_str("</ol>\n");
            }
            if let Some(logs) = logs {
                block(out, "logs", logs);
            }
            if let Some(result) = result {
                block(out, "result", result);
            }
        }
    }
}
