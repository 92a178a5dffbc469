//! The four tools on background shells. Their concurrency claims name the shell
//! (`terminal:<id>`): a write, a kill, or a read that moves the shell's own cursor runs in
//! model order with every other call on that shell; a read from a cursor the model gives
//! may overlap other reads; other shells are independent.

use std::time::Duration;

use nix::sys::signal::Signal;
use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use toolrail_tools_core::spec::{ResourceClaim, ResourceKey};
use toolrail_tools_core::{
    Concurrency, ToolCode, ToolContext, ToolFailure, ToolKind, ToolOutput, ToolResult, ToolSpec,
    TypedTool, tool_code,
};

use super::shell::{InputKind, Life, Shell, WriteFailure};
use super::view::{Wait, describe, observe, record_end};
use super::{Found, Key, PastShell, Shells};

/// No shell has that id.
const SHELL_NOT_FOUND: ToolCode = tool_code!("SHELL_NOT_FOUND");
/// The shell ended: it takes no input.
const SHELL_ENDED: ToolCode = tool_code!("SHELL_ENDED");
/// The shell takes no input (or not this kind).
const SHELL_INPUT_CLOSED: ToolCode = tool_code!("SHELL_INPUT_CLOSED");

/// Bytes of output one call shows (head and tail kept around a marker past it).
const SHOWN: usize = 30 * 1024;
/// The longest a write may take before the call gives up on it.
const WRITE_LIMIT: Duration = Duration::from_secs(10);

fn claim(id: &str, write: bool) -> Concurrency {
    let key = ResourceKey::Terminal(id.to_owned());
    Concurrency::Shared(vec![if write {
        ResourceClaim::write(key)
    } else {
        ResourceClaim::read(key)
    }])
}

fn not_found(why: String) -> ToolFailure {
    ToolFailure::with_code(SHELL_NOT_FOUND, why)
}

/// The arguments of `shell_output`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellOutputArgs {
    /// The shell's id, as `bash` with `background` returned it (`sh1`).
    pub id: String,
    /// Read output after this cursor (a `cursor` an earlier result gave). Without it, the
    /// output since the last read that gave none.
    #[serde(default)]
    pub since: Option<u64>,
    /// Keep only the lines matching this regular expression (Rust `regex` syntax).
    #[serde(default)]
    pub filter: Option<String>,
    /// Wait up to this many milliseconds for new output (that matches the filter, if
    /// one is given) or for the shell to end.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// `shell_output`: what a background shell wrote since a cursor.
pub struct ShellOutputTool {
    shells: Shells,
}

impl ShellOutputTool {
    /// The tool over `shells`.
    pub fn new(shells: Shells) -> Self {
        Self { shells }
    }
}

impl TypedTool for ShellOutputTool {
    type Args = ShellOutputArgs;

    fn spec(&self) -> ToolSpec {
        let max_wait = self.shells.config().max_wait;
        ToolSpec::for_args::<ShellOutputArgs>(
            "shell_output",
            format!(
                "Read a background shell's new output: what it wrote after `since` (or after your last read), optionally only the lines matching `filter`, waiting up to `wait_ms` (at most {} s) for more or for its end. Returns the output, the next `cursor`, and the shell's state with its exit code once it ended.",
                max_wait.as_secs()
            ),
        )
        .kind(ToolKind::Read)
        .read_only()
        .timeout(max_wait + Duration::from_secs(10))
        .concurrency_note("in model order with other calls on the same shell; other shells are independent")
        .build()
    }

    fn concurrency(&self, args: &ShellOutputArgs) -> Concurrency {
        // Without a cursor the read moves the shell's own: it must not race another.
        claim(&args.id, args.since.is_none())
    }

    fn check(&self, args: &ShellOutputArgs) -> Result<(), Vec<String>> {
        match args.filter.as_deref().map(Regex::new) {
            Some(Err(error)) => Err(vec![format!("/filter: not a regular expression: {error}")]),
            _ => Ok(()),
        }
    }

    async fn run(&self, ctx: &ToolContext, args: ShellOutputArgs) -> ToolResult {
        let filter = match args.filter.as_deref().map(Regex::new).transpose() {
            Ok(filter) => filter,
            Err(error) => {
                return Err(ToolFailure::new(format!(
                    "the filter is not a regular expression: {error}"
                )));
            }
        };
        let shell = match self.shells.find(&args.id).map_err(not_found)? {
            Found::Live(shell) => shell,
            Found::Past(past) => {
                return Ok(past_output(&past, args.since.unwrap_or(past.read_cursor)));
            }
        };
        let since = args
            .since
            .unwrap_or_else(|| shell.read_cursor.load(std::sync::atomic::Ordering::Acquire));
        let wait = args.wait_ms.map_or(Wait::No, |wait| {
            Wait::ForOutput(Duration::from_millis(wait).min(self.shells.config().max_wait))
        });
        let view = observe(
            &shell,
            since,
            wait,
            filter.as_ref(),
            SHOWN,
            Some(ctx),
            ctx.cancellation(),
        )
        .await;
        if args.since.is_none() {
            shell
                .read_cursor
                .fetch_max(view.cursor, std::sync::atomic::Ordering::AcqRel);
        }
        record_end(ctx, &shell, &view.life).await;
        self.shells.retire_recorded();
        Ok(view.output(&shell, json!({})))
    }
}

