//! One `bash` call, step by step: `admit` (the policy's mode, what an approval granted, a
//! tier that can contain the command), `workdir`, `execute` (confine, spawn, capture, wait),
//! and `outcome` (the report, what the sandbox said, limits hit, refusals). Each step fails
//! with what the model reads; the caller removes the call's temp folder however it ends.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;
use toolrail_tools_core::log::ContentBlock;
use toolrail_tools_core::log::details::{Details, SandboxRefusals, Terminal};
use toolrail_tools_core::{ToolContext, ToolFailure, ToolOutput, ToolResult};

use super::{BashArgs, BashTool, OUTSIDE_WORKSPACE, SANDBOX_NOT_GRANTED, SANDBOX_UNAVAILABLE};
use crate::limits_hit::limits_hit;
use crate::mode_rules::{ModeRule, rule_for};
use crate::output::{Captured, capture};
use crate::process::{Ended, Stop, wait_or_stop};
use crate::sandbox::{Confinement, Escalation, Prepared, SandboxMode, SetupCheck};

/// A command the policy let run: the rule that matched it, its sandbox, and what an
/// approval granted beyond the default.
pub(super) struct Admitted<'a> {
    pub(super) rule: Option<&'a ModeRule>,
    pub(super) mode: SandboxMode,
    pub(super) network: bool,
    pub(super) granted: Vec<Escalation>,
}

/// Where and for how long the call's command runs, and the name of its files.
#[derive(Clone, Copy)]
pub(super) struct Place<'a> {
    pub(super) workdir: &'a Path,
    pub(super) private_tmp: &'a Path,
    pub(super) id: &'a str,
    pub(super) timeout: Duration,
}

/// A command whose processes ended: what they wrote, how they ended, and the channel that
/// says whether their sandbox stood.
pub(super) struct Ran {
    out: Captured,
    out_spill: Option<PathBuf>,
    err: Captured,
    err_spill: Option<PathBuf>,
    ended: Ended,
    took: Duration,
    setup: SetupCheck,
}

