//! Binding calls: a program's call of a tool, re-entering the full pipeline as its own call
//! `<parent>:code:<n>` (n in submission order), under the gate's scheduling rules. Each is
//! logged as `tool/code-dispatch-start` before it is recorded and `tool/code-dispatch` with
//! its committed result once it commits, so a replay rebuilds every value the program saw.
//! Every call runs as a task of its own on the caller's runtime, counted by the run: a
//! program that ends, fails, is cancelled — or whose `run_code` call is abandoned and dropped
//! — never leaves a call without its committed outcome.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};
use toolrail_session_log::{
    AppendUrgency, EventData, EventDraft, EventSink, Timestamp, ToolResultRecord,
    event::{CodeDispatch, CodeDispatchStart},
};
use toolrail_tools_core::{
    CallRequest, CommittedResult, Pipeline, ToolSet,
    context::CallIdentity,
    pipeline::{BatchControl, Preparation, SettledCall},
};

use crate::gate::Gate;
use crate::run::Limits;

/// What the run keeps of one binding call, for the result and the card.
#[derive(Clone, Debug)]
pub struct SubCall {
    /// Its call id, `<parent>:code:<n>` with n from 1 in submission order.
    pub call_id: String,
    /// The tool the program called.
    pub tool: String,
    /// The error code of its committed result; `CODE_BINDING_LOST` when the runtime could
    /// not run or record it. `None` when it succeeded.
    pub error: Option<String>,
    /// Whether it reported effects (changed the world).
    pub had_effects: bool,
}

pub(crate) struct Bindings {
    pipeline: Arc<Pipeline>,
    tools: ToolSet,
    log: Arc<dyn EventSink>,
    parent: CallIdentity,
    gate: Gate,
    next: AtomicU64,
    control: BatchControl,
    /// Bytes of one binding's reply the program may receive.
    reply_cap: usize,
    /// Bytes of one binding call's arguments.
    argument_cap: usize,
    /// Calls submitted and not yet committed.
    in_flight: AtomicUsize,
    idle: Notify,
    /// The caller's runtime: binding calls run there, not on the program's thread.
    runtime: tokio::runtime::Handle,
    calls: Mutex<Vec<(u64, SubCall)>>,
}

impl Bindings {
    pub(crate) fn new(
        pipeline: Arc<Pipeline>,
        tools: ToolSet,
        log: Arc<dyn EventSink>,
        parent: CallIdentity,
        control: BatchControl,
        limits: &Limits,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        Self {
            pipeline,
            tools,
            log,
            parent,
            gate: Gate::new(limits.max_parallel),
            next: AtomicU64::new(0),
            control,
            reply_cap: limits.binding_bytes,
            argument_cap: limits.argument_bytes,
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
            runtime,
            calls: Mutex::new(Vec::new()),
        }
    }

    /// Submits a call; the returned future gives the reply the program reads (JSON text:
    /// `{"value": …}` or `{"error": {"code", "message"}}`) once the call committed.
    pub(crate) fn submit(
        self: &Arc<Self>,
        name: String,
        arguments: String,
    ) -> impl Future<Output = String> + use<> {
        let (reply, replied) = oneshot::channel();
        if arguments.len() > self.argument_cap {
            // Refused before it is a call: nothing is logged or kept of arguments this large.
            let _ = reply.send(error_reply(
                "CODE_BINDING_TOO_LARGE",
                &format!(
                    "the arguments of `{name}` are {} bytes, over the {} bytes a binding call may send; send less",
                    arguments.len(),
                    self.argument_cap
                ),
            ));
        } else {
            let ticket = self.next.fetch_add(1, Ordering::SeqCst);
            self.spawn_call(ticket, name, arguments, reply);
        }
        async move {
            replied.await.unwrap_or_else(|_| {
                error_reply(
                    "CODE_BINDING_LOST",
                    "the binding call ended without a result",
                )
            })
        }
    }

    fn spawn_call(
        self: &Arc<Self>,
        ticket: u64,
        name: String,
        arguments: String,
        reply: oneshot::Sender<String>,
    ) {
        let this = Arc::clone(self);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        // Not aborted when the run is dropped: the call commits its outcome whatever
        // happens to the program. The guard counts it done even if the task unwinds.
        self.runtime.spawn(async move {
            let done = Done(Arc::clone(&this));
            let _ = reply.send(this.run(ticket, name, arguments).await);
            drop(done);
        });
    }

