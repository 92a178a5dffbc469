//! One batch: prepare in model order, start as concurrency allows, commit in model order.
//!
//! One driver task owns all the batch's state (no locks): it prepares the next call, starts
//! every prepared call whose concurrency allows, commits every settled call whose turn has
//! come, and otherwise waits for the next thing to happen (a preparation, a body settling,
//! the cancel, a progress update). Bodies are polled by the driver itself (no task per call:
//! a spawn costs as much as the rest of a trivial call); a body that must not share the
//! driver's thread runs as a task of its own through the pipeline's `BodyExecution::Task`.

use std::collections::{HashSet, VecDeque};
use std::future::{Future, pending};
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::admission;
use crate::window::Window;
use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::{CallId, ErrorCode, ToolResultRecord};

use crate::model::ModelDelta;
use toolrail_tools_core::{
    BatchControl, CallRequest, CommittedResult, Concurrency, PendingCommit, Pipeline,
    PipelineError, Preparation, ProgressSink, ProgressUpdate, ReadyCall, SettledCall, ToolSet,
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
        call_id: CallId,
        index: u32,
        name: String,
        arguments: Arc<Value>,
    },
    /// As calls start.
    Started { call_id: CallId },
    Progress {
        call_id: CallId,
        data: serde_json::Value,
    },
    /// In completion order.
    Finished { call_id: CallId },
    /// In model order, once durable: the record the log holds.
    Committed {
        call_id: CallId,
        seq: u64,
        record: Arc<ToolResultRecord>,
    },
}

/// Where live events go (a UI, a channel, a stream of an embedder's own). Called on the
/// task that drives the turn, in the order things happen; it must not block, and a sink
/// that stopped listening does not stop the turn.
pub trait LiveSink: Send + Sync {
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
    pub results: Vec<CommittedResult>,
}

/// Runs batches through a pipeline.
pub struct Scheduler {
    pipeline: Arc<Pipeline>,
    config: SchedulerConfig,
}

enum Slot {
    Waiting(CallRequest),
    Preparing,
    /// Prepared, with its concurrency as last read.
    Ready(ReadyCall, Concurrency),
    Running(Concurrency),
    Settled(SettledCall),
    Committing,
    Committed,
    /// Its dispatch failed inside the pipeline: no result is fabricated.
    Lost,
}

/// The one preparation or the one commit being handed to the log.
type InFlight<'a, T> = Pin<Box<dyn Future<Output = Result<T, PipelineError>> + Send + 'a>>;
type Preparing<'a> = InFlight<'a, Preparation>;
/// A commit up to the moment its result is handed to the log.
type Committing<'a> = InFlight<'a, PendingCommit<'a>>;

const CANCELLED: &str = "the batch was cancelled before this call started; it did not run";
const REJECTED: &str =
    "an earlier call of this batch was rejected, which stopped the batch; this call did not run";

impl Scheduler {
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
        let emit = |event: LiveEvent| {
            if let Some(live) = &live {
                live.event(event);
            }
        };
        let total = calls.len();
        let mut slots: Vec<Slot> = calls.into_iter().map(Slot::Waiting).collect();
        let (mut next_prepare, mut next_commit, mut running) = (0usize, 0usize, 0usize);
        let mut preparing: Option<Preparing<'_>> = None;
        let mut committing: Option<Committing<'_>> = None;
        // Results in the log's order that wait to be durable: the next commit does not wait
        // for the previous one's sync, so one sync covers many commits. Their answers come
        // in `seq` order, so only the front is watched.
        let mut durable: VecDeque<PendingCommit<'_>> = VecDeque::new();
        let mut bodies = FuturesUnordered::new();
        let mut stop_reason: Option<&'static str> = None;
        let mut failure: Option<PipelineError> = None;
        let mut finished = Finished::default();
        let mut results = Vec::with_capacity(total);
        // Which calls are ready, which stand in others' way, and whether an exclusive call
        // (found when prepared or when started) pauses preparation until it commits.
        let mut window = Window::new(total);

