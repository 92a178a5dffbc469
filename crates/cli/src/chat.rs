//! `toolrail chat`: an interactive session in the current folder with a real model. Each
//! line typed is a turn, shown live on the console; `/`-commands look at the session
//! around it. `toolrail run --prompt` and `toolrail resume` drive the same
//! [`Conversation`] for one turn.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use serde_json::Value;
use toolrail_interaction::{ApprovalEndpoint, ApprovalInbox, ChannelApprovals};
use toolrail_runtime::telemetry::Telemetry;
use toolrail_runtime::{Agent, AgentBuilder, SessionConfig, Store};
use toolrail_session_log::SessionId;

use crate::console::{Console, Interrupts, Keyboard, Line, Mode, TurnOutcome, drive};
use crate::flags::{AgentFlags, Approve};
use crate::places::{new_session_id, resume_hint, state_folder};
use crate::run::build_error;
use crate::session::{session_title, write_page};
use crate::{bad_input, runtime};

#[derive(clap::Args)]
pub(crate) struct ChatArgs {
    #[command(flatten)]
    flags: AgentFlags,
}

pub(crate) fn run(args: ChatArgs) -> Result<()> {
    let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let mut config = args.flags.config()?;
    let approve = args.flags.approvals(terminal, &mut config)?;
    runtime()?.block_on(async {
        let mut conversation =
            Conversation::start(config, approve, Console::new(human_mode()), None).await?;
        conversation.greet();
        let chatted = conversation.chat().await;
        conversation.agent.shutdown().await;
        chatted
    })
}

/// How a person's terminal is written to.
pub(crate) fn human_mode() -> Mode {
    let terminal = std::io::stdout().is_terminal();
    Mode::Human {
        terminal,
        colour: toolrail_presenters::colour_wanted(terminal),
    }
}

/// A session and everything its turns are shown and answered with.
pub(crate) struct Conversation {
    pub agent: Agent,
    config: SessionConfig,
    approve: ApproveWith,
    /// The approvals endpoint, while approvals are answered over HTTP.
    _endpoint: Option<ApprovalEndpoint>,
    inbox: Option<ApprovalInbox>,
    keyboard: Keyboard,
    interrupts: Interrupts,
    pub console: Console,
    /// The usage each model request reported, this run.
    pub usage: Vec<Value>,
    /// The OpenTelemetry export (`--otlp`), flushed when the conversation ends.
    telemetry: Option<Telemetry>,
}

impl Drop for Conversation {
    fn drop(&mut self) {
        // What is queued goes out now (bounded by the exporter's timeout); what was lost is
        // said once.
        if let Some(telemetry) = self.telemetry.take() {
            close_telemetry(&telemetry);
        }
    }
}

/// The session's OpenTelemetry export, when `--otlp` or `[telemetry] otlp` asks for it.
pub(crate) fn open_telemetry(config: &SessionConfig) -> Result<Option<Telemetry>> {
    if !config.telemetry.otlp {
        return Ok(None);
    }
    Telemetry::otlp(&config.telemetry)
        .map(Some)
        .map_err(|error| bad_input!("{error}"))
}

/// Sends what is queued (bounded by the exporter's timeout) and says once what was lost.
pub(crate) fn close_telemetry(telemetry: &Telemetry) {
    let report = telemetry.shutdown();
    if report.dropped > 0 || report.failed > 0 {
        eprintln!(
            "toolrail: telemetry: {} span{} dropped (the OTLP collector did not keep up), {} not delivered (refused or not answered)",
            report.dropped,
            if report.dropped == 1 { "" } else { "s" },
            report.failed
        );
    }
    if report.events_dropped > 0 {
        eprintln!(
            "toolrail: telemetry: {} event{} not made into spans (the telemetry thread fell behind the session; the turns they were in are cut short)",
            report.events_dropped,
            if report.events_dropped == 1 { "" } else { "s" },
        );
    }
}

/// How approvals are answered, kept to build a resumed session the same way.
#[derive(Clone)]
enum ApproveWith {
    Ask,
    Refuse(Arc<crate::flags::Refuse>),
    /// The approvals endpoint's service, and where it listens.
    Remote(Arc<ChannelApprovals>, std::net::SocketAddr),
}

