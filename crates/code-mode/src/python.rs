//! The Python runtime: `python3 -I` as a child process under the shell tool's sandbox
//! (read-only, no network, its own PID namespace), with rlimits for address space and CPU
//! and the shell tool's kill path. The program and its replies travel as JSON lines over the
//! child's stdin and stdout (the protocol is described in `runner.py`, the script it runs).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::ChildStdin;
use tokio::task::JoinSet;
use toolrail_shell_tool::{ConfinedCommand, Ended, ResourceLimits, SandboxTier, Stop, TierCheck};
use toolrail_tools_core::CancellationToken;

use crate::bindings::Bindings;
use crate::run::{FailureKind, Limits, Output, RunOutcome};

const RUNNER: &str = include_str!("runner.py");

/// One message line may hold a tool call's arguments (a file to write, say): this bounds
/// what a program can make the host buffer.
const MAX_LINE: usize = 16 << 20;

/// Binding calls a program may have waiting for replies before it is made to wait.
const MAX_AWAITING: usize = 256;

/// Bytes of the interpreter's own stderr kept for a failure message.
const STDERR_KEPT: usize = 4 << 10;

/// How a session runs Python programs.
#[derive(Clone, Debug)]
pub struct PythonRuntime {
    /// The interpreter, found on `PATH` if not a path. By default the system's
    /// (`/usr/bin/python3`) where there is one: a version manager's shim on `PATH` (pyenv's
    /// is a shell script) can cost ten times the interpreter's own start.
    pub python: OsString,
    /// How the interpreter is confined; checked before each run, and a run it cannot
    /// confine does not start.
    pub tier: SandboxTier,
    /// Readable (as is everything outside), never writable; the first is the working
    /// folder.
    pub workspace: Vec<PathBuf>,
    /// Where each run gets its private temp folder, its one writable place.
    pub scratch: PathBuf,
    /// `RLIMIT_AS`: the interpreter needs some 30 MiB of it before the program starts.
    pub address_space_bytes: u64,
    /// Between SIGTERM and SIGKILL when a run is stopped.
    pub grace: Duration,
    tier_usable: Arc<TierCheck>,
}

impl PythonRuntime {
    /// Python for a session whose workspace folders are `workspace` (the first is the
    /// working folder), with each run's temp folder under `scratch`: the system's
    /// interpreter, the default sandbox tier, 512 MiB of address space and a 500 ms grace.
    pub fn new(workspace: Vec<PathBuf>, scratch: impl Into<PathBuf>) -> Self {
        Self {
            python: default_python(),
            tier: SandboxTier::default(),
            workspace,
            scratch: scratch.into(),
            address_space_bytes: 512 << 20,
            grace: Duration::from_millis(500),
            tier_usable: Arc::new(TierCheck::new()),
        }
    }

    fn command(&self, private_tmp: PathBuf, limits: &Limits) -> ConfinedCommand {
        let workdir = self
            .workspace
            .first()
            .cloned()
            .unwrap_or_else(|| private_tmp.clone());
        let mut command = ConfinedCommand::new(self.python.clone(), &private_tmp, workdir);
        command.args = ["-I", "-c", RUNNER].map(OsString::from).to_vec();
        command.tier = self.tier.clone();
        command.roots = self.workspace.clone();
        command.limits = ResourceLimits {
            address_space: Some(self.address_space_bytes),
            cpu_seconds: Some(cpu_seconds(limits)),
            ..ResourceLimits::default()
        };
        if let Some(path) = std::env::var_os("PATH") {
            command.env.push(("PATH".into(), path));
        }
        for (name, value) in [("LANG", "C.UTF-8"), ("PYTHONUTF8", "1")] {
            command.env.push((name.into(), value.into()));
        }
        for name in ["HOME", "TMPDIR"] {
            command.env.push((name.into(), private_tmp.clone().into()));
        }
        command
    }
}

/// A backstop behind the wall-time kill: the CPU time every core could spend in the wall
/// time (threads that leave the interpreter's lock run in parallel).
fn cpu_seconds(limits: &Limits) -> u64 {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    limits
        .wall
        .as_secs()
        .saturating_add(1)
        .saturating_mul(u64::try_from(cores).unwrap_or(1))
}

fn default_python() -> OsString {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|path| std::path::Path::new(path).is_file())
        .unwrap_or("python3")
        .into()
}