    /// Stops calls not yet started (when `cancel`) and waits until every submitted call has
    /// committed.
    pub(crate) async fn settle_all(&self, cancel: bool) {
        if cancel {
            self.control.cancel.cancel();
        }
        loop {
            let idle = self.idle.notified();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// The calls so far, in submission order.
    pub(crate) fn calls(&self) -> Vec<SubCall> {
        let mut calls = self.calls.lock().clone();
        calls.sort_by_key(|(ticket, _)| *ticket);
        calls.into_iter().map(|(_, call)| call).collect()
    }

    async fn run(&self, ticket: u64, name: String, arguments: String) -> String {
        // The id's shape is the log's to say (`CallId::code_sub_call`).
        let number = u32::try_from(ticket + 1).unwrap_or(u32::MAX);
        let call_id = toolrail_session_log::CallId::from(self.parent.call_id.as_str())
            .code_sub_call(number)
            .to_string();
        let parsed: Value =
            serde_json::from_str(&arguments).unwrap_or_else(|_| Value::String(arguments.clone()));
        // Logged in its turn, so the log holds the program's calls in submission order.
        self.gate.turn_to_prepare(ticket).await;
        self.append(
            &call_id,
            EventData::CodeDispatchStart(CodeDispatchStart {
                parent_call_id: self.parent.call_id.clone(),
                name: name.clone(),
                arguments: parsed,
            }),
        )
        .await;
        let mut request = CallRequest::new(
            call_id.as_str(),
            u32::try_from(ticket).unwrap_or(u32::MAX),
            name.as_str(),
            arguments,
        )
        .from_code();
        if let (Some(turn), Some(step)) = (self.parent.turn, self.parent.step) {
            request = request.in_step(turn, step);
        }
        let settled = match self
            .pipeline
            .prepare(&self.tools, request, &self.control)
            .await
        {
            Ok(Preparation::Ready(ready)) => {
                self.gate.prepared(ticket, Some(ready.concurrency()));
                self.gate.start(ticket).await;
                let settled = self.pipeline.dispatch(ready, &self.control).await;
                self.gate.settled(ticket);
                settled
            }
            Ok(Preparation::Refused(refused)) => {
                self.gate.prepared(ticket, None);
                Ok(refused)
            }
            Err(error) => {
                self.gate.prepared(ticket, None);
                Err(error)
            }
        };
        self.gate.turn_to_commit(ticket).await;
        let committed = match settled {
            Ok(settled) => self.commit(settled).await,
            Err(error) => Err(error.to_string()),
        };
        self.gate.committed(ticket);
        let record = match committed {
            Ok(record) => record,
            Err(why) => {
                self.remember(ticket, &call_id, &name, Some("CODE_BINDING_LOST"), false);
                return error_reply(
                    "CODE_BINDING_LOST",
                    &format!("the runtime could not run or record `{name}`: {why}"),
                );
            }
        };
        self.append(
            &call_id,
            EventData::CodeDispatch(Box::new(CodeDispatch {
                parent_call_id: self.parent.call_id.clone(),
                name: name.clone(),
                result: record.as_ref().clone(),
            })),
        )
        .await;
        let code = record.error_code().map(ToString::to_string);
        self.remember(
            ticket,
            &call_id,
            &name,
            code.as_deref(),
            !record.effects.is_empty(),
        );
        self.reply(&name, &record)
    }

    async fn commit(&self, settled: SettledCall) -> Result<Arc<ToolResultRecord>, String> {
        self.pipeline
            .finish(settled)
            .await
            .map(CommittedResult::into_record)
            .map_err(|error| error.to_string())
    }

    fn remember(
        &self,
        ticket: u64,
        call_id: &str,
        tool: &str,
        error: Option<&str>,
        had_effects: bool,
    ) {
        self.calls.lock().push((
            ticket,
            SubCall {
                call_id: call_id.to_owned(),
                tool: tool.to_owned(),
                error: error.map(str::to_owned),
                had_effects,
            },
        ));
    }

    /// The program's view of a result: its value (or its whole text: a program may take in
    /// more than the model is shown), or its error; a reply over the cap is an error of its
    /// own, and the program goes on.
    fn reply(&self, name: &str, record: &ToolResultRecord) -> String {
        if let Some(error) = &record.error {
            return error_reply(error.code.as_str(), &error.message);
        }
        let value = record
            .value
            .clone()
            .unwrap_or_else(|| Value::String(record.whole_text()));
        let reply = json!({ "value": value }).to_string();
        if reply.len() > self.reply_cap {
            return error_reply(
                "CODE_BINDING_TOO_LARGE",
                &format!(
                    "the result of `{name}` is {} bytes, over the {} bytes a binding may return to the program; ask for less (a narrower search, a smaller window)",
                    reply.len(),
                    self.reply_cap
                ),
            );
        }
        reply
    }

    async fn append(&self, call_id: &str, data: EventData) {
        let draft = EventDraft {
            ts: Timestamp::now(),
            turn: self.parent.turn,
            step: self.parent.step,
            call_id: Some(call_id.into()),
            data,
        };
        // A log that refuses writes fails the sub-call's own events too; the pipeline
        // reports that as an internal failure of the call.
        let _ = self.log.append(draft, AppendUrgency::Buffered).await;
    }
}

/// Counts a submitted call done when its task ends, however it ends.
struct Done(Arc<Bindings>);

impl Drop for Done {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

pub(crate) fn error_reply(code: &str, message: &str) -> String {
    json!({"error": {"code": code, "message": message}}).to_string()
}
