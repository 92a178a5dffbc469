//! The agent loop: a user turn is a series of steps — ask the model, record its message, run
//! the batch of tool calls it asked for, feed the results back — until the model ends the
//! turn, the step limit is reached, the message is cut off, or the turn is cancelled. Every
//! fact goes to the session log; the conversation sent to the model is the one replay derives.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::{
    AppendUrgency, ContentBlock, ConversationItem, EventData, EventDraft, SessionLog, Settle,
    SinkError, StepId, Timestamp, TraceRef, TurnId,
    event::{
        AssistantMessage, ContextMessage, StepEnd, StepStart, StopReason, TurnEnd, TurnEndKind,
        TurnStart,
    },
};
use toolrail_tools_core::{CallRequest, PipelineError, Registry, ToolSet};

use crate::model::{ModelClient, ModelDelta, ModelError, ModelRequest, NoDeltas, ToolDefinition};
use crate::scheduler::{Live, LiveEvent, Scheduler};

/// Settings of the loop.
#[derive(Clone)]
pub struct LoopConfig {
    /// The system prompt of every request; what the presentation adds (code mode's SDK)
    /// follows it after a blank line.
    pub system: Option<String>,
    /// Model requests per turn at most.
    pub max_steps: u32,
    /// How each request's tool set is shown to the model (code mode offers `run_code`
    /// alone and adds its SDK to the system prompt); `None`: as registered.
    pub presentation: Option<ToolPresentation>,
}

impl std::fmt::Debug for LoopConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopConfig")
            .field("system", &self.system)
            .field("max_steps", &self.max_steps)
            .field("presentation", &self.presentation.is_some())
            .finish()
    }
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            system: None,
            max_steps: 50,
            presentation: None,
        }
    }
}

/// Turns a request's tool set into what the model is offered, and what the system prompt
/// must add for it. The calls of the request are resolved against the offered set.
pub type ToolPresentation = Arc<dyn Fn(&ToolSet) -> PresentedTools + Send + Sync>;

/// The tool side of a request, made from one registry snapshot.
struct Offer {
    /// The registry's snapshot it was made from.
    snapshot: ToolSet,
    /// The set the request's calls run against (the presented one, in code mode).
    tools: ToolSet,
    /// The system prompt with what the presentation adds.
    system: Option<String>,
    /// The tools as the model is told of them.
    definitions: Arc<[ToolDefinition]>,
}

/// What one request offers.
#[derive(Clone)]
pub struct PresentedTools {
    /// The tools the model is offered, and the set the request's calls run against.
    pub tools: ToolSet,
    /// Appended to the system prompt.
    pub system: Option<String>,
}

/// Why a turn could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    /// The pipeline failed inside a batch: nothing new was started and no result was
    /// fabricated (recovery classifies the open calls).
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The session log refused one of the loop's own events (`turn/start`, `step/end`, …).
    #[error("the session log refused a write: {0}")]
    Log(#[from] SinkError),
    /// The model request failed; the turn was ended as `error` first. Never
    /// [`ModelError::Cancelled`]: a cancelled request ends the turn as `aborted`.
    #[error(transparent)]
    Model(ModelError),
}

/// Runs turns of one session.
pub struct AgentLoop {
    registry: Registry,
    scheduler: Scheduler,
    log: Arc<dyn SessionLog>,
    model: Arc<dyn ModelClient>,
    config: LoopConfig,
    /// Shared with the request in flight; added to once that request is gone.
    conversation: Arc<Vec<ConversationItem>>,
    /// What the last step offered, and the registry snapshot it was made from.
    offer: Option<Arc<Offer>>,
    next_turn: u32,
    steering_tx: mpsc::UnboundedSender<Vec<ContentBlock>>,
    steering_rx: mpsc::UnboundedReceiver<Vec<ContentBlock>>,
}

/// Sends the user's messages into a running turn; they are delivered after the current batch
/// (logged as `context/message` from `user`, after the batch's results).
#[derive(Clone, Debug)]
pub struct Steering {
    sender: mpsc::UnboundedSender<Vec<ContentBlock>>,
}

impl Steering {
    /// Queues a message; `false` if the loop is gone.
    pub fn send(&self, message: Vec<ContentBlock>) -> bool {
        self.sender.send(message).is_ok()
    }
}