impl BashTool {
    /// The sandbox the command gets: the policy's mode for it, widened only by what an
    /// approval granted, on a tier that can contain it here.
    pub(super) async fn admit<'a>(
        &'a self,
        ctx: &ToolContext,
        args: &BashArgs,
    ) -> Result<Admitted<'a>, ToolFailure> {
        // The policy's rule is matched once; the mode, the escalation and the record use it.
        let rule = rule_for(&self.config.mode_rules, &args.command);
        let base = rule.map_or(self.config.mode, ModeRule::mode);
        let granted = self.beyond_default(args, base);
        if !granted.is_empty() && !ctx.approval_granted() {
            return Err(ToolFailure::with_code(
                SANDBOX_NOT_GRANTED,
                "the command asks for more than its sandbox allows and no approval granted it; nothing ran",
            ));
        }
        let (mode, network) = self.effective(base, &granted);
        if let Err(why) = self.tier_usable.ensure(&self.config.tier).await {
            return Err(ToolFailure::with_code(
                SANDBOX_UNAVAILABLE,
                format!(
                    "the {} tier cannot contain the command here ({why}): its processes could outlive it or escape its sandbox, so it did not run",
                    self.config.tier.as_str()
                ),
            ));
        }
        Ok(Admitted {
            rule,
            mode,
            network,
            granted,
        })
    }

    /// Where the command runs: its `workdir` confined to the workspace, or the first root.
    pub(super) fn workdir(&self, args: &BashArgs) -> Result<PathBuf, ToolFailure> {
        match &args.workdir {
            Some(path) => self.config.roots.confine(path).map_err(|real| {
                ToolFailure::with_code(
                    OUTSIDE_WORKSPACE,
                    format!(
                        "workdir `{path}` leads to `{}`, outside the workspace; nothing ran",
                        real.display()
                    ),
                )
            }),
            None => self
                .config
                .roots
                .as_slice()
                .first()
                .cloned()
                .ok_or_else(|| ToolFailure::new("the workspace has no root to run in")),
        }
    }

    /// Confines, spawns and waits for the command, capturing its output (cut to the cap,
    /// the rest spilled beside the session), stopping it at its deadline or on cancel.
    pub(super) async fn execute(
        &self,
        ctx: &ToolContext,
        args: &BashArgs,
        admitted: &Admitted<'_>,
        place: &Place<'_>,
    ) -> Result<Ran, ToolFailure> {
        let Place {
            workdir,
            private_tmp,
            id,
            timeout,
        } = *place;
        let Prepared { mut command, check } =
            self.prepared_bash(args, admitted, workdir, private_tmp, None)?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        self.environment(&mut command, private_tmp);
        let started = Instant::now();
        let mut child = command
            .spawn()
            .map_err(|error| match check.setup_failure("") {
                Some(why) => unavailable(admitted.mode, &why),
                None => ToolFailure::new(format!("bash could not be started: {error}")),
            })?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(ToolFailure::new(
                "the command's output could not be captured",
            ));
        };
        let out_file = self.config.spill_dir.join(format!("{id}.stdout"));
        let err_file = self.config.spill_dir.join(format!("{id}.stderr"));
        let (cap, spill_cap) = (self.config.output_cap, self.config.spill_cap);
        let reading = async {
            tokio::join!(
                capture(stdout, cap, &out_file, spill_cap),
                capture(stderr, cap, &err_file, spill_cap)
            )
        };
        let waiting = wait_or_stop(&mut child, timeout, self.config.grace, ctx.cancellation());
        let (((out, out_spill), (err, err_spill)), ended) = tokio::join!(reading, waiting);
        let ended =
            ended.map_err(|error| ToolFailure::new(format!("waiting for bash failed: {error}")))?;
        Ok(Ran {
            out,
            out_spill,
            err,
            err_spill,
            ended,
            took: started.elapsed(),
            setup: check,
        })
    }

    /// `bash -c <command>` confined as `admitted` says, in `workdir`, with `private_tmp` its
    /// writable folder and `terminal` (a pty's path) its controlling terminal if given: what
    /// a foreground call and a background shell both spawn.
    pub(super) fn prepared_bash(
        &self,
        args: &BashArgs,
        admitted: &Admitted<'_>,
        workdir: &Path,
        private_tmp: &Path,
        terminal: Option<&Path>,
    ) -> Result<Prepared, ToolFailure> {
        Confinement {
            mode: admitted.mode,
            network: admitted.network,
            tier: &self.config.tier,
            roots: self.config.roots.as_slice(),
            protected: &self.config.protected,
            spill_dir: &self.config.spill_dir,
            private_tmp,
            workdir,
            limits: self.config.limits,
            walk_cache: Some(&self.walk_cache),
            terminal,
        }
        .prepare(["bash", "-c", &args.command].map(OsString::from))
        .map_err(|why| unavailable(admitted.mode, &why))
    }

    /// The command's whole environment: the allowed variables of this process, the ones
    /// that keep programs from waiting on a person (no pager, no colour, a dumb terminal),
    /// the call's temp folder, and the embedder's own.
    pub(super) fn environment(&self, command: &mut tokio::process::Command, private_tmp: &Path) {
        command.env_clear();
        for name in &self.config.env_allow {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
            .env("TERM", "dumb")
            .env("NO_COLOR", "1")
            .env("PAGER", "cat")
            .env("GIT_PAGER", "cat")
            .env("SHELL", "/bin/bash")
            .env("TMPDIR", private_tmp);
        for (name, value) in &self.config.env_extra {
            command.env(name, value);
        }
    }

    /// What the model, the program and the card read of a command that ran.
    pub(super) fn outcome(
        &self,
        args: &BashArgs,
        admitted: &Admitted<'_>,
        ran: Ran,
        timeout: Duration,
    ) -> ToolResult {
        let stderr_text = ran.err.shown();
        // Whether the sandbox stood is read from its status channel, never from what the
        // command printed or how it exited: a command cannot forge it.
        if let Some(why) = ran.setup.setup_failure(&stderr_text) {
            return Err(unavailable(admitted.mode, &why));
        }
        if matches!(ran.ended.stop, Some(Stop::Cancelled)) {
            return Err(ToolFailure::new(format!(
                "cancelled after {} ms; the command's processes were stopped",
                ran.took.as_millis()
            )));
        }
        let mut output = report(args, &ran, timeout);
        self.record_sandbox(&mut output, admitted);
        self.note_limits(&mut output, &ran, &stderr_text);
        note_refusals(&mut output, admitted.mode, &stderr_text);
        Ok(output)
    }

    /// The sandbox the command ran in, in the value programs read.
    pub(super) fn record_sandbox(&self, output: &mut ToolOutput, admitted: &Admitted<'_>) {
        set_field(
            output,
            "sandbox",
            json!({
                "mode": admitted.mode.as_str(),
                "network": admitted.network,
                "tier": self.config.tier.as_str(),
                "escalated": admitted.granted.iter().map(|granted| granted.as_str()).collect::<Vec<_>>(),
                "rule": admitted.rule.map(ModeRule::command),
                "limits": self.config.limits.to_json(),
            }),
        );
    }

    /// The resource limits the command ran into: in the value, and a line each for the model.
    fn note_limits(&self, output: &mut ToolOutput, ran: &Ran, stderr_text: &str) {
        let hits = limits_hit(
            ran.ended.status,
            stderr_text,
            &self.config.limits,
            ran.out.spill_cut || ran.err.spill_cut,
        );
        if hits.is_empty() {
            return;
        }
        set_field(
            output,
            "limits_hit",
            json!(hits.iter().map(|hit| hit.as_str()).collect::<Vec<_>>()),
        );
        if let Some(ContentBlock::Text { text }) = output.content.first_mut() {
            for hit in &hits {
                text.push('\n');
                text.push_str(&hit.note(&self.config.limits, self.config.spill_cap));
            }
        }
    }
}

