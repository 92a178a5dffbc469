//! The tool calls of an assistant message, each under an id no other call of the message has.
//!
//! The log, recovery, replay, the UI and the model's next request all key a call by its id,
//! so a model that sends one id twice would make two calls one. The message is logged as the
//! model sent it; every reader takes its calls from [`AssistantMessage::tool_calls`], which
//! gives a repeated id a new, deterministic one (`c1` again becomes `c1-dup2`), so all of them
//! agree on which call is which. The runtime refuses a call whose id was repeated.

use std::collections::{HashMap, HashSet};

use crate::event::{AssistantBlock, AssistantMessage};
use crate::ids::CallId;

/// One tool call of an assistant message, under the id everything else knows it by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageCall<'a> {
    /// Unique within the message: the id the model sent, or a new one when that id was
    /// already taken by an earlier call of the message.
    pub call_id: CallId,
    /// The tool's name as the model sent it.
    pub name: &'a str,
    /// The argument text exactly as the model sent it.
    pub arguments_raw: &'a str,
    /// The id the model sent, when an earlier call of the message already had it.
    pub repeated_id: Option<&'a CallId>,
}

/// Below this many calls, repeats are found by comparing pairs: no set is built.
const PAIRWISE_LIMIT: usize = 16;

impl AssistantMessage {
    /// The message's tool calls in order, each under an id that is unique in the message.
    /// The first call with a given id keeps it; a later call with the same id is named
    /// `<id>-dup<n>` with the smallest `n` from 2 that no call of the message uses. The
    /// suffix adds only `-`, letters and digits, which OpenAI's and Anthropic's id rules
    /// accept.
    pub fn tool_calls(&self) -> Vec<MessageCall<'_>> {
        let sent: Vec<SentCall<'_>> = self
            .blocks
            .iter()
            .filter_map(|block| match block {
                AssistantBlock::ToolCall {
                    call_id,
                    name,
                    arguments_raw,
                } => Some((call_id, name.as_str(), arguments_raw.as_str())),
                AssistantBlock::Text { .. } | AssistantBlock::Thinking { .. } => None,
            })
            .collect();
        if !has_repeats(&sent) {
            return sent.into_iter().map(as_sent).collect();
        }
        // Every id the model sent is taken, so a new name can never meet a later call's id.
        let mut taken: HashSet<String> = sent
            .iter()
            .map(|(call_id, _, _)| call_id.as_str().to_owned())
            .collect();
        // Per id, the `n` to try next: names below it are taken, so each repeat starts
        // there and many repeats of one id stay linear.
        let mut next_n: HashMap<&str, u64> = HashMap::with_capacity(sent.len());
        sent.into_iter()
            .map(|call| {
                let call_id = call.0;
                let Some(n) = next_n.get_mut(call_id.as_str()) else {
                    next_n.insert(call_id.as_str(), 2);
                    return as_sent(call);
                };
                let renamed = loop {
                    let candidate = format!("{}-dup{n}", call_id.as_str());
                    *n += 1;
                    if !taken.contains(&candidate) {
                        break candidate;
                    }
                };
                taken.insert(renamed.clone());
                MessageCall {
                    call_id: CallId::new(renamed),
                    name: call.1,
                    arguments_raw: call.2,
                    repeated_id: Some(call_id),
                }
            })
            .collect()
    }
}

impl MessageCall<'_> {
    /// Why this call is refused, when its id repeated an earlier call's.
    pub fn repeat_refusal(&self) -> Option<String> {
        self.repeated_id
            .map(|sent| repeated_call_id_refusal(sent, &self.call_id))
    }
}

/// Why a call whose id `sent` repeated an earlier call's, and which the message named
/// `given`, is refused (`INVALID_ARGS`): said the same by the pipeline that refuses it and
/// by recovery when a crash came first.
pub fn repeated_call_id_refusal(sent: &CallId, given: &CallId) -> String {
    format!(
        "the call id `{sent}` was already used by an earlier call of this message, and every call needs its own id; this call was recorded as `{given}` and not run. Send the call again if it is still needed."
    )
}

