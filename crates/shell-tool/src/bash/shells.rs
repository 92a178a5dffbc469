//! `bash` on the background shells' machinery: a command started in the background
//! (`background: true`), a foreground command on a pseudo-terminal (`tty: true`), and a
//! foreground command moved to the background once it passes the embedder's budget
//! (`auto_background_after`). The command is admitted and confined exactly as any `bash`
//! call is; only who waits for it differs.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolrail_tools_core::log::AppendUrgency;
use toolrail_tools_core::log::details::Details;
use toolrail_tools_core::log::event::ShellStarted;
use toolrail_tools_core::{ToolCode, ToolContext, ToolFailure, ToolOutput, ToolResult, tool_code};

use super::run::{Admitted, note_refusals, unavailable, unique_name};
use super::{BashArgs, BashTool};
use crate::background::view::{Wait, record_end};
use crate::background::{
    Fd, Identity, Input, Launch, Life, Shell, ShellView, Watch, observe, pipe, terminal,
};
use crate::sandbox::Prepared;

/// The session runs as many background shells as it may.
const SHELL_LIMIT: ToolCode = tool_code!("SHELL_LIMIT");
/// This `bash` has no background shells to start one in.
const SHELLS_OFF: ToolCode = tool_code!("SHELLS_OFF");

/// What a shell's stdin is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stdin {
    /// A pipe `shell_write` writes to.
    Pipe,
    /// A pseudo-terminal, which is also its stdout and stderr.
    Terminal,
    /// Nothing (a foreground command's input is closed).
    Closed,
}

impl BashTool {
    /// Starts the command confined as `admitted` says, its output captured by a watcher.
    async fn start_shell(
        &self,
        args: &BashArgs,
        admitted: &Admitted<'_>,
        workdir: &Path,
        stdin: Stdin,
    ) -> Result<Arc<Shell>, ToolFailure> {
        let id = self.shells.next_id();
        let name = unique_name(&id);
        let private_tmp = self.private_tmp(&name)?;
        let started = self.spawn_shell(args, admitted, workdir, stdin, &private_tmp);
        let launch = match started {
            Ok(launch) => launch,
            Err(failure) => {
                super::run::remove_private_tmp(&private_tmp).await;
                return Err(failure);
            }
        };
        let background = self.shells.config();
        let watch = Watch {
            output_file: self.config.spill_dir.join(format!("{name}.out")),
            spill_cap: self.config.spill_cap,
            memory_bytes: background.memory_bytes,
            lifetime: background.lifetime,
            grace: self.config.grace,
        };
        let identity = Identity {
            id,
            command: args.command.clone(),
            mode: admitted.mode,
            tty: stdin == Stdin::Terminal,
        };
        Ok(Arc::new(Shell::start(identity, launch, watch)))
    }

    fn spawn_shell(
        &self,
        args: &BashArgs,
        admitted: &Admitted<'_>,
        workdir: &Path,
        stdin: Stdin,
        private_tmp: &Path,
    ) -> Result<Launch, ToolFailure> {
        let io_failed =
            |what: &str, error: std::io::Error| ToolFailure::new(format!("{what}: {error}"));
        let (columns, rows) = self.shells.config().terminal_size;
        let tty = match stdin {
            Stdin::Terminal => Some(
                terminal(columns, rows)
                    .map_err(|error| io_failed("no pseudo-terminal could be opened", error))?,
            ),
            Stdin::Pipe | Stdin::Closed => None,
        };
        let terminal_path = tty.as_ref().map(|(_, _, path)| path.as_path());
        let Prepared { mut command, check } =
            self.prepared_bash(args, admitted, workdir, private_tmp, terminal_path)?;
        let output = match tty {
            Some((master, slave, _)) => {
                let copy = |fd: &std::os::fd::OwnedFd| {
                    fd.try_clone()
                        .map_err(|error| io_failed("the terminal could not be shared", error))
                };
                command
                    .stdin(Stdio::from(copy(&slave)?))
                    .stdout(Stdio::from(copy(&slave)?))
                    .stderr(Stdio::from(slave));
                Fd::new(master)
                    .map_err(|error| io_failed("the terminal could not be read", error))?
            }
            None => {
                let (read, write) =
                    pipe().map_err(|error| io_failed("no pipe could be made", error))?;
                let write_copy = write
                    .try_clone()
                    .map_err(|error| io_failed("no pipe could be made", error))?;
                command
                    .stdin(if stdin == Stdin::Pipe {
                        Stdio::piped()
                    } else {
                        Stdio::null()
                    })
                    .stdout(Stdio::from(write_copy))
                    .stderr(Stdio::from(write));
                Fd::new(read).map_err(|error| io_failed("the output could not be read", error))?
            }
        };
        command.process_group(0).kill_on_drop(true);
        self.environment(&mut command, private_tmp);
        let spawned = command.spawn();
        // Our copies of the command's ends go now, or its output would never end.
        drop(command);
        let mut child = spawned.map_err(|error| match check.setup_failure("") {
            Some(why) => unavailable(admitted.mode, &why),
            None => ToolFailure::new(format!("bash could not be started: {error}")),
        })?;
        let output = Arc::new(output);
        let input = match stdin {
            Stdin::Terminal => Input::Terminal(Arc::clone(&output)),
            Stdin::Pipe => child.stdin.take().map_or(Input::Closed, Input::Pipe),
            Stdin::Closed => Input::Closed,
        };
        Ok(Launch {
            child,
            output,
            input,
            check,
            private_tmp: private_tmp.to_path_buf(),
        })
    }

