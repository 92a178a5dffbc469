//! Where each call's time went, per batch: one lane per call with its policy, approval
//! wait, queue and run segments, placed on the batch's clock; and the numbers a summary
//! states (parallel groups, time saved against running the calls one by one, errors by
//! code). Pure functions of the log's call records.

use std::collections::BTreeMap;

use serde::Serialize;
use toolrail_session_log::CallRecord;

/// One call's lane, in microseconds from the batch's first record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Lane {
    /// The call's id, as the log has it (a lane's label and `data-call-id` on the page).
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// When the call was recorded; the log's timestamps are milliseconds, so this is a
    /// multiple of 1000.
    pub start_us: u64,
    /// The phases the call went through, in order and end to end from `start_us`; empty
    /// until it has a result. A phase that took no time has no segment.
    pub segments: Vec<Segment>,
    /// The error code of its result, if any.
    pub error: Option<String>,
}

/// One phase of a call, placed on the batch's clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// What the call was doing.
    pub phase: Phase,
    /// When the phase began, in microseconds from the batch's first record (not from the
    /// lane's start).
    pub start_us: u64,
    /// How long it lasted, in microseconds; never 0.
    pub length_us: u64,
}

/// What a call was doing during a segment, from the result's timings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Parse, hooks and guards.
    Policy,
    /// Waiting for an approval answer.
    Approval,
    /// Waiting for a slot, a barrier or a claim.
    Queued,
    /// Execute layers and the body.
    Run,
    /// Settled, waiting to commit in model order.
    Commit,
}

impl Phase {
    /// The phase as serialized: `policy`, `approval`, `queued`, `run`, `commit`. The
    /// page's segment class is this.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Policy => "policy",
            Self::Approval => "approval",
            Self::Queued => "queued",
            Self::Run => "run",
            Self::Commit => "commit",
        }
    }
}

/// One batch: the calls of one assistant message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BatchTimeline {
    /// One lane per call, in model order.
    pub lanes: Vec<Lane>,
    /// From the first record to the last commit.
    pub span_us: u64,
}

impl BatchTimeline {
    /// The lanes of `records` (one batch, in model order). Offsets come from the records'
    /// timestamps (milliseconds), lengths from the results' timings (microseconds).
    pub fn of(records: &[&CallRecord]) -> Self {
        let first = records
            .iter()
            .map(|record| record.recorded_at.as_millis())
            .min()
            .unwrap_or(0);
        let mut lanes = Vec::new();
        let mut span_us = 0;
        for record in records {
            let start_us = (record.recorded_at.as_millis() - first).saturating_mul(1000);
            let mut segments = Vec::new();
            let mut at = start_us;
            let mut push = |phase, length_us: u64| {
                if length_us > 0 {
                    segments.push(Segment {
                        phase,
                        start_us: at,
                        length_us,
                    });
                    at = at.saturating_add(length_us);
                }
            };
            let error = record
                .result
                .as_ref()
                .and_then(|result| result.error_code().map(ToString::to_string));
            if let Some(result) = &record.result {
                let timing = result.timing;
                let approval = timing.approval_us.min(timing.policy_us);
                push(Phase::Policy, timing.policy_us - approval);
                push(Phase::Approval, approval);
                push(Phase::Queued, timing.queued_us);
                push(Phase::Run, timing.run_us);
                // Recorded numbers may be anything: nothing here may overflow.
                let accounted = timing
                    .policy_us
                    .saturating_add(timing.queued_us)
                    .saturating_add(timing.run_us);
                push(Phase::Commit, timing.total_us.saturating_sub(accounted));
            }
            let end = segments.last().map_or(start_us, |last| {
                last.start_us.saturating_add(last.length_us)
            });
            let committed = record.committed_at.map_or(0, |at| {
                at.as_millis().saturating_sub(first).saturating_mul(1000)
            });
            span_us = span_us.max(end).max(committed);
            lanes.push(Lane {
                call_id: record.call_id.to_string(),
                tool: record.name.clone(),
                start_us,
                segments,
                error,
            });
        }
        Self { lanes, span_us }
    }