impl AgentLoop {
    /// A loop over a fresh conversation.
    pub fn new(
        registry: Registry,
        scheduler: Scheduler,
        log: Arc<dyn SessionLog>,
        model: Arc<dyn ModelClient>,
        config: LoopConfig,
    ) -> Self {
        let (steering_tx, steering_rx) = mpsc::unbounded_channel();
        Self {
            registry,
            scheduler,
            log,
            model,
            config,
            conversation: Arc::default(),
            offer: None,
            next_turn: 1,
            steering_tx,
            steering_rx,
        }
    }

    /// Continues a session whose events were read back (and recovered): the next request
    /// carries everything the log holds, synthetic results included.
    pub fn resume(mut self, events: &[toolrail_session_log::Event]) -> Self {
        self.conversation = Arc::new(toolrail_session_log::conversation(events));
        // Tools loaded through tool_search stay loaded.
        for event in events {
            if let EventData::ToolsLoaded(loaded) = &event.data {
                let names: Vec<&str> = loaded.names.iter().map(String::as_str).collect();
                self.registry.load_deferred(&names);
            }
        }
        self.next_turn = events
            .iter()
            .filter_map(|event| event.turn.map(|turn| turn.0))
            .max()
            .unwrap_or(0)
            + 1;
        self
    }

    /// A handle for steering messages from outside the loop.
    pub fn steering(&self) -> Steering {
        Steering {
            sender: self.steering_tx.clone(),
        }
    }

    /// The conversation as the next request will carry it.
    pub fn conversation(&self) -> &[ConversationItem] {
        &self.conversation
    }

    /// Runs one user turn to its end and says how it ended.
    pub async fn run_turn(
        &mut self,
        user: Vec<ContentBlock>,
        cancel: CancellationToken,
        live: Option<Live>,
    ) -> Result<TurnEndKind, LoopError> {
        let turn = self
            .open_turn(TurnStart {
                user,
                trace: None,
                caller: None,
                client: false,
            })
            .await?;
        for number in 1..=self.config.max_steps {
            let step = StepId(number);
            self.append(turn, Some(step), EventData::StepStart(StepStart::default()))
                .await?;
            let offer = self.offer();
            let request = ModelRequest {
                system: offer.system.clone(),
                messages: Arc::clone(&self.conversation),
                tools: Arc::clone(&offer.definitions),
            };
            // Deltas go to the live view as they arrive; the message is acted on only once
            // whole (and not cut off).
            let forward = |delta: ModelDelta| {
                if let Some(live) = &live {
                    live.event(LiveEvent::Model(delta));
                }
            };
            let deltas: &dyn crate::model::DeltaSink =
                if live.is_some() { &forward } else { &NoDeltas };
            let response = tokio::select! {
                biased;
                () = cancel.cancelled() => Err(ModelError::Cancelled),
                response = self.model.stream(&request, &cancel, deltas) => response,
            };
            // The conversation is shared with the request until here: dropping it first lets
            // the loop add to the conversation without copying it.
            drop(request);
            let response = match response {
                Ok(response) => response,
                Err(ModelError::Cancelled) => {
                    return self
                        .end(
                            turn,
                            step,
                            TurnEndKind::Aborted,
                            "cancelled while the model was answering",
                        )
                        .await;
                }
                Err(error) => {
                    self.end(turn, step, TurnEndKind::Error, &error.to_string())
                        .await?;
                    return Err(LoopError::Model(error));
                }
            };
            let message = response.message;
            // What `step/end` records of the answer besides the message: the server's usage,
            // id and model, as it sent them.
            let served = StepEnd {
                usage: response.usage,
                response_id: response.response_id,
                response_model: response.response_model,
            };
            let calls = requests_of(&message, turn, step);
            let truncated = message.stop_reason == StopReason::Length;
            self.append(
                turn,
                Some(step),
                EventData::AssistantMessage(message.clone()),
            )
            .await?;
            self.remember(ConversationItem::Assistant(message));
            if truncated {
                let outcome = self.scheduler.run_truncated(&offer.tools, calls).await?;
                // Never prepared, never started: the live view learns of them as committed.
                if let Some(live) = &live {
                    for committed in &outcome.results {
                        live.event(LiveEvent::Committed {
                            call_id: committed.identity().call_id.clone(),
                            seq: committed.seq(),
                            record: Arc::clone(committed.record()),
                        });
                    }
                }
                self.answer(&outcome.results);
                self.end_step(turn, step, served).await?;
                return self
                    .end(
                        turn,
                        step,
                        TurnEndKind::Truncated,
                        "the answer was cut off by the output-length limit",
                    )
                    .await;
            }
            if calls.is_empty() {
                self.end_step(turn, step, served).await?;
                return self.end(turn, step, TurnEndKind::Completed, "").await;
            }
            let outcome = match self
                .scheduler
                .run_batch(&offer.tools, calls, cancel.child_token(), live.clone())
                .await
            {
                Ok(outcome) => outcome,
                Err(error) => {
                    // Nothing was fabricated; recovery classifies the open calls later.
                    let _ = self
                        .end(turn, step, TurnEndKind::Error, &error.to_string())
                        .await;
                    return Err(error.into());
                }
            };
            self.answer(&outcome.results);
            self.deliver_steering(turn, step).await?;
            self.end_step(turn, step, served).await?;
            self.log.settle(Settle::BatchEnd).await?;
            if cancel.is_cancelled() {
                return self
                    .end(
                        turn,
                        step,
                        TurnEndKind::Aborted,
                        "cancelled during the batch",
                    )
                    .await;
            }
            if outcome
                .results
                .iter()
                .any(|committed| committed.record().concludes_turn)
            {
                return self
                    .end(
                        turn,
                        step,
                        TurnEndKind::Completed,
                        "a tool concluded the turn",
                    )
                    .await;
            }
        }
        let step = StepId(self.config.max_steps);
        self.end(
            turn,
            step,
            TurnEndKind::MaxSteps,
            "the step limit was reached",
        )
        .await
    }