impl Conversation {
    /// A new session (`resume`: `None`), or session `resume` of `store` reopened.
    pub(crate) async fn start(
        config: SessionConfig,
        approve: Approve,
        console: Console,
        resume: Option<(&Store, &SessionId)>,
    ) -> Result<Self> {
        let mut endpoint = None;
        let approve = match approve {
            Approve::Ask => ApproveWith::Ask,
            Approve::Refuse(refuse) => ApproveWith::Refuse(refuse),
            Approve::Listen(address) => {
                let (service, started) = ApprovalEndpoint::start(address, None)
                    .await
                    .map_err(|error| bad_input!("{error}"))?;
                // The token is printed once, here; whoever answers keeps it.
                eprintln!(
                    "toolrail: approvals are answered at http://{} with `Authorization: Bearer {}`: GET /pending, POST /answer {{\"id\": N, \"answer\": \"allow_once\" | \"allow_for_session\" | \"reject\"}}",
                    started.address(),
                    started.token()
                );
                let address = started.address();
                endpoint = Some(started);
                ApproveWith::Remote(Arc::new(service), address)
            }
        };
        let history = state_folder().ok().map(|folder| {
            let _ = std::fs::create_dir_all(&folder);
            folder.join("history")
        });
        let telemetry = open_telemetry(&config)?;
        let (agent, inbox) = open(&config, &approve, telemetry.as_ref(), resume).await?;
        Ok(Self {
            agent,
            config,
            approve,
            _endpoint: endpoint,
            inbox,
            keyboard: Keyboard::open(history),
            interrupts: Interrupts::catch(),
            console,
            usage: Vec::new(),
            telemetry,
        })
    }

    /// The first lines of a chat: which session, which model, how to leave.
    pub(crate) fn greet(&mut self) {
        let model = self
            .config
            .model
            .as_ref()
            .map_or_else(String::new, |model| {
                format!(
                    " · {} at {}",
                    model.model,
                    model.base_url.as_deref().unwrap_or("the provider's API")
                )
            });
        let tools = self.agent.tools().snapshot().offered().count();
        println!(
            "toolrail chat · session {}{model} · {tools} tool{} · {}",
            self.agent.session_id(),
            if tools == 1 { "" } else { "s" },
            match &self.approve {
                ApproveWith::Ask => "approvals asked here".to_owned(),
                ApproveWith::Refuse(_) => "approvals refused".to_owned(),
                ApproveWith::Remote(_, address) =>
                    format!("approvals answered at http://{address}"),
            }
        );
        println!("Type a message. /help lists commands; Ctrl-C cancels a turn, twice leaves.");
    }

    /// One turn.
    pub(crate) async fn turn(&mut self, prompt: String) -> TurnOutcome {
        let outcome = drive(
            &self.agent,
            prompt,
            &mut self.console,
            self.inbox.as_mut(),
            &mut self.interrupts,
        )
        .await;
        if let Ok(answer) = &outcome.result {
            self.usage.extend(answer.usage.iter().cloned());
        }
        outcome
    }

    /// Reads lines and runs them until `/exit`, Ctrl-D or two Ctrl-C.
    pub(crate) async fn chat(&mut self) -> Result<()> {
        let mut interrupted = false;
        loop {
            let line = self
                .keyboard
                .read("› ".to_owned())
                .await
                .unwrap_or(Line::Closed);
            let text = match line {
                Line::Closed => break,
                Line::Interrupted if interrupted => break,
                Line::Interrupted => {
                    println!("(Ctrl-C again, Ctrl-D or /exit to leave)");
                    interrupted = true;
                    continue;
                }
                Line::Text(text) => text,
            };
            interrupted = false;
            let text = text.trim().to_owned();
            if text.is_empty() {
                continue;
            }
            self.keyboard.remember(&text);
            if let Some(command) = text.strip_prefix('/') {
                match self.command(command).await {
                    Ok(Next::Stay) => continue,
                    Ok(Next::Leave) => break,
                    Err(error) => {
                        println!("{error:#}");
                        continue;
                    }
                }
            }
            let outcome = self.turn(text).await;
            if let Err(error) = &outcome.result {
                println!("toolrail: {error}");
            }
            if outcome.leave {
                break;
            }
        }
        println!(
            "session {} is kept in {}; `{}` goes on with it",
            self.agent.session_id(),
            self.agent.store().url(),
            resume_hint(self.agent.store(), self.agent.session_id())
        );
        Ok(())
    }

