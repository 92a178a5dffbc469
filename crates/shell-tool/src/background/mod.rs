//! Background shells (DESIGN §7): `bash` with `background: true` starts a command that
//! outlives the call, under exactly the rules of a foreground one (the sandbox, the rules on
//! its command, its own PID namespace, the scrubbed environment, capped output), and four
//! tools work with it: `shell_output` (new output since a cursor, filtered, waiting for
//! more), `shell_write` (input or keys), `shell_kill` and `shell_list`. [`Shells`] is a
//! session's table of them: a limit on how many run at once, a lifetime after which one is
//! stopped, and nothing left running when the session ends — dropped with the session, or
//! killed with the runtime through the sandbox's lifeline.
//!
//! The log records `shell/started` and `shell/exited`; a session resumed after its runtime
//! died reports every shell it had running as ended with the runtime
//! ([`ended_with_runtime`]), once, never as still running.

mod io;
mod keys;
mod resume;
mod shell;
mod tools;
mod transcript;
pub(crate) mod view;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use toolrail_tools_core::Tool;
use toolrail_tools_core::log::Event;
use toolrail_tools_core::log::details::ShellState;
use toolrail_tools_core::log::event::ShellEnd;

pub use keys::Key;
pub use resume::{EndedWithRuntime, ended_with_runtime};
pub use tools::{ShellKillTool, ShellListTool, ShellOutputTool, ShellWriteTool};

pub(crate) use io::{Fd, pipe, terminal};
pub(crate) use shell::{Identity, Input, Launch, Life, Shell, Watch};
pub(crate) use view::{ShellView, observe};

/// How a session's background shells run.
#[derive(Clone, Debug)]
pub struct BackgroundConfig {
    /// Shells that may run at once (default 16); past it `bash` with `background` is
    /// refused, naming the limit.
    pub max_live: usize,
    /// How long a shell may run (default 1 hour); then it is stopped (SIGTERM, the grace,
    /// SIGKILL) and reported as past its lifetime.
    pub lifetime: Duration,
    /// How long `bash` with `background` waits for the command's first output before it
    /// returns (default 1 s; it returns sooner once output has come and gone quiet).
    pub yield_window: Duration,
    /// A foreground command still running after this long is moved to the background
    /// instead of being stopped at its deadline, and its result says so (default off).
    pub auto_background_after: Option<Duration>,
    /// Bytes of each shell's output kept in memory (default 1 MiB: half its start, half its
    /// latest); the whole goes to its output file.
    pub memory_bytes: usize,
    /// The longest `wait_ms` honoured (default 30 s).
    pub max_wait: Duration,
    /// Programs that read commands from their input — shells and REPLs. Input written to
    /// a shell whose command line runs one of them (or a program known only at run time)
    /// is judged by the permission rules as a `bash` command is.
    pub interpreters: Vec<String>,
    /// The size of a shell's pseudo-terminal: columns, rows.
    pub terminal_size: (u16, u16),
}

impl Default for BackgroundConfig {
    fn default() -> Self {
        Self {
            max_live: 16,
            lifetime: Duration::from_secs(3600),
            yield_window: Duration::from_secs(1),
            auto_background_after: None,
            memory_bytes: 1 << 20,
            max_wait: Duration::from_secs(30),
            interpreters: [
                "bash",
                "sh",
                "dash",
                "zsh",
                "fish",
                "ksh",
                "busybox",
                "python",
                "python3",
                "ipython",
                "node",
                "deno",
                "bun",
                "irb",
                "ruby",
                "perl",
                "php",
                "lua",
                "R",
                "ghci",
                "psql",
                "mysql",
                "sqlite3",
                "redis-cli",
                "mongosh",
                "gdb",
                "lldb",
            ]
            .map(str::to_owned)
            .to_vec(),
            terminal_size: (120, 40),
        }
    }
}

/// Programs whose input is a shell command line.
const SHELLS: [&str; 12] = [
    "bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "rbash", "fish", "busybox",
];

/// How the permission rules read what `shell_write` sends to a shell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputReading {
    /// The shell runs a shell: its input is a command line, judged as `bash`'s is.
    CommandLine,
    /// The shell runs a REPL (or a program known only at run time): its input is code that
    /// may run any command, judged as a command known only at run time — every deny rule
    /// over commands refuses it, an ask rule asks, no allow rule alone permits it.
    Code,
    /// Another program: its input is data, judged only by `shell_write`'s own rules.
    Input,
}