    /// The sum of the bodies' run times: what running the calls one by one would take.
    pub fn serial_run_us(&self) -> u64 {
        self.runs()
            .map(|(start, end)| end - start)
            .fold(0, u64::saturating_add)
    }

    /// Groups of two or more calls whose bodies ran at the same time.
    pub fn parallel_groups(&self) -> usize {
        self.clusters()
            .iter()
            .filter(|cluster| cluster.calls >= 2)
            .count()
    }

    /// How long at least one body was running: what the bodies took side by side.
    pub fn running_us(&self) -> u64 {
        self.clusters()
            .iter()
            .map(|cluster| cluster.to - cluster.from)
            .fold(0, u64::saturating_add)
    }

    /// The bodies' runs merged where they overlap (runs that only touch stay apart), in
    /// time order.
    fn clusters(&self) -> Vec<Cluster> {
        let mut runs: Vec<(u64, u64)> = self.runs().collect();
        runs.sort_unstable();
        let mut clusters: Vec<Cluster> = Vec::new();
        for (start, end) in runs {
            match clusters.last_mut() {
                Some(last) if start < last.to => {
                    last.to = last.to.max(end);
                    last.calls += 1;
                }
                _ => clusters.push(Cluster {
                    from: start,
                    to: end,
                    calls: 1,
                }),
            }
        }
        clusters
    }

    fn runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.lanes.iter().flat_map(|lane| {
            lane.segments
                .iter()
                .filter(|segment| segment.phase == Phase::Run)
                .map(|segment| {
                    (
                        segment.start_us,
                        segment.start_us.saturating_add(segment.length_us),
                    )
                })
        })
    }
}

/// The calls of a log grouped into batches (turn, step), in log order.
pub fn batches(records: &[CallRecord]) -> Vec<Vec<&CallRecord>> {
    let mut order: Vec<(Option<u64>, Option<u64>)> = Vec::new();
    let mut groups: BTreeMap<(Option<u64>, Option<u64>), Vec<&CallRecord>> = BTreeMap::new();
    for record in records {
        let key = (
            record.turn.map(|turn| u64::from(turn.0)),
            record.step.map(|step| u64::from(step.0)),
        );
        if !groups.contains_key(&key) {
            order.push(key);
        }
        groups.entry(key).or_default().push(record);
    }
    order
        .into_iter()
        .filter_map(|key| groups.remove(&key))
        .collect()
}

/// What a whole session came to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Every call the log records, a program's binding calls included.
    pub calls: usize,
    /// Batches: the distinct (turn, step) pairs of the calls.
    pub batches: usize,
    /// Groups of two or more calls whose bodies ran at the same time, over all batches.
    pub parallel_groups: usize,
    /// Run time of every body added up, minus the time at least one body was running: what
    /// running them side by side saved.
    pub saved_us: u64,
    /// Failed calls by error code: `POLICY_DENIED` → 2.
    pub errors: BTreeMap<String, usize>,
    /// Calls the sandbox refused something (the call itself may have succeeded).
    pub sandbox_refusals: usize,
}