/// What `shell_output` says of a shell that ended and was retired (in this run or an
/// earlier one): how it ended, and the end of
/// its output file after `since`.
fn past_output(past: &PastShell, since: u64) -> ToolOutput {
    use std::io::{Read, Seek, SeekFrom};
    use toolrail_tools_core::log::details::{ShellFacts, Terminal};
    let state = super::view::state_of_end(past.end);
    let mut bytes = Vec::new();
    let mut skipped = 0;
    if let Ok(mut file) = std::fs::File::open(&past.output_file) {
        let size = file.metadata().map_or(0, |meta| meta.len());
        let from = since.max(size.saturating_sub(SHOWN as u64));
        skipped = from.saturating_sub(since);
        if file.seek(SeekFrom::Start(from)).is_ok() {
            let _ = file.take(SHOWN as u64).read_to_end(&mut bytes);
        }
    }
    let mut text = if skipped > 0 {
        format!(
            "[… {skipped} bytes left out; the whole output is in {} …]\n",
            past.output_file.display()
        )
    } else {
        String::new()
    };
    text.push_str(&super::transcript::plain_terminal_text(&bytes));
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!(
        "[shell {} {} · cursor {}]",
        past.id,
        past.describe(),
        past.output_bytes
    ));
    let value = json!({
        "id": past.id,
        "state": state.as_str(),
        "exit_code": past.exit_code,
        "signal": past.signal,
        "cursor": past.output_bytes,
        "output_bytes": past.output_bytes,
        "output_file": past.output_file.display().to_string(),
    });
    let details = Terminal {
        command: past.command.clone(),
        exit_code: past.exit_code.map(i64::from),
        signal: past.signal.map(i64::from),
        output_tail: Some(text.clone()),
        shell: Some(ShellFacts {
            id: past.id.clone(),
            state,
            tty: past.tty,
            cursor: past.output_bytes,
        }),
        ..Terminal::default()
    };
    ToolOutput {
        value: Some(value),
        ..ToolOutput::text(text)
    }
    .with_details(details)
}

/// The arguments of `shell_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellWriteArgs {
    /// The shell's id (`sh1`).
    pub id: String,
    /// Text written as is (include `\n` to end a line).
    #[serde(default)]
    pub input: String,
    /// Keys typed after the text, by name: `enter`, `tab`, `ctrl-c`, `ctrl-d`, `up`, …
    /// Only a shell started with `tty` has a terminal to type control keys into.
    #[serde(default)]
    pub keys: Vec<Key>,
    /// Close the shell's input after writing (end of input). On a terminal this types
    /// `ctrl-d`.
    #[serde(default)]
    pub close: bool,
    /// Wait up to this many milliseconds for the shell's answer (default 500; the call
    /// returns once output has come and gone quiet, or the shell ended).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// `shell_write`: input, or keys on a terminal, to a background shell.
pub struct ShellWriteTool {
    shells: Shells,
}

impl ShellWriteTool {
    /// The tool over `shells`.
    pub fn new(shells: Shells) -> Self {
        Self { shells }
    }
}

