//! Input written to a background shell that reads commands is judged by the permission
//! rules as a `bash` call ([`Shells::input_reading`]): to a shell, with the input as its
//! command line; to a REPL, as a command known only at run time (its code may run any
//! command, so every deny rule over commands refuses it). The rules' hook decides (allow,
//! ask, deny, with the same presets and session approvals), and their deny list runs again
//! as a guard, so no hook, approval or session key undoes a deny. `shell_write`'s own rules
//! apply as well; the stronger decision stands. Input to any other program is judged as
//! `shell_write` alone.

use std::sync::Arc;

use serde_json::{Value, json};
use toolrail_permissions::Permissions;
use toolrail_policy_guards::DenyListGuard;
use toolrail_session_log::BoxFuture;
use toolrail_shell_tool::{BashTool, InputReading, Shells};
use toolrail_tools_core::spec::SubjectKind;
use toolrail_tools_core::{
    CallView, Guard, GuardVerdict, HookError, PreExecuteDecision, PreExecuteHook, PreNext,
    ToolKind, ToolSpec,
};

/// The tool whose input is judged.
const SHELL_WRITE: &str = "shell_write";
/// What code written to a REPL is judged as: a command whose program is known only when
/// it runs.
const REPL_CODE: &str = "$REPL_CODE";

/// The hook and the guard, sharing the session's shells and rules.
pub(crate) struct ShellInputRules {
    shells: Shells,
    permissions: Arc<Permissions>,
    deny: DenyListGuard,
    /// `bash` as the rules see it: an execute tool whose subject is its command.
    bash: ToolSpec,
}

impl ShellInputRules {
    pub(crate) fn new(shells: Shells, permissions: Arc<Permissions>) -> Arc<Self> {
        let bash = ToolSpec::builder(
            BashTool::NAME,
            "input written to a shell, judged as a command",
            json!({"type": "object"}),
        )
        .kind(ToolKind::Execute)
        .subject("command", SubjectKind::Command)
        .build();
        Arc::new(Self {
            deny: permissions.deny_guard(),
            shells,
            permissions,
            bash,
        })
    }

    /// The input of a `shell_write` call to a shell that reads commands, as `bash`
    /// arguments; `None` for every other call. What is judged is what the shell will run:
    /// the line earlier writes left unfinished with this input, carriage returns as line
    /// ends (a terminal turns them into one). Input that edits the line or recalls history
    /// (a control character, a key other than `enter`, end of input mid-line) cannot be
    /// read that way and is judged as a command known only at run time; so is a write to a
    /// shell the table does not know (yet).
    fn as_command(&self, call: &CallView<'_>) -> Option<Value> {
        if call.spec.name() != SHELL_WRITE {
            return None;
        }
        let unknown = Some(json!({ "command": REPL_CODE }));
        let id = call
            .arguments
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let input = call
            .arguments
            .get("input")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let keys: Vec<&str> = call
            .arguments
            .get("keys")
            .and_then(Value::as_array)
            .map(|keys| keys.iter().map(|key| key.as_str().unwrap_or("?")).collect())
            .unwrap_or_default();
        let close = call.arguments.get("close").and_then(Value::as_bool) == Some(true);
        match self.shells.input_reading(id) {
            None => return unknown,
            Some(InputReading::Input) => return None,
            Some(InputReading::Code) => return unknown,
            Some(InputReading::CommandLine) => {}
        }
        let edits = input
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'));
        if edits || keys.iter().any(|key| *key != "enter") {
            return unknown;
        }
        let mut line = self.shells.pending_input(id);
        line.push_str(&input.replace('\r', "\n"));
        if !keys.is_empty() {
            line.push('\n');
        }
        if close && !line.is_empty() && !line.ends_with('\n') {
            return unknown;
        }
        if line.trim().is_empty() {
            return None;
        }
        Some(json!({ "command": line }))
    }

    fn as_bash<'a>(&'a self, call: &'a CallView<'a>, arguments: &'a Value) -> CallView<'a> {
        CallView {
            identity: call.identity,
            spec: &self.bash,
            source: call.source,
            arguments,
        }
    }
}

/// The hook half (installed right after the rules' own hook).
pub(crate) struct ShellInputHook(pub(crate) Arc<ShellInputRules>);

impl PreExecuteHook for ShellInputHook {
    fn name(&self) -> &str {
        "shell-input-rules"
    }

    fn decide<'a>(
        &'a self,
        call: &'a CallView<'a>,
        next: PreNext<'a>,
    ) -> BoxFuture<'a, Result<PreExecuteDecision, HookError>> {
        Box::pin(async move {
            let Some(arguments) = self.0.as_command(call) else {
                return next.run().await;
            };
            let mut verdict = self.0.permissions.decide(&self.0.as_bash(call, &arguments));
            verdict.reason = format!("the input, judged as a `bash` command: {}", verdict.reason);
            verdict.then(next).await
        })
    }
}

/// The guard half: the deny rules again, over the input as a command.
pub(crate) struct ShellInputGuard(pub(crate) Arc<ShellInputRules>);

impl Guard for ShellInputGuard {
    fn name(&self) -> &str {
        "shell-input-deny-list"
    }

    fn check(&self, call: &CallView<'_>) -> GuardVerdict {
        match self.0.as_command(call) {
            Some(arguments) => self.0.deny.check(&self.0.as_bash(call, &arguments)),
            None => GuardVerdict::Abstain,
        }
    }
}
