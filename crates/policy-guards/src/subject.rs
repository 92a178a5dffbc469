//! A call's subject as the patterns read it: a command subject is parsed as a shell would
//! parse it, once per call, however many patterns look at it.

use std::cell::OnceCell;

use toolrail_tools_core::{CallView, Subject, command_line::CommandLine, spec::SubjectKind};

/// A call's subject as patterns read it: a command is parsed once, when a pattern first
/// needs it, however many patterns look at it.
#[derive(Debug)]
pub struct CallSubject<'a> {
    subject: Subject<'a>,
    line: OnceCell<CommandLine>,
}

impl<'a> CallSubject<'a> {
    /// `subject` as patterns read it; a command is parsed only when a pattern first needs it.
    pub fn new(subject: Subject<'a>) -> Self {
        Self {
            subject,
            line: OnceCell::new(),
        }
    }

    /// The call's subject, if its tool declares one and the call has it.
    pub fn of(call: &CallView<'a>) -> Option<Self> {
        call.subject().map(Self::new)
    }

    /// The subject as the call has it.
    pub fn subject(&self) -> &Subject<'a> {
        &self.subject
    }

    /// The command line, for a command subject.
    pub fn command_line(&self) -> Option<&CommandLine> {
        (self.subject.kind == SubjectKind::Command).then(|| {
            self.line
                .get_or_init(|| CommandLine::parse(self.subject.text))
        })
    }
}