impl TypedTool for ShellWriteTool {
    type Args = ShellWriteArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<ShellWriteArgs>(
            "shell_write",
            "Write to a background shell's input: text, then named keys (`enter`, `ctrl-c`, `ctrl-d`, …; control keys need a shell started with `tty`), optionally closing the input. Returns what the shell answered within `wait_ms` (default 500) and its state. Writing to a shell that ended is an error naming how it ended.",
        )
        .kind(ToolKind::Execute)
        .subject("input", toolrail_tools_core::spec::SubjectKind::Text)
        .timeout(self.shells.config().max_wait + WRITE_LIMIT + Duration::from_secs(10))
        .concurrency_note("in model order with other calls on the same shell; other shells are independent")
        .build()
    }

    fn concurrency(&self, args: &ShellWriteArgs) -> Concurrency {
        claim(&args.id, true)
    }

    fn check(&self, args: &ShellWriteArgs) -> Result<(), Vec<String>> {
        if args.input.is_empty() && args.keys.is_empty() && !args.close {
            return Err(vec![
                "/input: nothing to write: give `input`, `keys` or `close`".to_owned(),
            ]);
        }
        Ok(())
    }

    async fn run(&self, ctx: &ToolContext, args: ShellWriteArgs) -> ToolResult {
        let shell = match self.shells.find(&args.id).map_err(not_found)? {
            Found::Live(shell) => shell,
            Found::Past(past) => {
                return Err(ToolFailure::with_code(
                    SHELL_ENDED,
                    format!(
                        "shell {} is not running: it {}; nothing was written",
                        past.id,
                        past.describe()
                    ),
                ));
            }
        };
        let life = shell.life();
        if life != Life::Running {
            record_end(ctx, &shell, &life).await;
            self.shells.retire_recorded();
            return Err(ended(&shell, &life));
        }
        let bytes = input_bytes(&shell, &args).await?;
        let since = shell.read_cursor.load(std::sync::atomic::Ordering::Acquire);
        let close = args.close;
        let written = tokio::select! {
            written = tokio::time::timeout(WRITE_LIMIT, shell.write(&bytes, close)) => written,
            () = ctx.cancellation().cancelled() => {
                return Err(ToolFailure::outcome_unknown(format!(
                    "cancelled while writing to shell {}: some of the input may have been written",
                    shell.id
                )));
            }
        };
        match written {
            Ok(Ok(())) => shell.note_written(&bytes),
            Ok(Err(WriteFailure::Closed)) => {
                return Err(ToolFailure::with_code(
                    SHELL_INPUT_CLOSED,
                    format!("shell {}'s input is closed; nothing was written", shell.id),
                ));
            }
            Ok(Err(WriteFailure::Broken(done, why))) => {
                let life = shell.life();
                return Err(ToolFailure::new(format!(
                    "writing to shell {} broke after {done} of {} bytes ({why}); the shell is {}",
                    shell.id,
                    bytes.len(),
                    describe(&life)
                )));
            }
            Err(_) => {
                return Err(ToolFailure::timed_out(format!(
                    "shell {} did not take its input within {} s (it is not reading it); some of it may have been written",
                    shell.id,
                    WRITE_LIMIT.as_secs()
                )));
            }
        }
        let window =
            Duration::from_millis(args.wait_ms.unwrap_or(500)).min(self.shells.config().max_wait);
        let wait = Wait::Settle {
            window,
            quiet: Duration::from_millis(100).min(window),
        };
        let view = observe(
            &shell,
            since,
            wait,
            None,
            SHOWN,
            Some(ctx),
            ctx.cancellation(),
        )
        .await;
        shell
            .read_cursor
            .fetch_max(view.cursor, std::sync::atomic::Ordering::AcqRel);
        record_end(ctx, &shell, &view.life).await;
        self.shells.retire_recorded();
        Ok(view.output(
            &shell,
            json!({"written_bytes": bytes.len(), "closed": close}),
        ))
    }
}

/// The bytes a write sends, or why the shell cannot take them.
async fn input_bytes(shell: &Shell, args: &ShellWriteArgs) -> Result<Vec<u8>, ToolFailure> {
    let mut bytes = args.input.as_bytes().to_vec();
    match shell.input_kind().await {
        InputKind::Closed => Err(ToolFailure::with_code(
            SHELL_INPUT_CLOSED,
            format!(
                "shell {}'s input is closed (it was closed, or the command was moved to the background from a foreground call, whose input is always closed); nothing was written",
                shell.id
            ),
        )),
        InputKind::Pipe => {
            if let Some(key) = args.keys.iter().find(|key| !key.works_on_a_pipe()) {
                return Err(ToolFailure::with_code(
                    SHELL_INPUT_CLOSED,
                    format!(
                        "shell {} has no terminal (it was started without `tty`), so `{}` cannot be typed into it; nothing was written. Use shell_kill with a signal to interrupt it",
                        shell.id,
                        key.name()
                    ),
                ));
            }
            for key in &args.keys {
                bytes.extend_from_slice(key.pipe_bytes());
            }
            Ok(bytes)
        }
        InputKind::Terminal => {
            for key in &args.keys {
                bytes.extend_from_slice(key.bytes());
            }
            if args.close {
                bytes.extend_from_slice(Key::CtrlD.bytes());
            }
            Ok(bytes)
        }
    }
}

fn ended(shell: &Shell, life: &Life) -> ToolFailure {
    ToolFailure::with_code(
        SHELL_ENDED,
        format!(
            "shell {} is not running: it {}; nothing was written",
            shell.id,
            describe(life)
        ),
    )
}

