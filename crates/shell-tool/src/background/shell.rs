//! One background shell: its process tree, owned by a watcher task that reads its output
//! (into memory and the output file), reaps it, stops it when asked or when its lifetime
//! ends, and says how it ended. Calls on the shell never hold the process: they read what
//! the watcher published, write its input, and send the watcher requests — so stopping a
//! shell takes no lock of anyone else's, and a shell dropped with its session is killed
//! (the watcher owns the child, which is killed on drop, and the namespace with it).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use parking_lot::Mutex;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use toolrail_tools_core::log::event::ShellEnd;

use super::io::Fd;
use super::transcript::{Delta, Transcript};
use crate::process::group_below;
use crate::sandbox::{SandboxMode, SetupCheck};

/// What the shell's stdin is.
pub(crate) enum Input {
    /// Nothing can be written (a foreground command moved to the background, or closed).
    Closed,
    /// A pipe to the command's stdin.
    Pipe(ChildStdin),
    /// The master side of the command's terminal.
    Terminal(Arc<Fd>),
}

/// A spawned shell, before its watcher takes it.
pub(crate) struct Launch {
    pub child: Child,
    pub output: Arc<Fd>,
    pub input: Input,
    pub check: SetupCheck,
    pub private_tmp: PathBuf,
}

/// How a shell ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ending {
    pub end: ShellEnd,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

/// Where a shell stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Life {
    Running,
    Ended(Ending),
    /// Its sandbox could not be made: the command never ran.
    NeverRan(String),
}

/// What the watcher publishes.
struct Published {
    /// The output file stopped at its cap: later output is only in memory, and only what
    /// memory keeps.
    file_cut: AtomicBool,
    transcript: Mutex<Transcript>,
    life: Mutex<Life>,
    changed: watch::Sender<()>,
}

/// How the watcher runs the shell.
pub(crate) struct Watch {
    pub output_file: PathBuf,
    pub spill_cap: u64,
    pub memory_bytes: usize,
    pub lifetime: Duration,
    pub grace: Duration,
}

/// A background shell.
pub(crate) struct Shell {
    pub id: String,
    pub command: String,
    pub mode: SandboxMode,
    pub tty: bool,
    pub output_file: PathBuf,
    pub pid_namespace: Option<String>,
    published: Arc<Published>,
    input: tokio::sync::Mutex<Input>,
    stop: mpsc::UnboundedSender<Signal>,
    /// Where the last read without an explicit cursor stopped.
    pub read_cursor: AtomicU64,
    /// Whether `shell/exited` was recorded.
    pub exit_recorded: AtomicBool,
    /// What writes left on the line being typed (after the last line end): the rules judge
    /// a write together with it, since the shell runs the line only once it ends.
    pub pending_line: Mutex<String>,
    watcher: tokio::task::JoinHandle<()>,
}

impl Drop for Shell {
    fn drop(&mut self) {
        // The watcher owns the child, killed on drop: the whole namespace ends with it.
        self.watcher.abort();
    }
}

/// A shell's identity and how it runs, before it starts.
pub(crate) struct Identity {
    pub id: String,
    pub command: String,
    pub mode: SandboxMode,
    pub tty: bool,
}

impl Shell {
    /// Hands `launch` to a watcher task and returns the shell.
    pub(crate) fn start(identity: Identity, launch: Launch, watch: Watch) -> Self {
        let published = Arc::new(Published {
            file_cut: AtomicBool::new(false),
            transcript: Mutex::new(Transcript::new(watch.memory_bytes)),
            life: Mutex::new(Life::Running),
            changed: watch::Sender::new(()),
        });
        let pid_namespace = launch.child.id().and_then(pid_namespace_below);
        let (stop, requests) = mpsc::unbounded_channel();
        let output_file = watch.output_file.clone();
        let watcher = tokio::spawn(watcher(
            launch.child,
            Arc::clone(&launch.output),
            launch.check,
            launch.private_tmp,
            Arc::clone(&published),
            requests,
            watch,
            identity.tty,
        ));
        Self {
            id: identity.id,
            command: identity.command,
            mode: identity.mode,
            tty: identity.tty,
            output_file,
            pid_namespace,
            published,
            input: tokio::sync::Mutex::new(launch.input),
            stop,
            read_cursor: AtomicU64::new(0),
            exit_recorded: AtomicBool::new(false),
            pending_line: Mutex::new(String::new()),
            watcher,
        }
    }

    pub(crate) fn life(&self) -> Life {
        self.published.life.lock().clone()
    }

