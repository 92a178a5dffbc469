//! A script of answers for scenarios and tests, shared by the scripted approval and question
//! services: answers given in order, and a record of everything that was asked.

use std::collections::VecDeque;

use parking_lot::Mutex;
use toolrail_tools_core::CancellationToken;

/// Answers in order, and every request asked so far.
#[derive(Debug)]
pub(crate) struct Script<Asked, Answer> {
    answers: Mutex<VecDeque<Answer>>,
    asked: Mutex<Vec<Asked>>,
}

/// What the script has for one request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Cue<Answer> {
    /// The next answer of the script.
    Answer(Answer),
    /// The batch was cancelled before the request: no answer was used.
    Cancelled,
    /// The script has no answers left.
    RanOut,
}

impl<Asked, Answer> Default for Script<Asked, Answer> {
    fn default() -> Self {
        Self::new([])
    }
}

impl<Asked, Answer> Script<Asked, Answer> {
    /// A script giving `answers` in order.
    pub(crate) fn new(answers: impl IntoIterator<Item = Answer>) -> Self {
        Self {
            answers: Mutex::new(answers.into_iter().collect()),
            asked: Mutex::new(Vec::new()),
        }
    }

    /// The answers not used yet.
    pub(crate) fn remaining(&self) -> usize {
        self.answers.lock().len()
    }
}

impl<Asked: Clone, Answer> Script<Asked, Answer> {
    /// Records `asked`, then takes the next answer unless the batch is cancelled.
    pub(crate) fn cue(&self, asked: &Asked, cancel: &CancellationToken) -> Cue<Answer> {
        self.asked.lock().push(asked.clone());
        if cancel.is_cancelled() {
            return Cue::Cancelled;
        }
        match self.answers.lock().pop_front() {
            Some(answer) => Cue::Answer(answer),
            None => Cue::RanOut,
        }
    }

    /// Every request so far, in the order asked.
    pub(crate) fn asked(&self) -> Vec<Asked> {
        self.asked.lock().clone()
    }
}