    /// Begins the next turn: `turn/start` (the user's message, which joins the
    /// conversation, and whether a client rather than the model makes its calls).
    async fn open_turn(&mut self, start: TurnStart) -> Result<TurnId, LoopError> {
        let turn = TurnId(self.next_turn);
        self.next_turn += 1;
        let user = start.user.clone();
        self.append(turn, None, EventData::TurnStart(start)).await?;
        self.remember(ConversationItem::User(user));
        Ok(turn)
    }

    /// Runs one turn whose only step's message comes from a client instead of the model:
    /// an MCP client or an editor calling tools directly. The turn is logged like any other
    /// — `user` says who called, `message` holds the calls — its calls run as one batch
    /// against the registry's tools as they are now (not a presentation of them), and the
    /// turn ends after that batch: the model is asked nothing. Cancelling ends it `aborted`
    /// with an honest outcome for every call. `caller` is the client's span when its
    /// request carried a W3C trace context: the turn's trace continues it.
    pub async fn run_client_turn(
        &mut self,
        user: Vec<ContentBlock>,
        message: AssistantMessage,
        caller: Option<TraceRef>,
        cancel: CancellationToken,
        live: Option<Live>,
    ) -> Result<TurnEndKind, LoopError> {
        let turn = self
            .open_turn(TurnStart {
                user,
                trace: None,
                caller,
                client: true,
            })
            .await?;
        let step = StepId(1);
        self.append(turn, Some(step), EventData::StepStart(StepStart::default()))
            .await?;
        let calls = requests_of(&message, turn, step);
        self.append(
            turn,
            Some(step),
            EventData::AssistantMessage(message.clone()),
        )
        .await?;
        self.remember(ConversationItem::Assistant(message));
        let tools = self.registry.snapshot();
        let outcome = match self
            .scheduler
            .run_batch(&tools, calls, cancel.child_token(), live)
            .await
        {
            Ok(outcome) => outcome,
            Err(error) => {
                let _ = self
                    .end(turn, step, TurnEndKind::Error, &error.to_string())
                    .await;
                return Err(error.into());
            }
        };
        self.answer(&outcome.results);
        self.end_step(turn, step, StepEnd::default()).await?;
        self.log.settle(Settle::BatchEnd).await?;
        if cancel.is_cancelled() {
            return self
                .end(turn, step, TurnEndKind::Aborted, "cancelled by the client")
                .await;
        }
        self.end(turn, step, TurnEndKind::Completed, "").await
    }