impl Summary {
    /// One line: calls, batches, parallel groups, time saved, errors by code.
    pub fn line(&self) -> String {
        let errors = if self.errors.is_empty() {
            "none".to_owned()
        } else {
            self.errors
                .iter()
                .map(|(code, count)| format!("{code} × {count}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let refusals = match self.sandbox_refusals {
            0 => String::new(),
            count => format!(
                " · the sandbox refused {count} call{} something",
                plural(count, "s")
            ),
        };
        format!(
            "{} call{} in {} batch{} · {} parallel group{} · {} saved against running them one by one · errors: {errors}{refusals}",
            self.calls,
            plural(self.calls, "s"),
            self.batches,
            plural(self.batches, "es"),
            self.parallel_groups,
            plural(self.parallel_groups, "s"),
            duration(self.saved_us)
        )
    }

    /// The summary of a log's call records, batched by [`batches`].
    pub fn of(records: &[CallRecord]) -> Self {
        let mut summary = Self {
            calls: records.len(),
            sandbox_refusals: records
                .iter()
                .filter_map(|record| record.result.as_deref())
                .filter(|result| crate::present::sandbox_refusals(result).next().is_some())
                .count(),
            ..Self::default()
        };
        for batch in batches(records) {
            let timeline = BatchTimeline::of(&batch);
            summary.batches += 1;
            summary.parallel_groups += timeline.parallel_groups();
            summary.saved_us = summary.saved_us.saturating_add(
                timeline
                    .serial_run_us()
                    .saturating_sub(timeline.running_us()),
            );
            for lane in timeline.lanes {
                if let Some(code) = lane.error {
                    *summary.errors.entry(code).or_default() += 1;
                }
            }
        }
        summary
    }
}

fn plural(count: usize, ending: &str) -> &str {
    if count == 1 { "" } else { ending }
}

/// `850 µs`, `12.3 ms`, `4.20 s`.
pub fn duration(us: u64) -> String {
    match us {
        0..1_000 => format!("{us} µs"),
        1_000..1_000_000 => format!("{:.1} ms", us as f64 / 1_000.0),
        _ => format!("{:.2} s", us as f64 / 1_000_000.0),
    }
}

/// Overlapping runs taken together: from the first start to the last end.
struct Cluster {
    from: u64,
    to: u64,
    calls: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(id: &str, runs: &[(u64, u64)]) -> Lane {
        Lane {
            call_id: id.to_owned(),
            tool: "t".to_owned(),
            start_us: 0,
            segments: runs
                .iter()
                .map(|(start, length)| Segment {
                    phase: Phase::Run,
                    start_us: *start,
                    length_us: *length,
                })
                .collect(),
            error: None,
        }
    }

    #[test]
    fn overlapping_runs_form_groups_and_only_overlap_counts_as_saved() {
        // c1 and c2 overlap by 5; c3 runs alone after a gap; c4 and c5 overlap fully.
        let timeline = BatchTimeline {
            lanes: vec![
                lane("c1", &[(0, 10)]),
                lane("c2", &[(5, 10)]),
                lane("c3", &[(20, 10)]),
                lane("c4", &[(40, 10)]),
                lane("c5", &[(40, 10)]),
            ],
            span_us: 50,
        };
        assert_eq!(timeline.parallel_groups(), 2);
        assert_eq!(timeline.serial_run_us(), 50);
        assert_eq!(timeline.running_us(), 15 + 10 + 10);
        // One by one: no group, nothing saved.
        let serial = BatchTimeline {
            lanes: vec![lane("c1", &[(0, 10)]), lane("c2", &[(10, 10)])],
            span_us: 20,
        };
        assert_eq!(serial.parallel_groups(), 0);
        assert_eq!(serial.serial_run_us() - serial.running_us(), 0);
    }

    #[test]
    fn the_summary_line_counts_in_words() {
        let summary = Summary {
            calls: 1,
            batches: 1,
            parallel_groups: 0,
            saved_us: 1_500,
            errors: BTreeMap::from([("POLICY_DENIED".to_owned(), 1)]),
            sandbox_refusals: 0,
        };
        assert_eq!(
            summary.line(),
            "1 call in 1 batch · 0 parallel groups · 1.5 ms saved against running them one by one · errors: POLICY_DENIED × 1"
        );
        let refused = Summary {
            calls: 2,
            batches: 2,
            sandbox_refusals: 1,
            ..Summary::default()
        };
        assert_eq!(
            refused.line(),
            "2 calls in 2 batches · 0 parallel groups · 0 µs saved against running them one by one · errors: none · the sandbox refused 1 call something"
        );
    }
}