/// Sets `key` in the result's value, when the value is an object.
fn set_field(output: &mut ToolOutput, key: &str, field: serde_json::Value) {
    if let Some(value) = output
        .value
        .as_mut()
        .and_then(|value| value.as_object_mut())
    {
        value.insert(key.to_owned(), field);
    }
}

/// The sandbox could not be made: nothing ran.
pub(super) fn unavailable(mode: SandboxMode, why: &str) -> ToolFailure {
    ToolFailure::with_code(
        SANDBOX_UNAVAILABLE,
        format!(
            "the `{}` sandbox could not be made ({why}); the command did not run",
            mode.as_str()
        ),
    )
}

/// What the sandbox refused, as the command's own words say it: on the card, in the
/// summary's count, and in a line the model reads.
pub(super) fn note_refusals(output: &mut ToolOutput, mode: SandboxMode, stderr_text: &str) {
    if mode == SandboxMode::FullAccess {
        return;
    }
    let refused: Vec<&str> = stderr_text
        .lines()
        .filter(|line| REFUSAL_SIGNS.iter().any(|sign| line.contains(sign)))
        .take(REFUSAL_LINES)
        .collect();
    if refused.is_empty() {
        return;
    }
    if let Some(sandbox) = output
        .value
        .as_mut()
        .and_then(|value| value.get_mut("sandbox"))
        .and_then(|sandbox| sandbox.as_object_mut())
    {
        sandbox.insert("refused".to_owned(), json!(refused));
    }
    if let Some(Details::Terminal(terminal)) = output.details.as_mut() {
        terminal.sandbox_refused = Some(SandboxRefusals {
            mode: mode.as_str().to_owned(),
            lines: refused.iter().map(|line| (*line).to_owned()).collect(),
        });
    }
    if let Some(ContentBlock::Text { text }) = output.content.first_mut() {
        text.push_str(&format!(
            "\n[sandbox: some operations were refused ({} mode)]",
            mode.as_str()
        ));
    }
}