        loop {
            if stop_reason.is_none() && cancel.is_cancelled() {
                stop_reason = Some(CANCELLED);
            }
            if let Some(reason) = stop_reason {
                // Prepared calls that never started settle at once, as not executed; they
                // all stand between the next commit and the next preparation.
                for index in window.take_ready() {
                    if let Some(slot) = slots.get_mut(index)
                        && let Slot::Ready(ready, _) = std::mem::replace(slot, Slot::Preparing)
                    {
                        *slot = Slot::Settled(ready.not_executed(reason));
                    }
                }
            }

            // Commit, strictly in model order. The commit runs inside the wait below, so bodies
            // keep running while commits wait for their sync.
            if committing.is_none() && next_commit < total && failure.is_none() {
                match std::mem::replace(&mut slots[next_commit], Slot::Committing) {
                    Slot::Settled(settled) => {
                        let pipeline = &self.pipeline;
                        committing =
                            Some(Box::pin(
                                async move { Ok(pipeline.begin_commit(settled).await) },
                            ))
                    }
                    Slot::Waiting(request) if stop_reason.is_some() => {
                        let reason = stop_reason.unwrap_or(CANCELLED);
                        let pipeline = &self.pipeline;
                        committing = Some(Box::pin(async move {
                            let settled =
                                pipeline.record_not_executed(tools, request, reason).await?;
                            Ok(pipeline.begin_commit(settled).await)
                        }));
                    }
                    other @ (Slot::Waiting(_)
                    | Slot::Preparing
                    | Slot::Ready(..)
                    | Slot::Running(_)
                    | Slot::Committing
                    | Slot::Committed
                    | Slot::Lost) => slots[next_commit] = other,
                }
            }
            if next_commit == total && durable.is_empty() {
                break;
            }
            if failure.is_some()
                && running == 0
                && preparing.is_none()
                && committing.is_none()
                && durable.is_empty()
            {
                break;
            }

            // Start what may start.
            if stop_reason.is_none() && failure.is_none() {
                let mut from = next_commit;
                while running < self.config.max_parallel.get() {
                    let Some(index) = window.next_candidate(from) else {
                        break;
                    };
                    from = index + 1;
                    if !matches!(slots[index], Slot::Ready(..)) {
                        continue;
                    }
                    let Slot::Ready(ready, _) =
                        std::mem::replace(&mut slots[index], Slot::Preparing)
                    else {
                        continue;
                    };
                    // Concurrency is re-read right before the start; a call that turned
                    // exclusive becomes a barrier here.
                    let concurrency = self.concurrency_of(&ready);
                    window.read(index, &concurrency);
                    if !self.may_start(&slots, &window, running, next_commit, index, &concurrency) {
                        slots[index] = Slot::Ready(ready, concurrency);
                        continue;
                    }
                    window.started(index);
                    emit(LiveEvent::Started {
                        call_id: ready.identity().call_id.clone(),
                    });
                    slots[index] = Slot::Running(concurrency);
                    running += 1;
                    let (pipeline, control) = (&self.pipeline, &control);
                    bodies.push(async move { (index, pipeline.dispatch(ready, control).await) });
                }
            }

            // Prepare the next call, unless an exclusive call must commit first; preparation
            // runs ahead of execution by at most the cap, so the window stays small.
            let waiting_to_start = window.ready_count();
            if preparing.is_none()
                && stop_reason.is_none()
                && failure.is_none()
                && next_prepare < total
                && admission::may_prepare(window.exclusive_uncommitted())
                && waiting_to_start < self.config.max_parallel.get()
            {
                if let Slot::Waiting(request) =
                    std::mem::replace(&mut slots[next_prepare], Slot::Preparing)
                {
                    preparing = Some(Box::pin(self.pipeline.prepare(tools, request, &control)));
                }
                next_prepare += 1;
            }

            // What is ready at once (most work of trivial calls) is taken without the wait.
            let wake = match ready_now(&mut durable, &mut committing, &mut preparing, &mut bodies) {
                Some(wake) => wake,
                None => tokio::select! {
                    committed = next_durable(&mut durable) => Wake::Durable(committed),
                    handed = next_of(&mut committing) => Wake::Committing(handed),
                    prepared = next_of(&mut preparing) => Wake::Prepared(prepared),
                    Some(joined) = bodies.next(), if !bodies.is_empty() => Wake::Body(joined),
                    Some(update) = progress_rx.recv() => Wake::Progress(update),
                    () = cancel.cancelled(), if stop_reason.is_none() => Wake::Cancelled,
                },
            };
            match wake {
                Wake::Committing(handed) => {
                    committing = None;
                    match handed {
                        Ok(pending) => {
                            durable.push_back(pending);
                            slots[next_commit] = Slot::Committed;
                            window.committed(next_commit);
                            next_commit += 1;
                            // A stopped batch commits calls it never prepared.
                            next_prepare = next_prepare.max(next_commit);
                        }
                        Err(error) => {
                            slots[next_commit] = Slot::Lost;
                            failure.get_or_insert(error);
                        }
                    }
                }
                Wake::Durable(committed) => match committed {
                    Ok(committed) => {
                        emit(LiveEvent::Committed {
                            call_id: committed.identity().call_id.clone(),
                            seq: committed.seq(),
                            record: Arc::clone(committed.record()),
                        });
                        results.push(committed);
                    }
                    Err(error) => {
                        failure.get_or_insert(error);
                    }
                },
                Wake::Prepared(prepared) => {
                    preparing = None;
                    let index = next_prepare - 1;
                    match prepared {
                        Ok(Preparation::Ready(ready)) => {
                            let concurrency = self.concurrency_of(&ready);
                            window.prepared(index, &concurrency);
                            if live.is_some() {
                                emit(LiveEvent::Prepared {
                                    call_id: ready.identity().call_id.clone(),
                                    index: ready.identity().index,
                                    name: ready.identity().name.clone(),
                                    arguments: ready.shared_arguments(),
                                });
                            }
                            slots[index] = Slot::Ready(ready, concurrency);
                        }
                        Ok(Preparation::Refused(refused)) => {
                            if self.config.stop_batch_on_reject
                                && refused.error_code() == Some(&ErrorCode::ApprovalRejected)
                            {
                                stop_reason.get_or_insert(REJECTED);
                            }
                            if live.is_some() {
                                emit(LiveEvent::Prepared {
                                    call_id: refused.identity().call_id.clone(),
                                    index: refused.identity().index,
                                    name: refused.identity().name.clone(),
                                    arguments: refused.shared_arguments(),
                                });
                            }
                            slots[index] = Slot::Settled(refused);
                        }
                        Err(error) => {
                            slots[index] = Slot::Lost;
                            failure.get_or_insert(error);
                        }
                    }
                }
                Wake::Body((index, settled)) => {
                    running -= 1;
                    window.settled(index);
                    match settled {
                        Ok(settled) => {
                            let call_id = settled.identity().call_id.clone();
                            // Progress sent before the body settled is delivered first.
                            drain_progress(&mut progress_rx, &mut finished, &emit);
                            finished.insert(&call_id);
                            emit(LiveEvent::Finished { call_id });
                            slots[index] = Slot::Settled(settled);
                        }
                        Err(error) => {
                            slots[index] = Slot::Lost;
                            failure.get_or_insert(error);
                        }
                    }
                }
                Wake::Progress(update) => forward_progress(update, &mut finished, &emit),
                Wake::Cancelled => {}
            }
        }

