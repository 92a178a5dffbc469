//! One batch: prepare in model order, start as concurrency allows, commit in model order.
//!
//! One driver task owns all the batch's state (no locks): it prepares the next call, starts
//! every prepared call whose concurrency allows, commits every settled call whose turn has
//! come, and otherwise waits for the next thing to happen (a preparation, a body settling,
//! the cancel, a progress update). Bodies are polled by the driver itself (no task per call:
//! a spawn costs as much as the rest of a trivial call); a body that must not share the
//! driver's thread runs as a task of its own through the pipeline's `BodyExecution::Task`.

use std::collections::VecDeque;
use std::future::{Future, pending};
use std::num::NonZeroUsize;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::batch::{Batch, Emitter, ToCommit};
use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::{CallId, ToolResultRecord};

use crate::model::ModelDelta;
use toolrail_tools_core::{
    CallRequest, CommittedResult, Pipeline, PipelineError, ToolSet,
    context::{ProgressSink, ProgressUpdate},
    pipeline::{BatchControl, PendingCommit, Preparation, SettledCall},
};

/// How a batch runs.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// At most this many bodies run at once (1 is strict serial; default 8). Never 0: with
    /// no slot no call could start and every batch would wait forever. A count that comes
    /// from outside (a file, a flag) goes through [`SchedulerConfig::with_max_parallel`],
    /// which refuses 0 with an error that says what to give instead.
    pub max_parallel: NonZeroUsize,
    /// A rejected approval stops the rest of the batch (`NOT_EXECUTED`).
    pub stop_batch_on_reject: bool,
    /// Every call of the batch runs alone, in model order (a tool marked sequential).
    pub sequential: bool,
}

/// The default of [`SchedulerConfig::max_parallel`] (DESIGN §5).
pub const DEFAULT_MAX_PARALLEL: NonZeroUsize = match NonZeroUsize::new(8) {
    Some(eight) => eight,
    None => NonZeroUsize::MIN,
};

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_parallel: DEFAULT_MAX_PARALLEL,
            stop_batch_on_reject: true,
            sequential: false,
        }
    }
}

/// A scheduler setting that cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerConfigError {
    /// [`SchedulerConfig::with_max_parallel`] was given 0.
    #[error(
        "max_parallel is 0: no call could ever start and every batch would wait forever; use 1 for strict serial, or more to let calls overlap (default {DEFAULT_MAX_PARALLEL})"
    )]
    ZeroMaxParallel,
}

impl SchedulerConfig {
    /// Sets [`SchedulerConfig::max_parallel`] from a plain count, refusing 0.
    pub fn with_max_parallel(mut self, max_parallel: usize) -> Result<Self, SchedulerConfigError> {
        self.max_parallel =
            NonZeroUsize::new(max_parallel).ok_or(SchedulerConfigError::ZeroMaxParallel)?;
        Ok(self)
    }
}

/// What a UI sees while a turn runs: the model's answer as it arrives, then each call of
/// its batch.
#[derive(Clone, Debug, PartialEq)]
pub enum LiveEvent {
    /// A piece of the model's answer (the agent loop's requests only).
    Model(ModelDelta),
    /// In model order, with the tool's name and the effective arguments (after any logged
    /// rewrite; for a call refused before its arguments parsed, what could be read of them).
    Prepared {
        /// The call's id in the log.
        call_id: CallId,
        /// The call's place in the assistant message, from 0.
        index: u32,
        /// The tool the model asked for.
        name: String,
        /// The effective arguments, as above.
        arguments: Arc<Value>,
    },
    /// As calls start.
    Started {
        /// The call whose body started.
        call_id: CallId,
    },
    /// A running body's report, as the tool gave it to `ToolContext::progress`. None comes
    /// after the call's [`LiveEvent::Finished`].
    Progress {
        /// The call that reported.
        call_id: CallId,
        /// The report, in the tool's own shape.
        data: serde_json::Value,
    },
    /// In completion order.
    Finished {
        /// The call whose body settled.
        call_id: CallId,
    },
    /// In model order, once durable: the record the log holds.
    Committed {
        /// The call committed.
        call_id: CallId,
        /// The `seq` of its `tool/result` event.
        seq: u64,
        /// The result as the log holds it and the model will read it.
        record: Arc<ToolResultRecord>,
    },
}

/// Where live events go (a UI, a channel, a stream of an embedder's own). Called on the
/// task that drives the turn, in the order things happen; it must not block, and a sink
/// that stopped listening does not stop the turn.
pub trait LiveSink: Send + Sync {
    /// Takes the next event.
    fn event(&self, event: LiveEvent);
}

