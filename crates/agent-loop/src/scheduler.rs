//! One batch: prepare in model order, start as concurrency allows, commit in model order.
//!
//! One driver task owns all the batch's state (no locks): it prepares the next call, starts
//! every prepared call whose concurrency allows, commits every settled call whose turn has
//! come, and otherwise waits for the next thing to happen (a preparation, a body settling,
//! the cancel, a progress update). Bodies run as tasks of their own, so they overlap and a
//! body that blocks its thread does not stop the driver.

use std::collections::HashSet;
use std::future::{Future, pending};
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use toolrail_session_log::{CallId, ErrorCode};
use toolrail_tools_core::{
    BatchControl, CallRequest, CommittedResult, Concurrency, Pipeline, PipelineError, Preparation,
    ProgressSink, ProgressUpdate, ReadyCall, SettledCall, ToolSet,
};

/// How a batch runs.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// At most this many bodies run at once (1 is strict serial).
    pub max_parallel: usize,
    /// A rejected approval stops the rest of the batch (`NOT_EXECUTED`).
    pub stop_batch_on_reject: bool,
    /// Every call of the batch runs alone, in model order (a tool marked sequential).
    pub sequential: bool,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_parallel: 8,
            stop_batch_on_reject: true,
            sequential: false,
        }
    }
}

/// What a UI sees while a batch runs.
#[derive(Clone, Debug, PartialEq)]
pub enum LiveEvent {
    /// In model order.
    Prepared { call_id: CallId, index: u32 },
    /// As calls start.
    Started { call_id: CallId },
    Progress {
        call_id: CallId,
        data: serde_json::Value,
    },
    /// In completion order.
    Finished { call_id: CallId },
    /// In model order.
    Committed { call_id: CallId, seq: u64 },
}

/// The committed results of a batch, in model order.
#[derive(Clone, Debug)]
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
    Ready(ReadyCall),
    Running(Concurrency),
    Settled(SettledCall),
    Committed,
    /// Its dispatch failed inside the pipeline: no result is fabricated.
    Lost,
}