        // Drain whatever still runs after an internal failure; its results are not committed
        // out of order, and none is fabricated: recovery classifies those calls later.
        while bodies.next().await.is_some() {}
        if let Some(error) = failure {
            return Err(error);
        }
        for committed in &results {
            self.pipeline.log_context(committed).await?;
        }
        Ok(BatchOutcome { results })
    }

    fn concurrency_of(&self, ready: &ReadyCall) -> Concurrency {
        if self.config.sequential || self.config.max_parallel == NonZeroUsize::MIN {
            Concurrency::Exclusive
        } else {
            ready.concurrency()
        }
    }

    /// Whether the call at `index` may start now: the one rule ([`admission::may_start`])
    /// over the ready and running calls in its way. Every call before a ready one is
    /// prepared already (preparation is in model order, one at a time), so only those the
    /// window names as barriers are looked at.
    fn may_start(
        &self,
        slots: &[Slot],
        window: &Window,
        running: usize,
        next_commit: usize,
        index: usize,
        concurrency: &Concurrency,
    ) -> bool {
        let turn = admission::StartTurn {
            next_to_commit: index == next_commit,
            running,
            max_parallel: self.config.max_parallel.get(),
        };
        let in_way = window
            .barriers_before(index)
            .filter_map(|earlier| match slots.get(earlier) {
                Some(Slot::Running(theirs) | Slot::Ready(_, theirs)) => Some(theirs),
                Some(
                    Slot::Waiting(_)
                    | Slot::Preparing
                    | Slot::Settled(_)
                    | Slot::Committing
                    | Slot::Committed
                    | Slot::Lost,
                )
                | None => None,
            });
        admission::may_start(concurrency, turn, in_way)
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
fn ready_now<'a, B>(
    durable: &mut VecDeque<PendingCommit<'a>>,
    committing: &mut Option<Committing<'a>>,
    preparing: &mut Option<Preparing<'_>>,
    bodies: &mut FuturesUnordered<B>,
) -> Option<Wake<'a>>
where
    B: Future<Output = (usize, Result<SettledCall, PipelineError>)>,
{
    let mut cx = Context::from_waker(Waker::noop());
    if let Some(pending) = durable.front_mut()
        && let Poll::Ready(committed) = Pin::new(pending).poll(&mut cx)
    {
        durable.pop_front();
        return Some(Wake::Durable(committed));
    }
    if let Some(future) = committing.as_mut()
        && let Poll::Ready(handed) = future.as_mut().poll(&mut cx)
    {
        return Some(Wake::Committing(handed));
    }
    if let Some(future) = preparing.as_mut()
        && let Poll::Ready(prepared) = future.as_mut().poll(&mut cx)
    {
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

/// The outcome of the future in flight; never, while there is none.
async fn next_of<T>(in_flight: &mut Option<InFlight<'_, T>>) -> Result<T, PipelineError> {
    match in_flight {
        Some(future) => future.as_mut().await,
        None => pending().await,
    }
}

/// The calls whose bodies have settled. Most batches see no progress at all, so the ids are
/// only listed (a push per call) until the first update asks; from then on a set answers.
#[derive(Default)]
struct Finished {
    listed: Vec<CallId>,
    set: Option<HashSet<CallId>>,
}

impl Finished {
    fn insert(&mut self, call_id: &CallId) {
        match &mut self.set {
            Some(set) => {
                set.insert(call_id.clone());
            }
            None => self.listed.push(call_id.clone()),
        }
    }

    fn contains(&mut self, call_id: &CallId) -> bool {
        let listed = &mut self.listed;
        self.set
            .get_or_insert_with(|| listed.drain(..).collect())
            .contains(call_id)
    }
}

fn drain_progress(
    progress: &mut mpsc::UnboundedReceiver<ProgressUpdate>,
    finished: &mut Finished,
    emit: &impl Fn(LiveEvent),
) {
    while let Ok(update) = progress.try_recv() {
        forward_progress(update, finished, emit);
    }
}

/// Progress of a call that has finished is dropped: the UI must not see it after the end.
fn forward_progress(update: ProgressUpdate, finished: &mut Finished, emit: &impl Fn(LiveEvent)) {
    if !finished.contains(&update.call_id) {
        emit(LiveEvent::Progress {
            call_id: update.call_id,
            data: update.data,
        });
    }
}