/// One program to run, with all it runs with.
pub(crate) struct PythonRun<'a> {
    /// The program's source.
    pub program: &'a str,
    /// Python source defining the binding functions.
    pub sdk: String,
    /// What the binding functions call.
    pub bindings: &'a Arc<Bindings>,
    pub limits: &'a Limits,
    /// The caller's cancel: firing it stops the run.
    pub cancel: &'a CancellationToken,
    pub runtime: &'a PythonRuntime,
}

impl PythonRun<'_> {
    /// Runs the program with its SDK in a fresh interpreter; `run_id` names its temp
    /// folder.
    pub(crate) async fn run(self, run_id: &str) -> RunOutcome {
        // Unique to this run even where call ids repeat across sessions sharing `scratch`.
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let scratch = &self.runtime.scratch;
        let private_tmp = scratch.join(format!(
            "{run_id}.{}.{}.py.tmp",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        ));
        if let Err(error) =
            std::fs::create_dir_all(scratch).and_then(|()| std::fs::create_dir(&private_tmp))
        {
            return broke(format!(
                "the temp folder {} could not be made: {error}",
                private_tmp.display()
            ));
        }
        // Removed however the run ends, the caller's future dropped included.
        let folder = TempFolder(private_tmp.clone());
        let outcome = run_in(self, private_tmp).await;
        drop(folder);
        outcome
    }
}

/// A run's temp folder, removed on drop; folders the program made unreadable are opened up
/// first, so none of it stays behind.
struct TempFolder(PathBuf);

impl Drop for TempFolder {
    fn drop(&mut self) {
        if std::fs::remove_dir_all(&self.0).is_ok() {
            return;
        }
        open_up(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open_up(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                open_up(&entry.path());
            }
        }
    }
}

async fn run_in(job: PythonRun<'_>, private_tmp: PathBuf) -> RunOutcome {
    let PythonRun {
        program,
        sdk,
        bindings,
        limits,
        cancel,
        runtime,
    } = job;
    let command = runtime.command(private_tmp, limits);
    if let Err(why) = runtime.tier_usable.ensure(&command.tier).await {
        return broke(format!(
            "Python cannot be confined here, so it did not run: {why}"
        ));
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => return broke(format!("Python could not be started: {error}")),
    };
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.take_stdin(), child.take_stdout(), child.take_stderr())
    else {
        return broke("the Python process's pipes could not be taken".to_owned());
    };
    let first = json!({"program": program, "sdk": sdk}).to_string();
    let mut output = Output::new(limits.output_bytes);
    // Fired by the run itself when the program must go (a broken protocol, or a process
    // that lingers after its last word); the caller's cancel fires it too.
    let stop = cancel.child_token();
    let said = async {
        if write_line(&mut stdin, &first).await.is_err() {
            return Said::Gone;
        }
        converse(stdout, stdin, bindings, &mut output).await
    };
    let waiting = child.wait_or_stop(limits.wall, runtime.grace, &stop);
    let both = async {
        tokio::pin!(said, waiting);
        let (mut last_word, mut ended) = (None, None);
        // Once the program has said its last word it ends by itself within a moment, or
        // is made to.
        let linger = tokio::time::sleep(Duration::MAX);
        tokio::pin!(linger);
        let mut lingering = false;
        while last_word.is_none() || ended.is_none() {
            tokio::select! {
                word = &mut said, if last_word.is_none() => {
                    match word {
                        Said::Eof | Said::Gone => {}
                        Said::Broken(_) => stop.cancel(),
                        Said::Done(_) | Said::Failed(..) => {
                            linger.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(1));
                            lingering = true;
                        }
                    }
                    last_word = Some(word);
                }
                end = &mut waiting, if ended.is_none() => ended = Some(end),
                () = &mut linger, if lingering => {
                    lingering = false;
                    stop.cancel();
                }
            }
        }
        (last_word, ended)
    };
    let ((said, ended), stderr) = tokio::join!(both, tail(stderr, STDERR_KEPT));
    let (Some(said), Some(ended)) = (said, ended) else {
        return broke("the Python run ended in an impossible state".to_owned());
    };
    let output = output.text().to_owned();
    if let Some(why) = child.sandbox_failure(&stderr) {
        return RunOutcome::failed(
            FailureKind::Runtime,
            format!("the sandbox could not be made, so the program did not run ({why})"),
            output,
        );
    }
    let ended = match ended {
        Ok(ended) => ended,
        Err(error) => {
            return RunOutcome::failed(
                FailureKind::Runtime,
                format!("waiting for Python failed: {error}"),
                output,
            );
        }
    };
    outcome(said, ended, &stderr, limits, cancel, output)
}

