//! The second pass: where each edit's `old` occurs, and what keeps the edits from applying
//! together — not found (with the closest line, for files small enough to look), found more
//! than once without `replace_all`, overlapping another edit.

use std::collections::BTreeSet;
use std::io::{self, Read};

use similar::TextDiff;

use super::Replacement;
use super::stream::{Event, Normalized, scan};

/// Lines of occurrences listed in a "found N times" problem.
const LISTED: usize = 10;
/// Characters of a line compared with a missing `old` (longer lines are not candidates).
const CANDIDATE_BYTES: usize = 4 * 1024;

/// Where one edit's `old` occurs.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Occurrences {
    pub(super) count: u64,
    /// The lines of the first few, from 1.
    pub(super) lines: Vec<u64>,
}

/// What the survey found: occurrences per edit, and pairs `(earlier, later)` of edits whose
/// occurrences overlap.
#[derive(Debug, Default)]
pub(super) struct Survey {
    pub(super) found: Vec<Occurrences>,
    pub(super) overlapping: BTreeSet<(usize, usize)>,
}

pub(super) fn survey<R: Read>(
    text: &mut Normalized<R>,
    patterns: &[Vec<u8>],
) -> io::Result<Survey> {
    let mut survey = Survey {
        found: patterns.iter().map(|_| Occurrences::default()).collect(),
        overlapping: BTreeSet::new(),
    };
    // Where the latest occurrence of each edit ends.
    let mut ends = vec![0u64; patterns.len()];
    let mut line = 1u64;
    scan(text, patterns, |event| -> io::Result<()> {
        match event {
            Event::Text(bytes) => line += memchr::memchr_iter(b'\n', bytes).count() as u64,
            Event::Match { edit, start } => {
                if let Some(found) = survey.found.get_mut(edit) {
                    found.count += 1;
                    if found.lines.len() < LISTED {
                        found.lines.push(line);
                    }
                }
                for (other, end) in ends.iter().enumerate() {
                    if other != edit && *end > start {
                        survey
                            .overlapping
                            .insert((other.min(edit), other.max(edit)));
                    }
                }
                let length = patterns.get(edit).map_or(0, Vec::len) as u64;
                if let Some(end) = ends.get_mut(edit) {
                    *end = (*end).max(start + length);
                }
            }
        }
        Ok(())
    })?;
    Ok(survey)
}

/// Every reason the edits cannot apply, one line each; `closest` gives, per edit not found,
/// the line most like its `old` if one was looked for.
pub(super) fn problems(
    edits: &[Replacement],
    survey: &Survey,
    closest: &[Option<(u64, String)>],
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut applies = vec![false; edits.len()];
    for (at, (edit, found)) in edits.iter().zip(&survey.found).enumerate() {
        match found.count {
            0 => problems.push(format!(
                "edit {}: `old` was not found{}",
                at + 1,
                match closest.get(at) {
                    Some(Some((line, text))) => format!("; the closest line is {line}: `{text}`"),
                    _ => String::new(),
                }
            )),
            1 => applies[at] = true,
            _ if edit.replace_all => applies[at] = true,
            count => {
                let mut lines: Vec<String> = found.lines.iter().map(u64::to_string).collect();
                let unlisted = count.saturating_sub(found.lines.len() as u64);
                if unlisted > 0 {
                    lines.push(format!("and {unlisted} more"));
                }
                problems.push(format!(
                    "edit {}: `old` was found {count} times (lines {}); include more surrounding text to make it unique, or set replace_all",
                    at + 1,
                    lines.join(", ")
                ));
            }
        }
    }
    for (early, late) in &survey.overlapping {
        if applies.get(*early) == Some(&true) && applies.get(*late) == Some(&true) {
            problems.push(format!("edit {} overlaps edit {}", late + 1, early + 1));
        }
    }
    problems
}

/// The first line of `old` that is not blank, trimmed: what a line is compared with.
pub(super) fn wanted_line(old: &str) -> &str {
    old.lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or(old)
        .trim()
}

/// For each wanted line (`None`: nothing to look for), the line of the text most like it
/// (similarity at least 0.6; the last of equals), as `(number, trimmed text)`.
pub(super) fn closest_lines<R: Read>(
    text: &mut Normalized<R>,
    wanted: &[Option<&str>],
) -> io::Result<Vec<Option<(u64, String)>>> {
    let mut best: Vec<Option<(f32, u64, String)>> = wanted.iter().map(|_| None).collect();
    let mut consider = |number: u64, line: &[u8]| {
        let Ok(line) = std::str::from_utf8(line) else {
            return;
        };
        let line = line.strip_suffix('\r').unwrap_or(line).trim();
        if line.is_empty() {
            return;
        }
        for (wanted, best) in wanted.iter().zip(best.iter_mut()) {
            let Some(wanted) = wanted.filter(|wanted| !wanted.is_empty()) else {
                continue;
            };
            let ratio = TextDiff::from_chars(wanted, line).ratio();
            if best.as_ref().is_none_or(|(top, _, _)| ratio >= *top) {
                *best = Some((ratio, number, line.to_owned()));
            }
        }
    };
    let (mut number, mut current, mut too_long) = (1u64, Vec::new(), false);
    let mut piece = Vec::new();
    loop {
        piece.clear();
        let more = text.next_into(&mut piece)?;
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', &piece) {
            let rest = piece.get(start..end).unwrap_or_default();
            if !too_long && current.len() + rest.len() <= CANDIDATE_BYTES {
                current.extend_from_slice(rest);
                consider(number, &current);
            }
            current.clear();
            too_long = false;
            number += 1;
            start = end + 1;
        }
        let rest = piece.get(start..).unwrap_or_default();
        if current.len() + rest.len() > CANDIDATE_BYTES {
            too_long = true;
        } else if !too_long {
            current.extend_from_slice(rest);
        }
        if !more {
            break;
        }
    }
    if !too_long {
        consider(number, &current);
    }
    Ok(best
        .into_iter()
        .map(|best| {
            best.filter(|(ratio, _, _)| *ratio >= 0.6)
                .map(|(_, number, line)| (number, line))
        })
        .collect())
}