    /// Makes `shell` one of the session's background shells and records that it started.
    async fn adopt(&self, ctx: &ToolContext, shell: &Arc<Shell>) {
        self.shells.add(Arc::clone(shell));
        let started = ShellStarted {
            id: shell.id.clone(),
            command: shell.command.clone(),
            mode: shell.mode.as_str().to_owned(),
            tty: shell.tty,
            pid_namespace: shell.pid_namespace.clone(),
            output: shell.output_file.display().to_string(),
        };
        // A log that refuses it fails the call's own commit too; the shell is in the table
        // either way and ends with the session.
        let _ = ctx.record(started, AppendUrgency::Buffered).await;
    }

    fn room_for_a_shell(&self) -> Result<(), ToolFailure> {
        let limit = self.shells.config().max_live;
        if self.shells.live_count() >= limit {
            return Err(ToolFailure::with_code(
                SHELL_LIMIT,
                format!(
                    "{limit} background shells are running, the session's limit: end one with shell_kill (shell_list shows them) before starting another; nothing ran"
                ),
            ));
        }
        Ok(())
    }

    /// `bash` with `background: true`: starts the shell, returns its id and what it wrote
    /// within the yield window.
    pub(super) async fn run_background(
        &self,
        ctx: &ToolContext,
        args: &BashArgs,
        admitted: &Admitted<'_>,
        workdir: &Path,
    ) -> ToolResult {
        if !self.background_tools {
            return Err(ToolFailure::with_code(
                SHELLS_OFF,
                "background shells are off in this session (its bash was built without the shell tools); run the command in the foreground; nothing ran",
            ));
        }
        self.room_for_a_shell()?;
        let stdin = if args.tty {
            Stdin::Terminal
        } else {
            Stdin::Pipe
        };
        let shell = self.start_shell(args, admitted, workdir, stdin).await?;
        self.adopt(ctx, &shell).await;
        let window = self.shells.config().yield_window;
        let wait = Wait::Settle {
            window,
            quiet: Duration::from_millis(50).min(window),
        };
        let view = observe(
            &shell,
            0,
            wait,
            None,
            self.config.output_cap,
            Some(ctx),
            ctx.cancellation(),
        )
        .await;
        if let Life::NeverRan(why) = &view.life {
            record_end(ctx, &shell, &view.life).await;
            return Err(unavailable(admitted.mode, why));
        }
        shell
            .read_cursor
            .fetch_max(view.cursor, std::sync::atomic::Ordering::AcqRel);
        record_end(ctx, &shell, &view.life).await;
        let mut output = view.output(&shell, json!({"background": true, "tty": shell.tty}));
        note(
            &mut output,
            &format!(
                "[started in the background as {id}: read it with shell_output {{\"id\": \"{id}\"}}, answer it with shell_write, end it with shell_kill]",
                id = shell.id
            ),
        );
        self.finish(&mut output, args, admitted, &view);
        Ok(output)
    }