/// What the program said last.
enum Said {
    Done(Value),
    Failed(FailureKind, String),
    /// It ended without a word (killed, crashed, or never started).
    Eof,
    /// It broke the protocol.
    Broken(String),
    /// Its stdin closed under a write: it ended, or is ending; how is told by its end.
    Gone,
}

/// Reads the program's messages and answers its calls until it is done.
async fn converse(
    stdout: impl AsyncRead + Unpin,
    mut stdin: ChildStdin,
    bindings: &Arc<Bindings>,
    output: &mut Output,
) -> Said {
    let mut lines = BufReader::new(stdout);
    let mut line = Vec::new();
    let mut replies: JoinSet<(u64, String)> = JoinSet::new();
    loop {
        tokio::select! {
            // Backpressure: past this many calls awaiting their replies, the program's
            // next messages wait, and so does the program.
            read = read_line(&mut lines, &mut line), if replies.len() < MAX_AWAITING => {
                match read {
                    Ok(false) => return Said::Eof,
                    Ok(true) => {}
                    Err(why) => return Said::Broken(why),
                }
                let said = message(&line);
                line.clear();
                match said {
                    Ok(Message::Print(text)) => output.push(&text),
                    Ok(Message::Call { name, id, arguments }) => {
                        let reply = bindings.submit(name, arguments);
                        replies.spawn(async move { (id, reply.await) });
                    }
                    Ok(Message::Done(value)) => return Said::Done(value),
                    Ok(Message::Failed(kind, text)) => return Said::Failed(kind, text),
                    Err(why) => return Said::Broken(why),
                }
            }
            Some(joined) = replies.join_next() => {
                let Ok((id, reply)) = joined else {
                    return Said::Broken("a binding call's reply was lost".to_owned());
                };
                // The reply is JSON text already; it is embedded as it is.
                let line = format!("{{\"id\":{id},\"reply\":{reply}}}");
                if write_line(&mut stdin, &line).await.is_err() {
                    return Said::Gone;
                }
            }
        }
    }
}

/// One message from the program.
enum Message {
    Print(String),
    Call {
        name: String,
        id: u64,
        /// JSON text.
        arguments: String,
    },
    Done(Value),
    Failed(FailureKind, String),
}

fn message(line: &[u8]) -> Result<Message, String> {
    let message: Value =
        serde_json::from_slice(line).map_err(|error| format!("an unreadable message ({error})"))?;
    let Value::Object(mut message) = message else {
        return Err("a message that is not an object".to_owned());
    };
    if let Some(Value::String(text)) = message.remove("print") {
        return Ok(Message::Print(text));
    }
    if let Some(Value::String(name)) = message.remove("call") {
        let id = message
            .get("id")
            .and_then(Value::as_u64)
            .ok_or("a call without an id")?;
        let arguments = message
            .get("args")
            .map_or_else(|| "{}".to_owned(), Value::to_string);
        return Ok(Message::Call {
            name,
            id,
            arguments,
        });
    }
    if let Some(value) = message.remove("done") {
        return Ok(Message::Done(value));
    }
    if let Some(failed) = message.get("failed") {
        let kind = match failed.get("kind").and_then(Value::as_str) {
            Some("syntax") => FailureKind::Syntax,
            Some("memory") => FailureKind::Memory,
            Some("runtime") => FailureKind::Runtime,
            Some(_) | None => FailureKind::Exception,
        };
        let text = failed
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return Ok(Message::Failed(kind, text.trim_end().to_owned()));
    }
    Err("a message of no known kind".to_owned())
}

