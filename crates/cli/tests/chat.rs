//! `toolrail chat` on a real terminal (tmux), against a local OpenAI-compatible server that
//! streams its words in small deltas: the words reach the screen while the answer is still
//! streaming; a parallel read, a `write` and an `rm` are asked for, and each approval is
//! shown whole — tool, subject, reason, and the diff for the write — with nothing printed
//! over it; Ctrl-C during a slow call gives that call an honest outcome and the next prompt
//! works. The final screen is saved in the test's output folder.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use toolrail_test_support::http::{Answer, call_chunk, finish_chunk, scripted_server, text_chunk};

/// tmux on the PATH; CI must have it (`.ci/run` installs it).
fn tmux_present() -> bool {
    let present = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|output| output.status.success());
    if !present {
        assert!(
            std::env::var_os("CI").is_none(),
            "tmux is not installed; CI must have it (.ci/run installs it)"
        );
        eprintln!("skipped: tmux is not installed");
    }
    present
}

/// A tmux server of the test's own, with one window running a command.
struct Terminal {
    socket: String,
}

impl Terminal {
    fn start(command: &str) -> Self {
        let socket = format!("toolrail-chat-{}", std::process::id());
        let status = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "chat",
            ])
            .args(["-x", "120", "-y", "60", command])
            .status()
            .unwrap();
        assert!(status.success());
        let terminal = Self { socket };
        terminal.tmux(&["set-option", "-t", "chat", "remain-on-exit", "on"]);
        terminal
    }

    fn tmux(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// What the window shows now.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "chat"])
    }

    /// Everything the window showed, its scrollback included.
    fn history(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "chat", "-S", "-5000"])
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "chat"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    fn type_line(&self, text: &str) {
        self.keys(&["-l", text]);
        self.keys(&["Enter"]);
    }

    /// Waits (up to 30 s) until the whole history satisfies `ready`; the screen then.
    fn wait(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let history = self.history();
            if ready(&history) {
                return self.screen();
            }
            assert!(
                Instant::now() < deadline,
                "waited 30 s for {what}; the terminal shows:\n{history}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for the `count`-th prompt.
    fn wait_prompts(&self, count: usize) -> String {
        self.wait(&format!("prompt {count}"), |history| {
            history.lines().filter(|line| line.starts_with('›')).count() >= count
        })
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// The question on the screen, from its first line to the `Allow?` line that ends the
/// screen: it must be whole, in order, and the last thing shown.
fn question_on(screen: &str, tool: &str) -> Vec<String> {
    let lines: Vec<&str> = screen.lines().collect();
    let last = lines
        .iter()
        .rposition(|line| !line.trim().is_empty())
        .unwrap();
    assert!(
        lines[last].starts_with("Allow? [y] once"),
        "the question's last line ends the screen:\n{screen}"
    );
    let first = lines[..last]
        .iter()
        .rposition(|line| line.starts_with(&format!("toolrail: `{tool}` asks to run")))
        .unwrap_or_else(|| panic!("the question about `{tool}` is on the screen:\n{screen}"));
    lines[first..=last]
        .iter()
        .map(|line| (*line).to_owned())
        .collect()
}

/// Asserts that `question` holds `expected` lines in that order.
fn holds_in_order(question: &[String], expected: &[&str]) {
    let mut at = 0;
    for wanted in expected {
        let found = question[at..]
            .iter()
            .position(|line| line.contains(wanted))
            .unwrap_or_else(|| panic!("{wanted:?} after line {at} of:\n{}", question.join("\n")));
        at += found + 1;
    }
}

fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chat");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn chat_streams_asks_whole_and_survives_ctrl_c() {
    if !tmux_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(
        workspace.join("calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    std::fs::write(workspace.join("notes.md"), "add() is wrong\n").unwrap();
    std::fs::write(workspace.join("old.py"), "# unused\n").unwrap();

    let (open_gate, gate) = mpsc::channel();
    let (url, requests) = scripted_server(
        vec![
            // Words in small deltas, held after the second until the screen shows them.
            Answer::gated_after(
                vec![
                    text_chunk("Let me "),
                    text_chunk("look at the files "),
                    text_chunk("first."),
                    call_chunk(0, "r1", "read", r#"{"path": "calc.py"}"#),
                    call_chunk(1, "r2", "read", r#"{"path": "notes.md"}"#),
                    finish_chunk("tool_calls"),
                ],
                1,
            ),
            Answer::new(vec![
                text_chunk("Found it: "),
                text_chunk("a minus."),
                call_chunk(
                    0,
                    "w1",
                    "write",
                    r#"{"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}"#,
                ),
                finish_chunk("tool_calls"),
            ]),
            Answer::new(vec![
                call_chunk(
                    0,
                    "b1",
                    "bash",
                    r#"{"command": "rm -rf old.py", "description": "remove the unused file"}"#,
                ),
                finish_chunk("tool_calls"),
            ]),
            Answer::new(vec![
                text_chunk("Fixed calc.py "),
                text_chunk("and removed old.py."),
                finish_chunk("stop"),
            ]),
            Answer::new(vec![
                call_chunk(
                    0,
                    "s1",
                    "bash",
                    r#"{"command": "sleep 30 && echo slept", "description": "the slow job"}"#,
                ),
                finish_chunk("tool_calls"),
            ]),
            Answer::new(vec![text_chunk("Still here."), finish_chunk("stop")]),
        ],
        gate,
    );
    let state = dir.path().join("state");
    let command = format!(
        "cd {} && env NO_COLOR=1 OPENAI_API_KEY=test XDG_STATE_HOME={} {} chat --provider openai --model scripted --base-url {url} --sandbox workspace-write",
        workspace.display(),
        state.display(),
        env!("CARGO_BIN_EXE_toolrail"),
    );
    let terminal = Terminal::start(&command);
    terminal.wait("the prompt", |history| {
        history.lines().any(|line| line.starts_with("›"))
    });
    terminal.type_line("Fix calc.py");

    // The first words are on the screen while the server still holds the rest.
    terminal.wait("the streamed words", |history| {
        history.contains("Let me look at the files")
    });
    assert!(
        !terminal.history().contains("first."),
        "the rest was not sent yet"
    );
    open_gate.send(()).unwrap();

    // Both reads run (read-only tools do not ask) and get their cards; then the write asks.
    let screen = terminal.wait("the write's question", |history| {
        history.contains("`write` asks to run")
    });
    let history = terminal.history();
    assert!(
        history.contains("Let me look at the files first."),
        "{history}"
    );
    assert!(
        history.contains("read calc.py") && history.contains("read notes.md"),
        "{history}"
    );
    let question = question_on(&screen, "write");
    holds_in_order(
        &question,
        &[
            "`write` asks to run (call w1)",
            "subject: calc.py",
            "reason:  `write` needs an approval",
            "it would change:",
            "--- a/calc.py",
            "+++ b/calc.py",
            "-    return a - b",
            "+    return a + b",
            "Allow? [y] once, [s] for this session",
        ],
    );
    // Nothing redraws over it while it waits: the live view ticks every 200 ms.
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        terminal.screen(),
        screen,
        "the screen changed under the question"
    );
    terminal.type_line("y");

    let screen = terminal.wait("the rm's question", |history| {
        history.contains("`bash` asks to run (call b1)")
    });
    let question = question_on(&screen, "bash");
    holds_in_order(
        &question,
        &[
            "`bash` asks to run (call b1)",
            "subject: rm -rf old.py",
            "reason:  `bash` needs an approval",
            "Allow? [y] once, [s] for this session",
        ],
    );
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        terminal.screen(),
        screen,
        "the screen changed under the question"
    );
    terminal.type_line("y");
    terminal.wait("the answer", |history| {
        history.contains("Fixed calc.py and removed old.py.")
    });
    terminal.wait_prompts(2);
    assert_eq!(
        std::fs::read_to_string(workspace.join("calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
    assert!(!workspace.join("old.py").exists());

    // A slow call, cancelled with Ctrl-C while it runs.
    terminal.type_line("Now run the slow job");
    terminal.wait("the sleep's question", |history| {
        history.contains("`bash` asks to run (call s1)")
    });
    terminal.type_line("y");
    terminal.wait("the sleep running", |history| {
        history.contains("s1 $ sleep 30 && echo slept · ")
    });
    terminal.keys(&["C-c"]);
    terminal.wait("the cancelled turn", |history| {
        history.contains("(the turn ended: aborted)")
    });
    let history = terminal.history();
    let card = history
        .lines()
        .skip_while(|line| !line.starts_with("✗ $ sleep 30 && echo slept"))
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        card.contains("ABORTED") && card.contains("cancelled while running and stopped"),
        "the slow call's card says it was cancelled:\n{history}"
    );
    assert!(
        history.contains("\n(cancelling: the calls still running"),
        "no echoed ^C moves the note:\n{history}"
    );
    terminal.wait_prompts(3);

    // The conversation goes on.
    terminal.type_line("Are you there?");
    terminal.wait("the next answer", |history| history.contains("Still here."));
    terminal.wait_prompts(4);

    // The commands around the conversation, and the history of what was typed.
    terminal.type_line("/cost");
    terminal.wait("the cost", |history| {
        history.contains("6 model requests · 60 tokens in · 30 tokens out")
    });
    terminal.type_line("/tools");
    terminal.wait("the tools", |history| {
        history
            .lines()
            .any(|line| line.trim_start().starts_with("write ") && line.contains("edit"))
    });
    terminal.type_line("/page");
    let page = terminal.wait("the page", |history| history.contains("page: "));
    let page = page
        .lines()
        .find_map(|line| line.strip_prefix("page: "))
        .unwrap()
        .trim()
        .to_owned();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("Still here.") && html.contains("ABORTED"),
        "{page}"
    );
    terminal.wait_prompts(7);
    terminal.keys(&["Up"]);
    // Up brings the last line typed back to the prompt, not yet sent.
    terminal.wait("the last line recalled", |history| {
        history
            .lines()
            .filter(|line| line.starts_with("› /page"))
            .count()
            == 2
    });
    terminal.keys(&["C-u"]);
    terminal.type_line("/exit");
    terminal.wait("the goodbye", |history| {
        history.contains("`toolrail resume ")
    });
    let final_screen = terminal.history();
    std::fs::write(artifacts().join("final-screen.txt"), &final_screen).unwrap();

    // Six model requests, and every call of the session has a result in its log.
    let asked: Vec<String> = requests.try_iter().collect();
    assert_eq!(asked.len(), 6, "{asked:?}");
    let sessions = workspace.join(".toolrail/sessions");
    let log = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| {
            path.extension()
                .is_some_and(|extension| extension == "jsonl")
        })
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let kinds: Vec<String> = text
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let calls = kinds.iter().filter(|kind| *kind == "tool/call").count();
    let results = kinds.iter().filter(|kind| *kind == "tool/result").count();
    assert_eq!((calls, results), (5, 5), "{kinds:?}");
}

#[test]
fn keys_typed_before_a_question_never_answer_it() {
    if !tmux_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_gate, gate) = mpsc::channel();
    let (url, _requests) = scripted_server(
        vec![
            Answer::new(vec![
                call_chunk(
                    0,
                    "s1",
                    "bash",
                    r#"{"command": "sleep 2", "description": "a pause"}"#,
                ),
                finish_chunk("tool_calls"),
            ]),
            Answer::new(vec![
                call_chunk(
                    0,
                    "w1",
                    "write",
                    r#"{"path": "new.txt", "content": "made\n"}"#,
                ),
                finish_chunk("tool_calls"),
            ]),
            Answer::new(vec![text_chunk("Done."), finish_chunk("stop")]),
        ],
        gate,
    );
    let command = format!(
        "cd {} && env NO_COLOR=1 OPENAI_API_KEY=test XDG_STATE_HOME={} {} chat --provider openai --model scripted --base-url {url} --allow 'bash(sleep *)'",
        workspace.display(),
        dir.path().join("state").display(),
        env!("CARGO_BIN_EXE_toolrail"),
    );
    let terminal = Terminal::start(&command);
    terminal.wait_prompts(1);
    terminal.type_line("Pause, then make a file");
    terminal.wait("the pause running", |history| {
        history.contains("s1 $ sleep 2 · ")
    });
    // Typed while the command runs, before any question: not an answer to what comes next.
    terminal.type_line("y");
    let screen = terminal.wait("the write's question", |history| {
        history.contains("`write` asks to run (call w1)")
    });
    question_on(&screen, "write");
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        terminal.screen(),
        screen,
        "the question waits for its own answer"
    );
    assert!(!workspace.join("new.txt").exists());
    terminal.type_line("n: not now");
    terminal.wait("the answer", |history| history.contains("Done."));
    let history = terminal.history();
    assert!(
        history.contains("rejected: not now") && !workspace.join("new.txt").exists(),
        "{history}"
    );
}

/// With `--approvals-listen`, a call waiting for an answer from elsewhere has a live line
/// saying so (and why) until the endpoint answers it; then its card.
#[test]
fn a_call_answered_elsewhere_shows_what_it_waits_for() {
    if !tmux_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    let (_gate, gate) = mpsc::channel();
    let (url, _requests) = scripted_server(
        vec![
            Answer::new(vec![
                call_chunk(
                    0,
                    "e1",
                    "bash",
                    r#"{"command": "echo answered-elsewhere", "description": "say it"}"#,
                ),
                finish_chunk("tool_calls"),
            ]),
            Answer::new(vec![text_chunk("Done."), finish_chunk("stop")]),
        ],
        gate,
    );
    let command = format!(
        "cd {} && env NO_COLOR=1 OPENAI_API_KEY=test XDG_STATE_HOME={} {} chat --provider openai --model scripted --base-url {url} --preset untrusted --approvals-listen 127.0.0.1:0",
        workspace.display(),
        dir.path().join("state").display(),
        env!("CARGO_BIN_EXE_toolrail"),
    );
    let terminal = Terminal::start(&command);
    terminal.wait_prompts(1);
    let history = terminal.history();
    let joined: String = history.lines().collect();
    let address = joined
        .split("answered at http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the endpoint's address")
        .to_owned();
    let token = joined
        .split("Bearer ")
        .nth(1)
        .map(|rest| {
            rest.chars()
                .take_while(char::is_ascii_hexdigit)
                .collect::<String>()
        })
        .expect("the token");
    terminal.type_line("Say it");
    let screen = terminal.wait("the waiting line", |history| {
        history.contains("? e1 bash(echo answered-elsewhere) · waiting for approval:")
    });
    assert!(screen.contains("the `untrusted` preset"), "{screen}");
    let answered = Command::new("curl")
        .args(["-s", "-X", "POST", "-H"])
        .arg(format!("Authorization: Bearer {token}"))
        .arg(format!("http://{address}/answer"))
        .args(["-d", r#"{"id": 1, "answer": "allow_once"}"#])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&answered.stdout).contains("\"decided\":true"),
        "{}",
        String::from_utf8_lossy(&answered.stdout)
    );
    terminal.wait("the answer", |history| history.contains("Done."));
    let history = terminal.history();
    assert!(history.contains("→ allowed once"), "{history}");
    assert!(history.contains("│ answered-elsewhere"), "{history}");
}