impl LiveSink for mpsc::UnboundedSender<LiveEvent> {
    fn event(&self, event: LiveEvent) {
        // A UI that stopped listening does not stop the batch.
        let _ = self.send(event);
    }
}

/// A shared live sink, as the loop and the scheduler take it.
pub type Live = Arc<dyn LiveSink>;

/// The committed results of a batch, in model order.
#[derive(Debug)]
pub struct BatchOutcome {
    /// One per call of the batch, whatever became of it.
    pub results: Vec<CommittedResult>,
}

/// Runs batches through a pipeline.
pub struct Scheduler {
    pipeline: Arc<Pipeline>,
    config: SchedulerConfig,
}

impl Scheduler {
    /// Runs every batch through `pipeline`, which records each call's facts, under
    /// `config`.
    pub fn new(pipeline: Arc<Pipeline>, config: SchedulerConfig) -> Self {
        Self { pipeline, config }
    }

    /// Commits every call of a cut-off assistant message as `TRUNCATED_CALL`, in order,
    /// without running anything.
    pub async fn run_truncated(
        &self,
        tools: &ToolSet,
        calls: Vec<CallRequest>,
    ) -> Result<BatchOutcome, PipelineError> {
        let mut results = Vec::with_capacity(calls.len());
        for call in calls {
            let settled = self.pipeline.record_truncated(tools, call).await?;
            results.push(self.pipeline.finish(settled).await?);
        }
        Ok(BatchOutcome { results })
    }

    /// Runs one batch. `Err` is an internal failure (the log refused a write): nothing new
    /// was started after it, what ran was drained, and no result was fabricated.
    pub async fn run_batch(
        &self,
        tools: &ToolSet,
        calls: Vec<CallRequest>,
        cancel: CancellationToken,
        live: Option<Live>,
    ) -> Result<BatchOutcome, PipelineError> {
        let (progress_tx, mut progress_rx) = mpsc::unbounded_channel::<ProgressUpdate>();
        let control = BatchControl {
            cancel: cancel.clone(),
            progress: ProgressSink::channel(progress_tx),
        };
        let emitter = Emitter(live.as_ref());
        let mut batch = Batch::new(calls, &self.config);
        // The futures in flight: one preparation, one commit being handed to the log, the
        // handed results waiting to be durable (the next commit does not wait for the
        // previous one's sync, so one sync covers many commits; their answers come in `seq`
        // order, so only the front is watched), and the running bodies.
        // The one preparation and the one commit live in slots of this future, not in a box
        // per call (each was 1.3-1.5 KB, past the allocator's thread cache).
        let mut preparing = pin!(None);
        let mut committing = pin!(None);
        let mut durable: VecDeque<PendingCommit<'_>> = VecDeque::new();
        let mut bodies = FuturesUnordered::new();

        loop {
            batch.stop_if_cancelled(cancel.is_cancelled());
            // Commit, strictly in model order. The commit runs inside the wait below, so
            // bodies keep running while commits wait for their sync.
            if committing.is_none()
                && let Some(next) = batch.commit()
            {
                committing.set(Some(self.commit_of(tools, next)));
            }
            if batch.all_committed(durable.is_empty())
                || batch.failed_and_idle(
                    preparing.is_none() && committing.is_none() && durable.is_empty(),
                )
            {
                break;
            }
            batch.start(emitter, |index, ready| {
                let (pipeline, control) = (&self.pipeline, &control);
                bodies.push(async move { (index, pipeline.dispatch(ready, control).await) });
            });
            if preparing.is_none()
                && let Some(request) = batch.prepare()
            {
                preparing.set(Some(self.pipeline.prepare(tools, request, &control)));
            }

            // What is ready at once (most work of trivial calls) is taken without the wait.
            let wake = match ready_now(
                &mut durable,
                committing.as_mut(),
                preparing.as_mut(),
                &mut bodies,
            ) {
                Some(wake) => wake,
                None => tokio::select! {
                    committed = next_durable(&mut durable) => Wake::Durable(committed),
                    handed = next_in(committing.as_mut()) => Wake::Committing(handed),
                    prepared = next_in(preparing.as_mut()) => Wake::Prepared(prepared),
                    Some(joined) = bodies.next(), if !bodies.is_empty() => Wake::Body(joined),
                    Some(update) = progress_rx.recv() => Wake::Progress(update),
                    () = cancel.cancelled(), if !batch.stopped() => Wake::Cancelled,
                },
            };
            match wake {
                Wake::Committing(handed) => durable.extend(batch.handed(handed)),
                Wake::Durable(committed) => batch.durable(committed, emitter),
                Wake::Prepared(prepared) => batch.prepared(prepared, emitter),
                Wake::Body((index, settled)) => {
                    batch.settled(index, settled, &mut progress_rx, emitter);
                }
                Wake::Progress(update) => batch.progress(update, emitter),
                Wake::Cancelled => {}
            }
        }

        // Drain whatever still runs after an internal failure; its results are not committed
        // out of order, and none is fabricated: recovery classifies those calls later.
        while bodies.next().await.is_some() {}
        let results = batch.end()?;
        for committed in &results {
            self.pipeline.log_context(committed).await?;
        }
        Ok(BatchOutcome { results })
    }