    /// A foreground command on the shells' machinery: on a terminal, or with
    /// `auto_background_after` on. It is moved to the background once it passes the budget
    /// (when the session has room for a shell), else stopped at its deadline like any.
    pub(super) async fn run_watched(
        &self,
        ctx: &ToolContext,
        args: &BashArgs,
        admitted: &Admitted<'_>,
        workdir: &Path,
        timeout: Duration,
    ) -> ToolResult {
        let began = Instant::now();
        let stdin = if args.tty {
            Stdin::Terminal
        } else {
            Stdin::Closed
        };
        let shell = self.start_shell(args, admitted, workdir, stdin).await?;
        let cap = self.config.output_cap;
        let cancel = ctx.cancellation();
        let budget = self
            .shells
            .config()
            .auto_background_after
            .filter(|budget| self.background_tools && *budget < timeout);
        let mut view = observe(
            &shell,
            0,
            Wait::ForEnd(budget.unwrap_or(timeout)),
            None,
            cap,
            Some(ctx),
            cancel,
        )
        .await;
        if view.life == Life::Running && !cancel.is_cancelled() {
            if let Some(budget) = budget
                && self.room_for_a_shell().is_ok()
            {
                self.adopt(ctx, &shell).await;
                shell
                    .read_cursor
                    .fetch_max(view.cursor, std::sync::atomic::Ordering::AcqRel);
                let mut output = view.output(
                    &shell,
                    json!({"background": true, "moved_to_background": true, "tty": shell.tty}),
                );
                note(
                    &mut output,
                    &format!(
                        "[still running after {} ms: moved to the background as {id} instead of being stopped; read it with shell_output {{\"id\": \"{id}\"}}, end it with shell_kill]",
                        budget.as_millis(),
                        id = shell.id
                    ),
                );
                self.finish(&mut output, args, admitted, &view);
                return Ok(output);
            }
            let rest = timeout.saturating_sub(began.elapsed());
            view = observe(&shell, 0, Wait::ForEnd(rest), None, cap, Some(ctx), cancel).await;
        }
        let stopped = if view.life == Life::Running {
            shell.stop(nix::sys::signal::Signal::SIGTERM);
            let settle = Wait::ForEnd(self.config.grace + Duration::from_secs(5));
            view = observe(
                &shell,
                0,
                settle,
                None,
                cap,
                None,
                &toolrail_tools_core::CancellationToken::new(),
            )
            .await;
            Some(if cancel.is_cancelled() {
                crate::Stop::Cancelled
            } else {
                crate::Stop::TimedOut
            })
        } else {
            None
        };
        if let Life::NeverRan(why) = &view.life {
            return Err(unavailable(admitted.mode, why));
        }
        if stopped == Some(crate::Stop::Cancelled) {
            return Err(ToolFailure::new(format!(
                "cancelled after {} ms; the command's processes were stopped",
                began.elapsed().as_millis()
            )));
        }
        let mut output =
            foreground_report(&shell, &view, stopped.is_some(), timeout, began.elapsed());
        self.finish(&mut output, args, admitted, &view);
        Ok(output)
    }

    /// What every result made from a shell adds: the call's description on its card, the
    /// sandbox it ran in, and what the sandbox refused as the command's own words said (one
    /// stream here).
    fn finish(
        &self,
        output: &mut ToolOutput,
        args: &BashArgs,
        admitted: &Admitted<'_>,
        view: &ShellView,
    ) {
        if let Some(Details::Terminal(terminal)) = output.details.as_mut() {
            terminal.description = Some(args.description.clone());
        }
        self.record_sandbox(output, admitted);
        note_refusals(output, admitted.mode, &view.text);
    }
}

/// Adds a line to the text the model reads.
fn note(output: &mut ToolOutput, line: &str) {
    if let Some(toolrail_tools_core::log::ContentBlock::Text { text }) = output.content.first_mut()
    {
        text.push('\n');
        text.push_str(line);
    }
}

/// A foreground command's report from its shell: the output, how it ended.
fn foreground_report(
    shell: &Shell,
    view: &ShellView,
    timed_out: bool,
    timeout: Duration,
    took: Duration,
) -> ToolOutput {
    use toolrail_tools_core::log::details::Terminal;
    let (_, exit_code, signal) = crate::background::view::state_of(&view.life);
    let mut text = view.text.clone();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if timed_out {
        text.push_str(&format!(
            "[timed out after {} ms; the command's processes were stopped]\n",
            timeout.as_millis()
        ));
    }
    match (exit_code, signal) {
        (Some(code), _) => text.push_str(&format!("[exit code {code}]")),
        (None, Some(signal)) => text.push_str(&format!("[killed by signal {signal}]")),
        (None, None) => text.push_str("[ended without an exit code]"),
    }
    let truncated = view.dropped > 0 || view.left_out > 0;
    if truncated {
        text.push_str(&format!("\n[full output: {}]", shell.output_file.display()));
    }
    let value = json!({
        "exit_code": exit_code,
        "signal": signal,
        "timed_out": timed_out,
        "output_bytes": shell.total(),
        "truncated": truncated,
        "full_output": truncated.then(|| shell.output_file.display().to_string()),
        "tty": shell.tty,
        "took_ms": u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
    });
    let details = Terminal {
        command: shell.command.clone(),
        exit_code: exit_code.map(i64::from),
        signal: signal.map(i64::from),
        timed_out,
        output_tail: Some(text.clone()),
        truncated,
        ..Terminal::default()
    };
    ToolOutput {
        value: Some(value),
        ..ToolOutput::text(text)
    }
    .with_details(details)
}