/// Reads until `line` holds a whole line (its newline dropped): `Ok(false)` at the end of
/// the stream. Safe to drop midway in a `select!`: what was read stays in `line`, and the
/// next call goes on from there; the caller clears `line` once it has used it.
async fn read_line(
    reader: &mut (impl tokio::io::AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
) -> Result<bool, String> {
    let room = u64::try_from(MAX_LINE.saturating_sub(line.len())).unwrap_or(u64::MAX);
    reader
        .take(room)
        .read_until(b'\n', line)
        .await
        .map_err(|error| format!("the program's messages could not be read: {error}"))?;
    if line.last() == Some(&b'\n') {
        line.pop();
        return Ok(true);
    }
    if line.len() >= MAX_LINE {
        return Err(format!("a message over {MAX_LINE} bytes"));
    }
    // The end of the stream, perhaps inside a message: the process died mid-word.
    Ok(false)
}

async fn write_line(stdin: &mut ChildStdin, line: &str) -> std::io::Result<()> {
    stdin.write_all(line.as_bytes()).await?;
    stdin.write_all(b"\n").await?;
    stdin.flush().await
}

/// The last `keep` bytes of a stream, read to its end.
async fn tail(stream: impl AsyncRead + Unpin, keep: usize) -> String {
    let mut stream = stream;
    let mut kept: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(read) = stream.read(&mut chunk).await {
        if read == 0 {
            break;
        }
        kept.extend_from_slice(chunk.get(..read).unwrap_or_default());
        if kept.len() > keep * 2 {
            kept.drain(..kept.len() - keep);
        }
    }
    if kept.len() > keep {
        kept.drain(..kept.len() - keep);
    }
    String::from_utf8_lossy(&kept).trim_end().to_owned()
}

fn outcome(
    said: Said,
    ended: Ended,
    stderr: &str,
    limits: &Limits,
    cancel: &CancellationToken,
    output: String,
) -> RunOutcome {
    use std::os::unix::process::ExitStatusExt;
    // bubblewrap reports a command killed by signal N as exit code 128 + N.
    let signal = ended.status.signal().or_else(|| {
        ended
            .status
            .code()
            .filter(|code| (129..160).contains(code))
            .map(|code| code - 128)
    });
    // The program's last word wins over how its process then ended; then the caller's
    // cancel, the wall time, a sandbox that could not be had, a broken protocol, and last
    // the bare facts of the end.
    match said {
        Said::Done(value) => {
            let size = value.to_string().len();
            if size > limits.output_bytes {
                return RunOutcome::failed(
                    FailureKind::Output,
                    format!(
                        "the program returned {size} bytes, over the {} bytes it may return; return less",
                        limits.output_bytes
                    ),
                    output,
                );
            }
            return RunOutcome {
                value: Some(value),
                output,
                failure: None,
            };
        }
        Said::Failed(kind, message) => return RunOutcome::failed(kind, message, output),
        Said::Eof | Said::Gone | Said::Broken(_) => {}
    }
    if ended.stop == Some(Stop::Cancelled) && cancel.is_cancelled() {
        return RunOutcome::failed(
            FailureKind::Cancelled,
            "the call was cancelled".to_owned(),
            output,
        );
    }
    if ended.stop == Some(Stop::TimedOut) {
        return RunOutcome::failed(
            FailureKind::Timeout,
            format!(
                "the program ran past its {} ms wall time",
                limits.wall.as_millis()
            ),
            output,
        );
    }
    if let Said::Broken(why) = said {
        return RunOutcome::failed(
            FailureKind::Runtime,
            format!("the Python process broke the protocol: {why}"),
            output,
        );
    }
    if signal == Some(libc::SIGXCPU) {
        return RunOutcome::failed(
            FailureKind::Timeout,
            format!(
                "the program used up its CPU time limit ({} s of CPU)",
                cpu_seconds(limits)
            ),
            output,
        );
    }
    // Only the protocol and the signal tell a kind; what the process wrote to stderr is
    // shown, never trusted.
    let how = match (ended.status.code(), signal) {
        (_, Some(signal)) => {
            format!("the Python process ended without a result (signal {signal})")
        }
        (Some(code), None) => {
            format!("the Python process ended without a result (exit code {code})")
        }
        (None, None) => "the Python process ended without a result".to_owned(),
    };
    let message = if stderr.is_empty() {
        how
    } else {
        format!("{how}:\n{stderr}")
    };
    RunOutcome::failed(FailureKind::Runtime, message, output)
}

fn broke(message: String) -> RunOutcome {
    RunOutcome::failed(FailureKind::Runtime, message, String::new())
}