/// A session's background shells: live ones, and those that ended (a resumed session's
/// included). Cloning shares the table.
///
/// ```
/// use toolrail_shell_tool::{BackgroundConfig, Shells};
///
/// let shells = Shells::new(BackgroundConfig::default());
/// assert!(shells.list().is_empty());
/// let names: Vec<String> = shells.tools().iter().map(|tool| tool.spec().name().to_owned()).collect();
/// assert_eq!(names, ["shell_output", "shell_write", "shell_kill", "shell_list"]);
/// ```
#[derive(Clone)]
pub struct Shells {
    table: Arc<Table>,
}

impl std::fmt::Debug for Shells {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shells")
            .field("shells", &self.table.entries.lock().len())
            .finish_non_exhaustive()
    }
}

struct Table {
    config: BackgroundConfig,
    entries: Mutex<Vec<Entry>>,
    next: AtomicU64,
}

#[derive(Clone)]
enum Entry {
    Live(Arc<Shell>),
    Past(Arc<PastShell>),
}

/// A shell of an earlier run of the session, as its log left it.
#[derive(Clone, Debug)]
pub(crate) struct PastShell {
    pub id: String,
    pub command: String,
    pub tty: bool,
    pub end: ShellEnd,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub output_file: PathBuf,
    pub output_bytes: u64,
    /// Where the last read without a cursor stopped.
    pub read_cursor: u64,
}

impl PastShell {
    /// How it ended, in words: `exited (exit code 0)`, `was killed (signal 15)`.
    pub(crate) fn describe(&self) -> String {
        view::describe(&Life::Ended(shell::Ending {
            end: self.end,
            exit_code: self.exit_code,
            signal: self.signal,
        }))
    }
}

/// One shell as `shell_list` and embedders see it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ShellSummary {
    /// Its id (`sh1`).
    pub id: String,
    /// Its command line.
    pub command: String,
    /// Where it stands.
    pub state: ShellState,
    /// Its exit code, once it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Whether it runs on a pseudo-terminal.
    pub tty: bool,
    /// Bytes of output it wrote.
    pub output_bytes: u64,
    /// The file holding its whole output.
    pub output_file: PathBuf,
}

impl Shells {
    /// An empty table.
    pub fn new(config: BackgroundConfig) -> Self {
        Self {
            table: Arc::new(Table {
                config,
                entries: Mutex::new(Vec::new()),
                next: AtomicU64::new(1),
            }),
        }
    }

    /// The table of a resumed session: every shell its log names, ended (a shell the log
    /// shows running ended with the runtime that ran it), and new ids after theirs.
    pub fn resumed(config: BackgroundConfig, events: &[Event]) -> Self {
        let shells = Self::new(config);
        let past = resume::past_shells(events);
        let next = past
            .iter()
            .filter_map(|shell| shell.id.strip_prefix("sh")?.parse::<u64>().ok())
            .max()
            .map_or(1, |last| last + 1);
        shells.table.next.store(next, Ordering::Relaxed);
        shells
            .table
            .entries
            .lock()
            .extend(past.into_iter().map(|shell| Entry::Past(Arc::new(shell))));
        shells
    }