    /// What this step offers the model: made anew only when the registry's snapshot changed
    /// (a tool joined, left or was loaded), so a step with 1,000 tools copies no schema.
    fn offer(&mut self) -> Arc<Offer> {
        let snapshot = self.registry.snapshot();
        if let Some(offer) = &self.offer
            && offer.snapshot.is_same_snapshot(&snapshot)
        {
            return Arc::clone(offer);
        }
        let (tools, system) = match &self.config.presentation {
            None => (snapshot.clone(), self.config.system.clone()),
            Some(present) => {
                let presented = present(&snapshot);
                let system = match (self.config.system.clone(), presented.system) {
                    (Some(base), Some(extra)) => Some(format!("{base}\n\n{extra}")),
                    (base, extra) => base.or(extra),
                };
                (presented.tools, system)
            }
        };
        let definitions = tools
            .offered()
            .map(|entry| ToolDefinition {
                name: entry.name().to_owned(),
                description: entry.spec().description().to_owned(),
                input_schema: entry.spec().input_schema().clone(),
            })
            .collect();
        let offer = Arc::new(Offer {
            snapshot,
            tools,
            system,
            definitions,
        });
        self.offer = Some(Arc::clone(&offer));
        offer
    }

    /// Adds an item to the conversation, copying it only if a model client kept a request.
    fn remember(&mut self, item: ConversationItem) {
        Arc::make_mut(&mut self.conversation).push(item);
    }

    fn answer(&mut self, results: &[toolrail_tools_core::CommittedResult]) {
        for committed in results {
            self.remember(ConversationItem::ToolResult {
                call_id: committed.identity().call_id.clone(),
                record: Arc::clone(committed.record()),
            });
        }
        for committed in results {
            for message in committed.context() {
                self.remember(ConversationItem::Context {
                    source: message.source.clone(),
                    content: message.content.clone(),
                });
            }
        }
    }

    async fn end_step(
        &self,
        turn: TurnId,
        step: StepId,
        served: StepEnd,
    ) -> Result<u64, SinkError> {
        self.append(turn, Some(step), EventData::StepEnd(served))
            .await
    }

    /// Messages the user sent while the batch ran, after its results.
    async fn deliver_steering(&mut self, turn: TurnId, step: StepId) -> Result<(), LoopError> {
        while let Ok(content) = self.steering_rx.try_recv() {
            let message = ContextMessage {
                source: "user".to_owned(),
                content,
            };
            self.append(turn, Some(step), EventData::ContextMessage(message.clone()))
                .await?;
            self.remember(ConversationItem::Context {
                source: message.source,
                content: message.content,
            });
        }
        Ok(())
    }

    async fn end(
        &self,
        turn: TurnId,
        step: StepId,
        kind: TurnEndKind,
        message: &str,
    ) -> Result<TurnEndKind, LoopError> {
        let message = (!message.is_empty()).then(|| message.to_owned());
        self.append(
            turn,
            Some(step),
            EventData::TurnEnd(TurnEnd { kind, message }),
        )
        .await?;
        self.log.settle(Settle::TurnEnd).await?;
        Ok(kind)
    }

    async fn append(
        &self,
        turn: TurnId,
        step: Option<StepId>,
        data: EventData,
    ) -> Result<u64, SinkError> {
        let draft = EventDraft {
            ts: Timestamp::now(),
            turn: Some(turn),
            step,
            call_id: None,
            data,
        };
        self.log.append(draft, AppendUrgency::Buffered).await
    }
}

/// The message's calls as the scheduler takes them, under ids distinct within the message.
fn requests_of(message: &AssistantMessage, turn: TurnId, step: StepId) -> Vec<CallRequest> {
    message
        .tool_calls()
        .into_iter()
        .enumerate()
        .map(|(index, call)| {
            let request = CallRequest::new(
                call.call_id,
                u32::try_from(index).unwrap_or(u32::MAX),
                call.name,
                call.arguments_raw,
            )
            .in_step(turn, step);
            match call.repeated_id {
                Some(sent) => request.repeating(sent.clone()),
                None => request,
            }
        })
        .collect()
}