type Preparing<'a> = Pin<Box<dyn Future<Output = Result<Preparation, PipelineError>> + Send + 'a>>;

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
        live: Option<mpsc::UnboundedSender<LiveEvent>>,
    ) -> Result<BatchOutcome, PipelineError> {
        let (progress_tx, mut progress_rx) = mpsc::unbounded_channel::<ProgressUpdate>();
        let control = BatchControl {
            cancel: cancel.clone(),
            progress: ProgressSink::channel(progress_tx),
        };
        let emit = |event: LiveEvent| {
            if let Some(live) = &live {
                // A UI that stopped listening does not stop the batch.
                let _ = live.send(event);
            }
        };
        let total = calls.len();
        let mut slots: Vec<Slot> = calls.into_iter().map(Slot::Waiting).collect();
        let (mut next_prepare, mut next_commit, mut running) = (0usize, 0usize, 0usize);
        let mut preparing: Option<Preparing<'_>> = None;
        let mut bodies: JoinSet<(usize, Result<SettledCall, PipelineError>)> = JoinSet::new();
        let mut stop_reason: Option<&'static str> = None;
        let mut failure: Option<PipelineError> = None;
        let mut finished: HashSet<CallId> = HashSet::new();
        let mut results = Vec::with_capacity(total);

        loop {
            if stop_reason.is_none() && cancel.is_cancelled() {
                stop_reason = Some(CANCELLED);
            }
            if let Some(reason) = stop_reason {
                // Prepared calls that never started settle at once, as not executed.
                for slot in &mut slots {
                    if let Slot::Ready(_) = slot
                        && let Slot::Ready(ready) = std::mem::replace(slot, Slot::Preparing)
                    {
                        *slot = Slot::Settled(ready.not_executed(reason));
                    }
                }
            }

            // Commit, strictly in model order.
            while next_commit < total && failure.is_none() {
                let settled = match std::mem::replace(&mut slots[next_commit], Slot::Committed) {
                    Slot::Settled(settled) => settled,
                    Slot::Waiting(request) if stop_reason.is_some() => {
                        let reason = stop_reason.unwrap_or(CANCELLED);
                        match self
                            .pipeline
                            .record_not_executed(tools, request, reason)
                            .await
                        {
                            Ok(settled) => settled,
                            Err(error) => {
                                failure = Some(error);
                                break;
                            }
                        }
                    }
                    other @ (Slot::Waiting(_)
                    | Slot::Preparing
                    | Slot::Ready(_)
                    | Slot::Running(_)
                    | Slot::Committed
                    | Slot::Lost) => {
                        slots[next_commit] = other;
                        break;
                    }
                };
                match self.pipeline.finish(settled).await {
                    Ok(committed) => {
                        emit(LiveEvent::Committed {
                            call_id: committed.identity.call_id.clone(),
                            seq: committed.seq,
                        });
                        results.push(committed);
                        next_commit += 1;
                    }
                    Err(error) => failure = Some(error),
                }
            }
            if next_commit == total {
                break;
            }
            if failure.is_some() && running == 0 && preparing.is_none() {
                break;
            }

            // Start what may start.
            if stop_reason.is_none() && failure.is_none() {
                for index in next_commit..next_prepare {
                    if !matches!(slots[index], Slot::Ready(_))
                        || running >= self.config.max_parallel
                    {
                        continue;
                    }
                    let Slot::Ready(ready) = std::mem::replace(&mut slots[index], Slot::Preparing)
                    else {
                        continue;
                    };
                    let concurrency = self.concurrency_of(&ready);
                    if !self.may_start(&slots, running, next_commit, index, &concurrency) {
                        slots[index] = Slot::Ready(ready);
                        continue;
                    }
                    emit(LiveEvent::Started {
                        call_id: ready.identity().call_id.clone(),
                    });
                    slots[index] = Slot::Running(concurrency);
                    running += 1;
                    let (pipeline, control) = (Arc::clone(&self.pipeline), control.clone());
                    bodies.spawn(async move { (index, pipeline.dispatch(ready, &control).await) });
                }
            }

            // Prepare the next call, unless an exclusive call must commit first.
            let paused = slots[next_commit..next_prepare]
                .iter()
                .any(|slot| match slot {
                    Slot::Ready(ready) => self.concurrency_of(ready) == Concurrency::Exclusive,
                    Slot::Running(concurrency) => *concurrency == Concurrency::Exclusive,
                    Slot::Waiting(_)
                    | Slot::Preparing
                    | Slot::Settled(_)
                    | Slot::Committed
                    | Slot::Lost => false,
                });
            if preparing.is_none()
                && stop_reason.is_none()
                && failure.is_none()
                && next_prepare < total
                && !paused
            {
                if let Slot::Waiting(request) =
                    std::mem::replace(&mut slots[next_prepare], Slot::Preparing)
                {
                    preparing = Some(Box::pin(self.pipeline.prepare(tools, request, &control)));
                }
                next_prepare += 1;
            }

            tokio::select! {
                prepared = next_of(&mut preparing) => {
                    preparing = None;
                    let index = next_prepare - 1;
                    match prepared {
                        Ok(Preparation::Ready(ready)) => {
                            emit(LiveEvent::Prepared { call_id: ready.identity().call_id.clone(), index: ready.identity().index });
                            slots[index] = Slot::Ready(ready);
                        }
                        Ok(Preparation::Refused(refused)) => {
                            if self.config.stop_batch_on_reject && refused.error_code() == Some(&ErrorCode::ApprovalRejected) {
                                stop_reason.get_or_insert(REJECTED);
                            }
                            emit(LiveEvent::Prepared { call_id: refused.identity().call_id.clone(), index: refused.identity().index });
                            slots[index] = Slot::Settled(refused);
                        }
                        Err(error) => {
                            slots[index] = Slot::Lost;
                            failure.get_or_insert(error);
                        }
                    }
                }
                Some(joined) = bodies.join_next(), if !bodies.is_empty() => {
                    running -= 1;
                    match joined {
                        Ok((index, Ok(settled))) => {
                            let call_id = settled.identity().call_id.clone();
                            // Progress sent before the body settled is delivered first.
                            drain_progress(&mut progress_rx, &finished, &emit);
                            finished.insert(call_id.clone());
                            emit(LiveEvent::Finished { call_id });
                            slots[index] = Slot::Settled(settled);
                        }
                        Ok((index, Err(error))) => {
                            slots[index] = Slot::Lost;
                            failure.get_or_insert(error);
                        }
                        Err(join_error) => {
                            // The pipeline catches panics of user code; a dispatch task that
                            // still dies is a bug of ours: treat it as an internal failure.
                            tracing::error!("a dispatch task ended abnormally: {join_error}");
                            failure.get_or_insert(PipelineError::Internal(format!("a dispatch task ended abnormally: {join_error}")));
                        }
                    }
                }
                Some(update) = progress_rx.recv() => {
                    if !finished.contains(&update.call_id) {
                        emit(LiveEvent::Progress { call_id: update.call_id, data: update.data });
                    }
                }
                () = cancel.cancelled(), if stop_reason.is_none() => {}
            }
        }

        // Drain whatever still runs after an internal failure; its results are not committed
        // out of order, and none is fabricated: recovery classifies those calls later.
        while bodies.join_next().await.is_some() {}
        if let Some(error) = failure {
            return Err(error);
        }
        for committed in &results {
            self.pipeline.log_context(committed).await?;
        }
        Ok(BatchOutcome { results })
    }

    fn concurrency_of(&self, ready: &ReadyCall) -> Concurrency {
        if self.config.sequential || self.config.max_parallel <= 1 {
            Concurrency::Exclusive
        } else {
            ready.concurrency()
        }
    }

    /// Whether the call at `index` may start now (DESIGN §5).
    fn may_start(
        &self,
        slots: &[Slot],
        running: usize,
        next_commit: usize,
        index: usize,
        concurrency: &Concurrency,
    ) -> bool {
        let earlier = &slots[next_commit..index];
        match concurrency {
            // Every earlier call has committed and nothing runs (a later call may have
            // started while this one still looked shared): then it runs alone.
            Concurrency::Exclusive => earlier.is_empty() && running == 0,
            // No earlier unfinished call is exclusive or holds a conflicting claim.
            Concurrency::Shared(_) => earlier.iter().all(|slot| match slot {
                Slot::Running(theirs) => concurrency.may_overlap(theirs),
                Slot::Ready(ready) => concurrency.may_overlap(&self.concurrency_of(ready)),
                Slot::Waiting(_) | Slot::Preparing => false,
                Slot::Settled(_) | Slot::Committed | Slot::Lost => true,
            }),
        }
    }
}

async fn next_of(preparing: &mut Option<Preparing<'_>>) -> Result<Preparation, PipelineError> {
    match preparing {
        Some(future) => future.as_mut().await,
        None => pending().await,
    }
}

fn drain_progress(
    progress: &mut mpsc::UnboundedReceiver<ProgressUpdate>,
    finished: &HashSet<CallId>,
    emit: &impl Fn(LiveEvent),
) {
    while let Ok(update) = progress.try_recv() {
        if !finished.contains(&update.call_id) {
            emit(LiveEvent::Progress {
                call_id: update.call_id,
                data: update.data,
            });
        }
    }
}
