//! Which turns a run drives, given what the session's log already holds: a worker that
//! takes a session over continues it from what the log says, not from its own memory — the
//! turns that ended are done, and an interrupted turn goes on with the model's next
//! scripted step after a message saying the session was resumed.

use toolrail_session_log::{
    ContentBlock, Event, EventData,
    event::{AssistantMessage, TurnEndKind},
};

use super::TurnSpec;

/// The user message of a turn that continues one a crash or takeover interrupted.
pub const RESUME_MESSAGE: &str = "[resumed] This session was interrupted and is resumed here; \
the results above say what became of the calls that were in flight. Continue.";

/// One turn a run will drive.
pub(super) struct PlannedTurn {
    pub user: String,
    pub script: Vec<AssistantMessage>,
    pub cancel_after_ms: Option<u64>,
}

/// The turns still to drive, given what the log already holds: after the last scenario turn
/// the log started, unless that turn was interrupted — then first a resumed turn with the
/// steps its model had not answered yet (none left: nothing to resume).
pub(super) fn remaining_turns(
    turns: &[TurnSpec],
    scripts: Vec<Vec<AssistantMessage>>,
    earlier: &[Event],
) -> Vec<PlannedTurn> {
    let mut current: Option<usize> = None;
    let mut answered = vec![0_usize; turns.len()];
    let mut last_end: Option<TurnEndKind> = None;
    for event in earlier {
        // The kinds that matter here, with `if let`: the lint wants no wildcard arm over
        // the log's whole vocabulary.
        if let EventData::TurnStart(start) = &event.data {
            if !is_resume(&start.user) {
                current = Some(current.map_or(0, |index| index + 1));
            }
            last_end = None;
        } else if let EventData::AssistantMessage(_) = &event.data {
            if let Some(count) = current.and_then(|index| answered.get_mut(index)) {
                *count += 1;
            }
        } else if let EventData::TurnEnd(end) = &event.data {
            last_end = Some(end.kind);
        }
    }
    let mut planned = Vec::new();
    let next = match current {
        None => 0,
        Some(index) => {
            // A turn the log leaves open was never recovered; it is driven on like an
            // interrupted one (recovery runs before a resume, so this is a stale read).
            let interrupted = matches!(last_end, None | Some(TurnEndKind::Interrupted));
            if interrupted {
                let done = answered.get(index).copied().unwrap_or_default();
                let rest: Vec<AssistantMessage> = scripts
                    .get(index)
                    .map(|script| script.iter().skip(done).cloned().collect())
                    .unwrap_or_default();
                if !rest.is_empty() {
                    planned.push(PlannedTurn {
                        user: RESUME_MESSAGE.to_owned(),
                        script: rest,
                        cancel_after_ms: None,
                    });
                }
            }
            index + 1
        }
    };
    planned.extend(
        turns
            .iter()
            .zip(scripts)
            .skip(next)
            .map(|(turn, script)| PlannedTurn {
                user: turn.user.clone(),
                script,
                cancel_after_ms: turn.cancel_after_ms,
            }),
    );
    planned
}

fn is_resume(user: &[ContentBlock]) -> bool {
    matches!(user, [block] if block.as_text() == Some(RESUME_MESSAGE))
}

#[cfg(test)]
mod tests {
    use toolrail_session_log::{
        Timestamp,
        event::{StopReason, TurnEnd, TurnStart},
    };

    use super::*;

    fn message(text: &str) -> AssistantMessage {
        AssistantMessage {
            blocks: vec![toolrail_session_log::event::AssistantBlock::Text {
                text: text.to_owned(),
            }],
            stop_reason: StopReason::EndTurn,
        }
    }

    fn turn(user: &str) -> TurnSpec {
        TurnSpec {
            user: user.to_owned(),
            cancel_after_ms: None,
            model: Vec::new(),
        }
    }

    fn event(data: EventData) -> Event {
        Event {
            seq: 0,
            ts: Timestamp::now(),
            turn: None,
            step: None,
            call_id: None,
            data,
        }
    }

    fn start(user: &str) -> Event {
        event(EventData::TurnStart(TurnStart {
            user: vec![ContentBlock::text(user)],
            trace: None,
            caller: None,
            client: false,
        }))
    }

    fn answered(text: &str) -> Event {
        event(EventData::AssistantMessage(message(text)))
    }

    fn end(kind: TurnEndKind) -> Event {
        event(EventData::TurnEnd(TurnEnd {
            kind,
            message: None,
        }))
    }

    /// (user, first scripted answer) of each planned turn.
    fn plan(earlier: &[Event]) -> Vec<(String, Vec<String>)> {
        let turns = [turn("one"), turn("two")];
        let scripts = vec![
            vec![message("1a"), message("1b"), message("1c")],
            vec![message("2a")],
        ];
        remaining_turns(&turns, scripts, earlier)
            .into_iter()
            .map(|planned| {
                let user = if planned.user == RESUME_MESSAGE {
                    "resume".to_owned()
                } else {
                    planned.user
                };
                let script = planned
                    .script
                    .iter()
                    .map(|message| match message.blocks.first() {
                        Some(toolrail_session_log::event::AssistantBlock::Text { text }) => {
                            text.clone()
                        }
                        Some(_) | None => String::new(),
                    })
                    .collect();
                (user, script)
            })
            .collect()
    }

    fn owned(plan: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        plan.iter()
            .map(|(user, script)| {
                (
                    (*user).to_owned(),
                    script.iter().map(|text| (*text).to_owned()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_new_session_runs_every_turn() {
        assert_eq!(
            plan(&[]),
            owned(&[("one", &["1a", "1b", "1c"]), ("two", &["2a"])])
        );
    }

    #[test]
    fn an_interrupted_turn_goes_on_from_its_next_step() {
        let earlier = [start("one"), answered("1a"), end(TurnEndKind::Interrupted)];
        assert_eq!(
            plan(&earlier),
            owned(&[("resume", &["1b", "1c"]), ("two", &["2a"])])
        );
        // Taken over twice: the second resume counts the first resume's answers too.
        let twice = [
            start("one"),
            answered("1a"),
            end(TurnEndKind::Interrupted),
            start(RESUME_MESSAGE),
            answered("1b"),
            end(TurnEndKind::Interrupted),
        ];
        assert_eq!(
            plan(&twice),
            owned(&[("resume", &["1c"]), ("two", &["2a"])])
        );
    }

    #[test]
    fn ended_turns_are_done_and_a_fully_answered_one_is_not_resumed() {
        let completed = [start("one"), answered("1a"), end(TurnEndKind::Completed)];
        assert_eq!(plan(&completed), owned(&[("two", &["2a"])]));
        let spent = [
            start("one"),
            answered("1a"),
            answered("1b"),
            answered("1c"),
            end(TurnEndKind::Interrupted),
        ];
        assert_eq!(plan(&spent), owned(&[("two", &["2a"])]));
        let all = [start("one"), end(TurnEndKind::Aborted), start("two")];
        assert_eq!(plan(&all), owned(&[("resume", &["2a"])]));
    }
}