/// What a command says on stderr when the sandbox refused it something.
const REFUSAL_SIGNS: [&str; 3] = [
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
];
/// Lines of refusals kept for the card.
const REFUSAL_LINES: usize = 5;

/// A name for this call's files no earlier run used: the call id (ids repeat across
/// resumed sessions) with this process and a counter.
pub(super) fn unique_name(call_id: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{}.{}-{n}",
        call_id.replace(['/', ':'], "_"),
        std::process::id()
    )
}

/// Usually empty: one `rmdir`; what the command left there goes on the blocking pool.
pub(super) async fn remove_private_tmp(private_tmp: &std::path::Path) {
    if std::fs::remove_dir(private_tmp).is_err() {
        let _ = tokio::fs::remove_dir_all(private_tmp).await;
    }
}

/// The report of a command that ran: its output (stderr after stdout), how it ended, where
/// the whole output went when it was cut; the value programs read; the terminal details.
fn report(args: &BashArgs, ran: &Ran, timeout: Duration) -> ToolOutput {
    use std::os::unix::process::ExitStatusExt;
    let (out, err, ended, took) = (&ran.out, &ran.err, &ran.ended, ran.took);
    let truncated = out.omitted() > 0 || err.omitted() > 0;
    // Only a stream that was cut has (and needs) a spill file.
    let spilled = |captured: &Captured, spill: &Option<PathBuf>| {
        (captured.omitted() > 0).then(|| {
            spill.as_ref().map_or_else(
                || "(could not be saved)".to_owned(),
                |path| path.display().to_string(),
            )
        })
    };
    let spills = if truncated {
        json!({"stdout": spilled(out, &ran.out_spill), "stderr": spilled(err, &ran.err_spill)})
    } else {
        json!(null)
    };
    let exit_code = ended.status.code();
    let signal = ended.status.signal();
    let mut text = out.shown();
    if err.total > 0 {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("[stderr]\n");
        text.push_str(&err.shown());
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if ended.stop == Some(Stop::TimedOut) {
        text.push_str(&format!(
            "[timed out after {} ms; the command's processes were stopped]\n",
            timeout.as_millis()
        ));
    }
    match (exit_code, signal) {
        (Some(code), _) => text.push_str(&format!("[exit code {code}]")),
        (None, Some(signal)) => text.push_str(&format!(
            "[killed by signal {signal} ({})]",
            Signal::try_from(signal).map_or("unknown", Signal::as_str)
        )),
        (None, None) => text.push_str("[ended without an exit code]"),
    }
    let saved: Vec<String> = ["stdout", "stderr"]
        .into_iter()
        .filter_map(|stream| {
            let path = spills.get(stream)?.as_str()?;
            Some(format!("{stream} in {path}"))
        })
        .collect();
    if !saved.is_empty() {
        text.push_str(&format!("\n[full output: {}]", saved.join("; ")));
    }
    let value = json!({
        "exit_code": exit_code,
        "signal": signal,
        "timed_out": ended.stop == Some(Stop::TimedOut),
        "stdout_bytes": out.total,
        "stderr_bytes": err.total,
        "truncated": truncated,
        "full_output": spills,
        "took_ms": u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
    });
    let details = Terminal {
        command: args.command.clone(),
        description: Some(args.description.clone()),
        exit_code: exit_code.map(i64::from),
        signal: signal.map(i64::from),
        timed_out: ended.stop == Some(Stop::TimedOut),
        output_tail: Some(text.clone()),
        truncated,
        sandbox_refused: None,
        shell: None,
    };
    ToolOutput {
        value: Some(value),
        ..ToolOutput::text(text)
    }
    .with_details(details)
}