/// A signal `shell_kill` sends first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum KillSignal {
    /// Ask it to end (the default).
    #[default]
    Term,
    /// Interrupt, as Ctrl-C does.
    Int,
    /// Hang up, as a closed terminal does.
    Hup,
    /// Quit.
    Quit,
    /// End it at once.
    Kill,
}

impl KillSignal {
    fn signal(self) -> Signal {
        match self {
            Self::Term => Signal::SIGTERM,
            Self::Int => Signal::SIGINT,
            Self::Hup => Signal::SIGHUP,
            Self::Quit => Signal::SIGQUIT,
            Self::Kill => Signal::SIGKILL,
        }
    }
}

/// The arguments of `shell_kill`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellKillArgs {
    /// The shell's id (`sh1`).
    pub id: String,
    /// The signal sent first (default `TERM`); after a grace, whatever is left of the
    /// shell's process tree is killed.
    #[serde(default)]
    pub signal: Option<KillSignal>,
}

/// `shell_kill`: ends a background shell and every process it started.
pub struct ShellKillTool {
    shells: Shells,
    grace: Duration,
}

impl ShellKillTool {
    /// The tool over `shells`.
    pub fn new(shells: Shells) -> Self {
        Self {
            shells,
            grace: Duration::from_secs(2),
        }
    }
}

impl TypedTool for ShellKillTool {
    type Args = ShellKillArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<ShellKillArgs>(
            "shell_kill",
            "End a background shell: `signal` (default TERM) to its processes, a grace, then SIGKILL to everything it started. Returns its end and the output it wrote since your last read.",
        )
        .kind(ToolKind::Execute)
        .idempotent()
        .timeout(Duration::from_secs(30))
        .concurrency_note("in model order with other calls on the same shell; other shells are independent")
        .build()
    }

    fn concurrency(&self, args: &ShellKillArgs) -> Concurrency {
        claim(&args.id, true)
    }

    async fn run(&self, ctx: &ToolContext, args: ShellKillArgs) -> ToolResult {
        let shell = match self.shells.find(&args.id).map_err(not_found)? {
            Found::Live(shell) => shell,
            Found::Past(past) => return Ok(past_output(&past, past.output_bytes)),
        };
        let was_running = shell.life() == Life::Running;
        if was_running {
            shell.stop(args.signal.unwrap_or_default().signal());
        }
        let since = shell.read_cursor.load(std::sync::atomic::Ordering::Acquire);
        let wait = super::view::Wait::ForEnd(self.grace + Duration::from_secs(10));
        let view = observe(
            &shell,
            since,
            wait,
            None,
            SHOWN,
            Some(ctx),
            ctx.cancellation(),
        )
        .await;
        shell
            .read_cursor
            .fetch_max(view.cursor, std::sync::atomic::Ordering::AcqRel);
        if view.life == Life::Running {
            return Err(ToolFailure::outcome_unknown(format!(
                "shell {} was signalled but had not ended when the call stopped waiting; shell_list shows whether it has since",
                shell.id
            )));
        }
        record_end(ctx, &shell, &view.life).await;
        self.shells.retire_recorded();
        Ok(view.output(&shell, json!({"was_running": was_running})))
    }
}

/// The arguments of `shell_list` (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellListArgs {}

/// `shell_list`: the session's background shells.
pub struct ShellListTool {
    shells: Shells,
}

impl ShellListTool {
    /// The tool over `shells`.
    pub fn new(shells: Shells) -> Self {
        Self { shells }
    }
}

impl TypedTool for ShellListTool {
    type Args = ShellListArgs;

    fn spec(&self) -> ToolSpec {
        ToolSpec::for_args::<ShellListArgs>(
            "shell_list",
            "List this session's background shells: id, command, state, exit code, bytes of output.",
        )
        .kind(ToolKind::Read)
        .read_only()
        .parallel_safe()
        .build()
    }

    async fn run(&self, _ctx: &ToolContext, _args: ShellListArgs) -> ToolResult {
        let shells = self.shells.list();
        let mut text = String::new();
        if shells.is_empty() {
            text.push_str("no background shells in this session");
        }
        for shell in &shells {
            let how = match (shell.exit_code, shell.signal) {
                (Some(code), _) => format!(" (exit code {code})"),
                (None, Some(signal)) => format!(" (signal {signal})"),
                (None, None) => String::new(),
            };
            text.push_str(&format!(
                "{} {}{how} · {} bytes · `{}`\n",
                shell.id,
                shell.state.as_str().replace('_', " "),
                shell.output_bytes,
                shell.command
            ));
        }
        Ok(ToolOutput {
            value: Some(json!({ "shells": shells })),
            ..ToolOutput::text(text.trim_end())
        })
    }
}