    /// The commit of `next`: handed to the log (a call a stopped batch never prepared is
    /// recorded first).
    async fn commit_of<'a>(
        &'a self,
        tools: &'a ToolSet,
        next: ToCommit,
    ) -> Result<PendingCommit<'a>, PipelineError> {
        let settled = match next {
            ToCommit::Settled(settled) => settled,
            ToCommit::NeverPrepared(request, reason) => {
                self.pipeline
                    .record_not_executed(tools, request, reason)
                    .await?
            }
        };
        Ok(self.pipeline.begin_commit(settled).await)
    }
}

/// What woke the driver.
enum Wake<'a> {
    /// A commit handed its result to the log.
    Committing(Result<PendingCommit<'a>, PipelineError>),
    /// The oldest handed result is durable: committed.
    Durable(Result<CommittedResult, PipelineError>),
    Prepared(Result<Preparation, PipelineError>),
    Body((usize, Result<SettledCall, PipelineError>)),
    Progress(ProgressUpdate),
    Cancelled,
}

/// Polls the oldest pending commit, the commit, the preparation and the bodies once without
/// a waker of ours. Anything still pending is polled again by the wait that follows, which
/// registers the real waker, so no wake-up is lost.
fn ready_now<'a, B, C, P>(
    durable: &mut VecDeque<PendingCommit<'a>>,
    committing: Pin<&mut Option<C>>,
    preparing: Pin<&mut Option<P>>,
    bodies: &mut FuturesUnordered<B>,
) -> Option<Wake<'a>>
where
    B: Future<Output = (usize, Result<SettledCall, PipelineError>)>,
    C: Future<Output = Result<PendingCommit<'a>, PipelineError>>,
    P: Future<Output = Result<Preparation, PipelineError>>,
{
    let mut cx = Context::from_waker(Waker::noop());
    if let Some(pending) = durable.front_mut()
        && let Poll::Ready(committed) = Pin::new(pending).poll(&mut cx)
    {
        durable.pop_front();
        return Some(Wake::Durable(committed));
    }
    if let Some(handed) = poll_slot(committing, &mut cx) {
        return Some(Wake::Committing(handed));
    }
    if let Some(prepared) = poll_slot(preparing, &mut cx) {
        return Some(Wake::Prepared(prepared));
    }
    if !bodies.is_empty()
        && let Poll::Ready(Some(settled)) = bodies.poll_next_unpin(&mut cx)
    {
        return Some(Wake::Body(settled));
    }
    None
}

/// The oldest pending commit, once durable; never, while there is none.
async fn next_durable(
    durable: &mut VecDeque<PendingCommit<'_>>,
) -> Result<CommittedResult, PipelineError> {
    match durable.front_mut() {
        Some(pending) => {
            let committed = pending.await;
            durable.pop_front();
            committed
        }
        None => pending().await,
    }
}

/// The outcome of the future in `slot`, which is then emptied; never, while it is empty.
async fn next_in<F: Future>(mut slot: Pin<&mut Option<F>>) -> F::Output {
    match slot.as_mut().as_pin_mut() {
        Some(future) => {
            let outcome = future.await;
            slot.set(None);
            outcome
        }
        None => pending().await,
    }
}

/// Polls the future in `slot` once; its outcome if it is done (the slot is then emptied).
fn poll_slot<F: Future>(mut slot: Pin<&mut Option<F>>, cx: &mut Context<'_>) -> Option<F::Output> {
    let outcome = match slot.as_mut().as_pin_mut()?.poll(cx) {
        Poll::Ready(outcome) => outcome,
        Poll::Pending => return None,
    };
    slot.set(None);
    Some(outcome)
}