    async fn command(&mut self, command: &str) -> Result<Next> {
        let (name, rest) = command.split_once(' ').unwrap_or((command, ""));
        let rest = rest.trim();
        match name {
            "exit" | "quit" => return Ok(Next::Leave),
            "help" => println!(
                "/tools            the session's tools\n/rules            the permission preset and rules\n/cost             token usage so far\n/page [FILE]      write the session's page (default: beside its log)\n/resume [SESSION] go on with another session of this store (none: list them)\n/exit             leave (the session is kept)"
            ),
            "tools" => {
                for entry in self.agent.tools().snapshot().offered() {
                    let spec = entry.spec();
                    println!(
                        "  {:<32} {:<8} {}",
                        spec.name(),
                        spec.kind().as_str(),
                        if spec.is_read_only() { "read-only" } else { "" }
                    );
                }
            }
            "rules" => {
                let permissions = &self.config.permissions;
                println!(
                    "preset: {}{}",
                    permissions.preset.map_or_else(
                        || "untrusted (default)".to_owned(),
                        |preset| format!("{preset:?}").to_lowercase()
                    ),
                    if permissions.unattended {
                        " · unattended: what would ask is denied"
                    } else {
                        ""
                    }
                );
                if let Some(file) = &permissions.file {
                    println!("rule file: {}", file.display());
                }
                for (effect, rules) in [
                    ("allow", &permissions.allow),
                    ("ask", &permissions.ask),
                    ("deny", &permissions.deny),
                ] {
                    for rule in rules {
                        println!("  {effect} {}", rule.parts().0);
                    }
                }
            }
            "cost" => println!("{}", usage_line(&self.usage)),
            "page" => {
                let out = if rest.is_empty() {
                    self.default_page()?
                } else {
                    PathBuf::from(rest)
                };
                let events = self.agent.store().read(self.agent.session_id())?;
                write_page(&out, &session_title(&events), &events)?;
                println!("page: {}", out.display());
            }
            "resume" if rest.is_empty() => {
                crate::sessions::list(self.agent.store())?;
            }
            "resume" => {
                let store = self.agent.store().clone();
                let id = SessionId::new(rest);
                let config = SessionConfig::recorded_in(&store, &id)
                    .map_err(|error| bad_input!("{error}"))?;
                let (agent, inbox, recovery) =
                    reopen(&config, &self.approve, self.telemetry.as_ref(), &store, &id).await?;
                self.agent = agent;
                self.inbox = inbox;
                self.config = config;
                println!("resumed {id}: {recovery}");
            }
            other => println!("unknown command /{other}; /help lists them"),
        }
        Ok(Next::Stay)
    }

    fn default_page(&self) -> Result<PathBuf> {
        match self.agent.store().file_of(self.agent.session_id()) {
            Some(log) => Ok(log.with_extension("html")),
            None => Ok(PathBuf::from(format!("{}.html", self.agent.session_id()))),
        }
    }
}

enum Next {
    Stay,
    Leave,
}

/// The agent the configuration describes, with approvals as chosen.
async fn open(
    config: &SessionConfig,
    approve: &ApproveWith,
    telemetry: Option<&Telemetry>,
    resume: Option<(&Store, &SessionId)>,
) -> Result<(Agent, Option<ApprovalInbox>)> {
    if let Some((store, id)) = resume {
        let (agent, inbox, recovery) = reopen(config, approve, telemetry, store, id).await?;
        println!("{recovery}");
        return Ok((agent, inbox));
    }
    let (builder, inbox) = builder(config, approve, telemetry);
    let agent = builder
        .session_id(new_session_id())
        .build()
        .await
        .map_err(build_error)?;
    Ok((agent, inbox))
}

async fn reopen(
    config: &SessionConfig,
    approve: &ApproveWith,
    telemetry: Option<&Telemetry>,
    store: &Store,
    id: &SessionId,
) -> Result<(Agent, Option<ApprovalInbox>, toolrail_runtime::Recovery)> {
    let (builder, mut inbox) = builder(config, approve, telemetry);
    // A call left waiting for its approval is asked again while the session reopens.
    let resumed = crate::resume::answering(builder.resume(store, id), inbox.as_mut())
        .await
        .map_err(build_error)?;
    Ok((resumed.agent, inbox, resumed.recovery))
}

fn builder(
    config: &SessionConfig,
    approve: &ApproveWith,
    telemetry: Option<&Telemetry>,
) -> (AgentBuilder, Option<ApprovalInbox>) {
    let mut builder = Agent::builder().config(config.clone());
    if let Some(telemetry) = telemetry {
        builder = builder.telemetry(telemetry.clone());
    }
    match approve {
        ApproveWith::Ask => {
            let (service, inbox) = ChannelApprovals::new(None);
            (builder.approvals(Arc::new(service)), Some(inbox))
        }
        ApproveWith::Refuse(refuse) => (builder.approvals(refuse.clone()), None),
        ApproveWith::Remote(service, _) => (builder.approvals(service.clone()), None),
    }
}

/// Token usage added up over the model's requests.
pub(crate) fn usage_line(usage: &[Value]) -> String {
    let (input, output) = usage.iter().map(toolrail_presenters::tokens).fold(
        (0, 0),
        |(input, output), (tokens_in, tokens_out)| {
            (
                input + tokens_in.unwrap_or(0),
                output + tokens_out.unwrap_or(0),
            )
        },
    );
    format!(
        "{} model request{} · {input} tokens in · {output} tokens out",
        usage.len(),
        if usage.len() == 1 { "" } else { "s" }
    )
}