    /// Whether the output file stopped at its cap.
    pub(crate) fn file_cut(&self) -> bool {
        self.published
            .file_cut
            .load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn total(&self) -> u64 {
        self.published.transcript.lock().total()
    }

    pub(crate) fn since(&self, cursor: u64) -> Delta {
        self.published.transcript.lock().since(cursor)
    }

    /// A receiver that wakes on new output or the end; made before looking, so nothing
    /// published in between is missed.
    pub(crate) fn subscribe(&self) -> watch::Receiver<()> {
        self.published.changed.subscribe()
    }

    /// Asks the watcher to stop the shell: `signal` to its processes, the grace, then
    /// SIGKILL to its whole tree. A shell that already ended ignores it.
    pub(crate) fn stop(&self, signal: Signal) {
        let _ = self.stop.send(signal);
    }

    /// Whether the shell takes input.
    pub(crate) async fn input_kind(&self) -> InputKind {
        match &*self.input.lock().await {
            Input::Closed => InputKind::Closed,
            Input::Pipe(_) => InputKind::Pipe,
            Input::Terminal(_) => InputKind::Terminal,
        }
    }

    /// Writes `bytes` to the shell's input, then closes a pipe when `close` says so.
    /// Returns the bytes written when it fails part way.
    pub(crate) async fn write(&self, bytes: &[u8], close: bool) -> Result<(), WriteFailure> {
        let mut input = self.input.lock().await;
        let result = match &mut *input {
            Input::Closed => return Err(WriteFailure::Closed),
            Input::Pipe(pipe) => {
                let mut written = 0;
                let mut result = Ok(());
                while let Some(rest) = bytes.get(written..).filter(|rest| !rest.is_empty()) {
                    match pipe.write(rest).await {
                        Ok(0) => {
                            result = Err(WriteFailure::Broken(
                                written,
                                "nothing more was taken".into(),
                            ));
                            break;
                        }
                        Ok(n) => written += n,
                        Err(error) => {
                            result = Err(WriteFailure::Broken(written, error.to_string()));
                            break;
                        }
                    }
                }
                if result.is_ok() {
                    result = pipe
                        .flush()
                        .await
                        .map_err(|error| WriteFailure::Broken(written, error.to_string()));
                }
                result
            }
            Input::Terminal(master) => master
                .write_all(bytes)
                .await
                .map_err(|(written, error)| WriteFailure::Broken(written, error.to_string())),
        };
        if close && result.is_ok() && matches!(*input, Input::Pipe(_)) {
            *input = Input::Closed;
        }
        result
    }
}

impl Life {
    /// How the shell ended, once it did (a shell that never ran ended `never_ran`).
    pub(crate) fn ending(&self) -> Option<Ending> {
        match self {
            Self::Running => None,
            Self::Ended(ending) => Some(*ending),
            Self::NeverRan(_) => Some(Ending {
                end: ShellEnd::NeverRan,
                exit_code: None,
                signal: None,
            }),
        }
    }
}

impl Shell {
    /// Notes what a write sent, for the line being typed.
    pub(crate) fn note_written(&self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let mut pending = self.pending_line.lock();
        match text.rfind(['\n', '\r', '\u{3}', '\u{4}', '\u{15}']) {
            Some(end) => *pending = text.get(end + 1..).unwrap_or_default().to_owned(),
            None => pending.push_str(&text),
        }
    }
}

/// What kind of input a shell takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InputKind {
    Closed,
    Pipe,
    Terminal,
}

/// Why a write did not go through whole.
#[derive(Debug)]
pub(crate) enum WriteFailure {
    /// The input is closed; nothing was written.
    Closed,
    /// The write broke after this many bytes.
    Broken(usize, String),
}

/// The PID namespace of the process below `wrapper` (the namespace's first process).
fn pid_namespace_below(wrapper: u32) -> Option<String> {
    let children =
        std::fs::read_to_string(format!("/proc/{wrapper}/task/{wrapper}/children")).ok()?;
    let init: u32 = children.split_whitespace().next()?.parse().ok()?;
    let link = std::fs::read_link(format!("/proc/{init}/ns/pid")).ok()?;
    Some(link.to_string_lossy().into_owned())
}