type SentCall<'a> = (&'a CallId, &'a str, &'a str);

fn as_sent((call_id, name, arguments_raw): SentCall<'_>) -> MessageCall<'_> {
    MessageCall {
        call_id: call_id.clone(),
        name,
        arguments_raw,
        repeated_id: None,
    }
}

fn has_repeats(sent: &[SentCall<'_>]) -> bool {
    if sent.len() <= PAIRWISE_LIMIT {
        return sent
            .iter()
            .enumerate()
            .any(|(index, (id, _, _))| sent[..index].iter().any(|(earlier, _, _)| earlier == id));
    }
    let mut seen = HashSet::with_capacity(sent.len());
    !sent.iter().all(|(id, _, _)| seen.insert(id.as_str()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::event::StopReason;

    fn message(ids: &[&str]) -> AssistantMessage {
        let mut blocks = vec![AssistantBlock::Text {
            text: "calling".into(),
        }];
        blocks.extend(
            ids.iter()
                .enumerate()
                .map(|(index, id)| AssistantBlock::ToolCall {
                    call_id: CallId::new(id),
                    name: format!("tool{index}"),
                    arguments_raw: format!("{{\"n\":{index}}}"),
                }),
        );
        AssistantMessage {
            blocks,
            stop_reason: StopReason::ToolCalls,
        }
    }

    fn ids(message: &AssistantMessage) -> Vec<(String, Option<String>)> {
        message
            .tool_calls()
            .into_iter()
            .map(|call| {
                (
                    call.call_id.as_str().to_owned(),
                    call.repeated_id.map(|id| id.as_str().to_owned()),
                )
            })
            .collect()
    }

    fn expected(pairs: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        pairs
            .iter()
            .map(|(id, repeated)| ((*id).to_owned(), repeated.map(str::to_owned)))
            .collect()
    }

    #[test]
    fn distinct_ids_are_kept_as_sent() {
        let calls = message(&["a", "b", "c"]);
        assert_eq!(
            ids(&calls),
            expected(&[("a", None), ("b", None), ("c", None)])
        );
        let all = calls.tool_calls();
        assert_eq!((all[1].name, all[1].arguments_raw), ("tool1", "{\"n\":1}"));
    }

    #[test]
    fn a_repeated_id_gets_a_new_one_that_no_call_of_the_message_uses() {
        // `a-dup2` is taken by the model's own fourth call, so the second `a` skips it.
        let calls = message(&["a", "a", "a", "a-dup2", "b"]);
        assert_eq!(
            ids(&calls),
            expected(&[
                ("a", None),
                ("a-dup3", Some("a")),
                ("a-dup4", Some("a")),
                ("a-dup2", None),
                ("b", None),
            ])
        );
    }

    #[test]
    fn large_messages_find_repeats_the_same_way() {
        let mut many: Vec<String> = (0..40).map(|n| format!("c{n}")).collect();
        many.push("c7".into());
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let found = ids(&message(&refs));
        assert_eq!(found.len(), 41);
        assert_eq!(found[40], ("c7-dup2".to_owned(), Some("c7".to_owned())));
        assert!(found[..40].iter().all(|(_, repeated)| repeated.is_none()));
    }

    #[test]
    fn ten_thousand_repeats_of_one_id_are_renamed_in_turn() {
        let all: Vec<&str> = vec!["call_0"; 10_000];
        let found = ids(&message(&all));
        assert_eq!(found[0], ("call_0".to_owned(), None));
        assert_eq!(
            found[9_999],
            ("call_0-dup10000".to_owned(), Some("call_0".to_owned()))
        );
        let distinct: HashSet<&str> = found.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(distinct.len(), 10_000);
    }

    #[test]
    fn each_repeat_takes_the_next_number_of_its_own_id() {
        let calls = message(&["x", "x", "y", "x"]);
        assert_eq!(
            ids(&calls),
            expected(&[
                ("x", None),
                ("x-dup2", Some("x")),
                ("y", None),
                ("x-dup3", Some("x"))
            ])
        );
    }
}