    /// The four tools that work with these shells: `shell_output`, `shell_write`,
    /// `shell_kill`, `shell_list`.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        use toolrail_tools_core::Typed;
        vec![
            Arc::new(Typed::new(ShellOutputTool::new(self.clone()))),
            Arc::new(Typed::new(ShellWriteTool::new(self.clone()))),
            Arc::new(Typed::new(ShellKillTool::new(self.clone()))),
            Arc::new(Typed::new(ShellListTool::new(self.clone()))),
        ]
    }

    /// The configuration they run under.
    pub fn config(&self) -> &BackgroundConfig {
        &self.table.config
    }

    /// Every shell, oldest first.
    pub fn list(&self) -> Vec<ShellSummary> {
        let entries = self.table.entries.lock().clone();
        entries.iter().map(Entry::summary).collect()
    }

    /// How input written to shell `id` is judged (`None` when there is no such shell): as
    /// a command line when its command runs a shell, as code that may run anything when it
    /// runs another program of [`BackgroundConfig::interpreters`] or one known only at run
    /// time, and as mere input otherwise.
    pub fn input_reading(&self, id: &str) -> Option<InputReading> {
        let command = match self.entry(id)? {
            Entry::Live(shell) => shell.command.clone(),
            Entry::Past(shell) => shell.command.clone(),
        };
        let line = toolrail_tools_core::command_line::CommandLine::parse(&command);
        let interpreters = &self.table.config.interpreters;
        let counts = |program: &str| interpreters.iter().any(|name| name == program);
        let mut reading = InputReading::Input;
        if line.commands().is_empty() {
            reading = InputReading::Code;
        }
        for simple in line.commands() {
            match simple.program() {
                Some(program) if counts(program) && SHELLS.contains(&program) => {
                    return Some(InputReading::CommandLine);
                }
                Some(program) if !counts(program) => {}
                // An interpreter, or a program known only at run time.
                Some(_) | None => reading = InputReading::Code,
            }
        }
        Some(reading)
    }

    /// What earlier writes left on the line being typed into shell `id` (empty when the
    /// last write ended its line): the rules judge a write together with it.
    pub fn pending_input(&self, id: &str) -> String {
        match self.entry(id) {
            Some(Entry::Live(shell)) => shell.pending_line.lock().clone(),
            Some(Entry::Past(_)) | None => String::new(),
        }
    }

    /// Stops every live shell at once (SIGKILL to each whole tree). Dropping the last
    /// handle to the table does the same.
    pub fn kill_all(&self) {
        let entries = self.table.entries.lock().clone();
        for entry in entries {
            if let Entry::Live(shell) = entry {
                shell.stop(nix::sys::signal::Signal::SIGKILL);
            }
        }
    }

    pub(crate) fn live_count(&self) -> usize {
        self.table
            .entries
            .lock()
            .iter()
            .filter(|entry| matches!(entry, Entry::Live(shell) if shell.life() == Life::Running))
            .count()
    }

    /// The next shell id; ids are never reused in a session.
    pub(crate) fn next_id(&self) -> String {
        format!("sh{}", self.table.next.fetch_add(1, Ordering::Relaxed))
    }

    pub(crate) fn add(&self, shell: Arc<Shell>) {
        self.retire_recorded();
        self.table.entries.lock().push(Entry::Live(shell));
    }

    /// Turns every live shell whose end is recorded into a past one: its input, terminal
    /// and kept output are let go (its output file stays), so shells that came and went
    /// hold no descriptors or memory for the rest of the session.
    pub(crate) fn retire_recorded(&self) {
        let mut entries = self.table.entries.lock();
        for entry in entries.iter_mut() {
            let Entry::Live(shell) = entry else {
                continue;
            };
            if !shell.exit_recorded.load(Ordering::Acquire) {
                continue;
            }
            let Some(ending) = shell.life().ending() else {
                continue;
            };
            *entry = Entry::Past(Arc::new(PastShell {
                id: shell.id.clone(),
                command: shell.command.clone(),
                tty: shell.tty,
                end: ending.end,
                exit_code: ending.exit_code,
                signal: ending.signal,
                output_file: shell.output_file.clone(),
                output_bytes: shell.total(),
                read_cursor: shell.read_cursor.load(Ordering::Acquire),
            }));
        }
    }

    fn entry(&self, id: &str) -> Option<Entry> {
        self.table
            .entries
            .lock()
            .iter()
            .find(|entry| entry.id() == id)
            .cloned()
    }

    /// The shell named `id`, or an error listing the ids there are.
    pub(crate) fn find(&self, id: &str) -> Result<Found, String> {
        match self.entry(id) {
            Some(Entry::Live(shell)) => Ok(Found::Live(shell)),
            Some(Entry::Past(shell)) => Ok(Found::Past(shell)),
            None => {
                let ids: Vec<String> = self.list().into_iter().map(|shell| shell.id).collect();
                Err(if ids.is_empty() {
                    format!(
                        "there is no shell `{id}`: this session has started no background shell (`bash` with `background: true` starts one)"
                    )
                } else {
                    format!(
                        "there is no shell `{id}`; this session's shells are {}",
                        ids.join(", ")
                    )
                })
            }
        }
    }
}

/// A shell looked up by id.
pub(crate) enum Found {
    Live(Arc<Shell>),
    Past(Arc<PastShell>),
}

impl Entry {
    fn id(&self) -> &str {
        match self {
            Self::Live(shell) => &shell.id,
            Self::Past(shell) => &shell.id,
        }
    }

    fn summary(&self) -> ShellSummary {
        match self {
            Self::Live(shell) => {
                let (state, exit_code, signal) = view::state_of(&shell.life());
                ShellSummary {
                    id: shell.id.clone(),
                    command: shell.command.clone(),
                    state,
                    exit_code,
                    signal,
                    tty: shell.tty,
                    output_bytes: shell.total(),
                    output_file: shell.output_file.clone(),
                }
            }
            Self::Past(shell) => ShellSummary {
                id: shell.id.clone(),
                command: shell.command.clone(),
                state: view::state_of_end(shell.end),
                exit_code: shell.exit_code,
                signal: shell.signal,
                tty: shell.tty,
                output_bytes: shell.output_bytes,
                output_file: shell.output_file.clone(),
            },
        }
    }
}