/// The watcher: output in, child reaped, stop requests and the lifetime served, the end
/// published (and written beside the output, for a resume that finds it unrecorded).
#[allow(clippy::too_many_arguments)]
async fn watcher(
    mut child: Child,
    output: Arc<Fd>,
    check: SetupCheck,
    private_tmp: PathBuf,
    published: Arc<Published>,
    mut requests: mpsc::UnboundedReceiver<Signal>,
    watch: Watch,
    tty: bool,
) {
    let mut spill = open_spill(&watch.output_file);
    let mut spilled: u64 = 0;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut status = None;
    let mut output_open = true;
    let mut stopping: Option<ShellEnd> = None;
    let mut kill_at: Option<Instant> = None;
    let mut drain_until: Option<Instant> = None;
    let far = Instant::now() + Duration::from_secs(86_400 * 365);
    let lifetime_end = Instant::now()
        .checked_add(watch.lifetime)
        .unwrap_or(far)
        .min(far);
    loop {
        if status.is_some() && !output_open {
            break;
        }
        tokio::select! {
            read = output.read(&mut buffer), if output_open => match read {
                Ok(0) | Err(_) => output_open = false,
                Ok(n) => {
                    let bytes = buffer.get(..n).unwrap_or_default();
                    published.transcript.lock().push(bytes);
                    if let Some(file) = spill.as_mut() {
                        let room = usize::try_from(watch.spill_cap.saturating_sub(spilled)).unwrap_or(usize::MAX);
                        let kept = bytes.get(..bytes.len().min(room)).unwrap_or_default();
                        if kept.len() < bytes.len() {
                            published.file_cut.store(true, std::sync::atomic::Ordering::Release);
                        }
                        // Written through at once (a local append, no buffer of ours): what
                        // was read is in the file even if the runtime is killed the next
                        // moment, for the resume that reports it.
                        if !kept.is_empty() && std::io::Write::write_all(file, kept).is_err() {
                            spill = None;
                        }
                        spilled += kept.len() as u64;
                    }
                    published.changed.send_replace(());
                }
            },
            waited = child.wait(), if status.is_none() => {
                status = Some(waited);
                // Every process of the tree is gone with the namespace; what they wrote is
                // read to the end, within a bound (a descriptor passed out of the tree
                // could hold the pipe open).
                drain_until = Some(Instant::now() + Duration::from_secs(2));
            }
            () = tokio::time::sleep_until(lifetime_end), if stopping.is_none() && status.is_none() => {
                stopping = Some(ShellEnd::LifetimeEnded);
                kill_at = Some(signal_tree(&mut child, &output, tty, Signal::SIGTERM, watch.grace));
            }
            request = requests.recv(), if status.is_none() && stopping.is_none() => {
                if let Some(signal) = request {
                    stopping = Some(ShellEnd::Killed);
                    kill_at = Some(signal_tree(&mut child, &output, tty, signal, watch.grace));
                }
            }
            () = tokio::time::sleep_until(kill_at.unwrap_or(far)), if kill_at.is_some() && status.is_none() => {
                kill_at = None;
                let _ = child.start_kill();
            }
            () = tokio::time::sleep_until(drain_until.unwrap_or(far)), if drain_until.is_some() && output_open => {
                output_open = false;
            }
        }
    }
    drop(spill);
    let text = {
        let transcript = published.transcript.lock();
        let delta = transcript.since(0);
        String::from_utf8_lossy(&delta.before).into_owned()
    };
    let life = match check.setup_failure(&text) {
        Some(why) => Life::NeverRan(why),
        None => {
            use std::os::unix::process::ExitStatusExt;
            let status = status.and_then(Result::ok);
            Life::Ended(Ending {
                end: stopping.unwrap_or(ShellEnd::Exited),
                exit_code: status.and_then(|status| status.code()),
                signal: status.and_then(|status| status.signal()),
            })
        }
    };
    if let Life::Ended(ending) = &life {
        let total = published.transcript.lock().total();
        let record = serde_json::json!({
            "end": ending.end,
            "exit_code": ending.exit_code,
            "signal": ending.signal,
            "output_bytes": total,
        });
        let _ = tokio::fs::write(exit_file(&watch.output_file), record.to_string()).await;
    }
    if std::fs::remove_dir(&private_tmp).is_err() {
        let _ = tokio::fs::remove_dir_all(&private_tmp).await;
    }
    *published.life.lock() = life;
    published.changed.send_replace(());
}

/// Where a shell's end is written beside its output.
pub(crate) fn exit_file(output_file: &std::path::Path) -> PathBuf {
    let mut name = output_file.as_os_str().to_owned();
    name.push(".exit");
    PathBuf::from(name)
}

fn open_spill(path: &std::path::Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    options.open(path).ok()
}

/// Sends `signal` to the shell's processes (SIGKILL ends the whole tree at once) and
/// returns when the rest of the tree is to be killed.
fn signal_tree(
    child: &mut Child,
    output: &Fd,
    tty: bool,
    signal: Signal,
    grace: Duration,
) -> Instant {
    if signal == Signal::SIGKILL {
        let _ = child.start_kill();
        return Instant::now();
    }
    let wrapper = child.id();
    // On a terminal the command leads a session of its own: its foreground job (what a
    // Ctrl-C would reach) and the command's own group. Otherwise the group below the
    // sandbox's wrapper, as a foreground command is stopped.
    let groups = if tty {
        [output.foreground_group(), wrapper.and_then(command_below)]
    } else {
        [wrapper.and_then(group_below), None]
    };
    // Never 0 or 1, never this process's own group: those would reach the runtime.
    let own = nix::unistd::getpgrp();
    for group in groups.into_iter().flatten() {
        if group.as_raw() > 1 && group != own {
            let _ = killpg(group, signal);
        }
    }
    Instant::now() + grace
}

/// The command below the sandbox's wrapper and the namespace's first process.
fn command_below(wrapper: u32) -> Option<nix::unistd::Pid> {
    let first = |parent: u32| -> Option<u32> {
        let children =
            std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    };
    let command = first(first(wrapper)?)?;
    i32::try_from(command).ok().map(nix::unistd::Pid::from_raw)
}
