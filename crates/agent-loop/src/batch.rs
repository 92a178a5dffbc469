//! One batch's state, owned by the scheduler's driver: where each call stands, what the
//! batch decided (a stop, an internal failure) and what it committed. One method per stage
//! of the driver's loop, named for it (`commit`, `start`, `prepare`, and what each wake-up
//! brings: `prepared`, `settled`, `handed`, `durable`); the driver keeps only the futures in
//! flight, so nothing here borrows from itself.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::Arc;

use tokio::sync::mpsc;
use toolrail_session_log::{CallId, ErrorCode};
use toolrail_tools_core::{
    CallRequest, CommittedResult, Concurrency, PipelineError,
    context::ProgressUpdate,
    pipeline::{PendingCommit, Preparation, ReadyCall, SettledCall},
};

use crate::admission;
use crate::scheduler::{Live, LiveEvent, SchedulerConfig};
use crate::window::Window;

const CANCELLED: &str = "the batch was cancelled before this call started; it did not run";
const REJECTED: &str =
    "an earlier call of this batch was rejected, which stopped the batch; this call did not run";

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

/// What the next commit is made from.
pub(crate) enum ToCommit {
    /// A call that settled (ran, or was refused).
    Settled(SettledCall),
    /// A call a stopped batch never prepared: recorded, then committed as not executed.
    NeverPrepared(CallRequest, &'static str),
}

/// Where live events go, if anywhere.
#[derive(Clone, Copy)]
pub(crate) struct Emitter<'a>(pub(crate) Option<&'a Live>);

impl Emitter<'_> {
    pub(crate) fn emit(&self, event: LiveEvent) {
        if let Some(live) = self.0 {
            live.event(event);
        }
    }

    /// Whether anyone listens (events that cost something to build are built only then).
    fn listening(&self) -> bool {
        self.0.is_some()
    }
}

pub(crate) struct Batch {
    slots: Vec<Slot>,
    /// Which calls are ready, which stand in others' way, and whether an exclusive call
    /// (found when prepared or when started) pauses preparation until it commits.
    window: Window,
    next_prepare: usize,
    next_commit: usize,
    running: usize,
    max_parallel: NonZeroUsize,
    sequential: bool,
    stop_batch_on_reject: bool,
    stop_reason: Option<&'static str>,
    failure: Option<PipelineError>,
    finished: Finished,
    results: Vec<CommittedResult>,
}

impl Batch {
    pub(crate) fn new(calls: Vec<CallRequest>, config: &SchedulerConfig) -> Self {
        let total = calls.len();
        Self {
            slots: calls.into_iter().map(Slot::Waiting).collect(),
            window: Window::new(total),
            next_prepare: 0,
            next_commit: 0,
            running: 0,
            max_parallel: config.max_parallel,
            sequential: config.sequential,
            stop_batch_on_reject: config.stop_batch_on_reject,
            stop_reason: None,
            failure: None,
            finished: Finished::default(),
            results: Vec::with_capacity(total),
        }
    }

    /// The batch was cancelled: it stops (once), and every prepared call that never
    /// started settles at once as not executed.
    pub(crate) fn stop_if_cancelled(&mut self, cancelled: bool) {
        if self.stop_reason.is_none() && cancelled {
            self.stop_reason = Some(CANCELLED);
        }
        if let Some(reason) = self.stop_reason {
            // They all stand between the next commit and the next preparation.
            for index in self.window.take_ready() {
                if let Some(slot) = self.slots.get_mut(index)
                    && let Slot::Ready(ready, _) = std::mem::replace(slot, Slot::Preparing)
                {
                    *slot = Slot::Settled(ready.not_executed(reason));
                }
            }
        }
    }

    /// Whether the batch stopped (cancelled, or stopped by a rejection).
    pub(crate) fn stopped(&self) -> bool {
        self.stop_reason.is_some()
    }

    /// Commit: the next call in model order, once it settled (or, in a stopped batch,
    /// never prepared). `None` while its turn has not come or a failure stops commits.
    pub(crate) fn commit(&mut self) -> Option<ToCommit> {
        if self.failure.is_some() || self.next_commit >= self.slots.len() {
            return None;
        }
        let next = self.next_commit;
        match std::mem::replace(&mut self.slots[next], Slot::Committing) {
            Slot::Settled(settled) => Some(ToCommit::Settled(settled)),
            Slot::Waiting(request) if self.stop_reason.is_some() => Some(ToCommit::NeverPrepared(
                request,
                self.stop_reason.unwrap_or(CANCELLED),
            )),
            other @ (Slot::Waiting(_)
            | Slot::Preparing
            | Slot::Ready(..)
            | Slot::Running(_)
            | Slot::Committing
            | Slot::Committed
            | Slot::Lost) => {
                self.slots[next] = other;
                None
            }
        }
    }

    /// Every call committed and nothing waits to be durable.
    pub(crate) fn all_committed(&self, durable_empty: bool) -> bool {
        self.next_commit == self.slots.len() && durable_empty
    }

    /// An internal failure, and nothing of the batch still in flight.
    pub(crate) fn failed_and_idle(&self, nothing_in_flight: bool) -> bool {
        self.failure.is_some() && self.running == 0 && nothing_in_flight
    }

    /// Start: every ready call the admission rule lets start now, in model order, handed to
    /// `launch` with its index.
    pub(crate) fn start(&mut self, emitter: Emitter<'_>, mut launch: impl FnMut(usize, ReadyCall)) {
        if self.stop_reason.is_some() || self.failure.is_some() {
            return;
        }
        let mut from = self.next_commit;
        while self.running < self.max_parallel.get() {
            let Some(index) = self.window.next_candidate(from) else {
                break;
            };
            from = index + 1;
            if !matches!(self.slots[index], Slot::Ready(..)) {
                continue;
            }
            let Slot::Ready(ready, _) = std::mem::replace(&mut self.slots[index], Slot::Preparing)
            else {
                continue;
            };
            // Concurrency is re-read right before the start; a call that turned exclusive
            // becomes a barrier here.
            let concurrency = self.concurrency_of(&ready);
            self.window.read(index, &concurrency);
            if !self.may_start(index, &concurrency) {
                self.slots[index] = Slot::Ready(ready, concurrency);
                continue;
            }
            self.window.started(index);
            emitter.emit(LiveEvent::Started {
                call_id: ready.identity().call_id.clone(),
            });
            self.slots[index] = Slot::Running(concurrency);
            self.running += 1;
            launch(index, ready);
        }
    }

    /// Prepare: the next call in model order, unless an exclusive call must commit first;
    /// preparation runs ahead of execution by at most the cap, so the window stays small.
    /// Call only while no preparation is in flight.
    pub(crate) fn prepare(&mut self) -> Option<CallRequest> {
        if self.stop_reason.is_some()
            || self.failure.is_some()
            || self.next_prepare >= self.slots.len()
            || !admission::may_prepare(self.window.exclusive_uncommitted())
            || self.window.ready_count() >= self.max_parallel.get()
        {
            return None;
        }
        let index = self.next_prepare;
        self.next_prepare += 1;
        match std::mem::replace(&mut self.slots[index], Slot::Preparing) {
            Slot::Waiting(request) => Some(request),
            other @ (Slot::Preparing
            | Slot::Ready(..)
            | Slot::Running(_)
            | Slot::Settled(_)
            | Slot::Committing
            | Slot::Committed
            | Slot::Lost) => {
                self.slots[index] = other;
                None
            }
        }
    }

    /// The preparation in flight ended: the call is ready, or refused (a rejection may stop
    /// the batch), or the log failed.
    pub(crate) fn prepared(
        &mut self,
        prepared: Result<Preparation, PipelineError>,
        emitter: Emitter<'_>,
    ) {
        let index = self.next_prepare - 1;
        match prepared {
            Ok(Preparation::Ready(ready)) => {
                let concurrency = self.concurrency_of(&ready);
                self.window.prepared(index, &concurrency);
                if emitter.listening() {
                    emitter.emit(LiveEvent::Prepared {
                        call_id: ready.identity().call_id.clone(),
                        index: ready.identity().index,
                        name: ready.identity().name.clone(),
                        arguments: ready.shared_arguments(),
                    });
                }
                self.slots[index] = Slot::Ready(ready, concurrency);
            }
            Ok(Preparation::Refused(refused)) => {
                if self.stop_batch_on_reject
                    && refused.error_code() == Some(&ErrorCode::ApprovalRejected)
                {
                    self.stop_reason.get_or_insert(REJECTED);
                }
                if emitter.listening() {
                    emitter.emit(LiveEvent::Prepared {
                        call_id: refused.identity().call_id.clone(),
                        index: refused.identity().index,
                        name: refused.identity().name.clone(),
                        arguments: refused.shared_arguments(),
                    });
                }
                self.slots[index] = Slot::Settled(refused);
            }
            Err(error) => {
                self.slots[index] = Slot::Lost;
                self.failure.get_or_insert(error);
            }
        }
    }

    /// A body settled (progress it sent before is delivered first), or its dispatch failed.
    pub(crate) fn settled(
        &mut self,
        index: usize,
        settled: Result<SettledCall, PipelineError>,
        progress: &mut mpsc::UnboundedReceiver<ProgressUpdate>,
        emitter: Emitter<'_>,
    ) {
        self.running -= 1;
        self.window.settled(index);
        match settled {
            Ok(settled) => {
                let call_id = settled.identity().call_id.clone();
                while let Ok(update) = progress.try_recv() {
                    self.progress(update, emitter);
                }
                self.finished.insert(&call_id);
                emitter.emit(LiveEvent::Finished { call_id });
                self.slots[index] = Slot::Settled(settled);
            }
            Err(error) => {
                self.slots[index] = Slot::Lost;
                self.failure.get_or_insert(error);
            }
        }
    }

    /// The commit in flight handed its result to the log: the next call's turn comes (the
    /// result waits to be durable in `pending`), or the log failed.
    pub(crate) fn handed<'a>(
        &mut self,
        handed: Result<PendingCommit<'a>, PipelineError>,
    ) -> Option<PendingCommit<'a>> {
        let committed = self.next_commit;
        match handed {
            Ok(pending) => {
                self.slots[committed] = Slot::Committed;
                self.window.committed(committed);
                self.next_commit += 1;
                // A stopped batch commits calls it never prepared.
                self.next_prepare = self.next_prepare.max(self.next_commit);
                Some(pending)
            }
            Err(error) => {
                self.slots[committed] = Slot::Lost;
                self.failure.get_or_insert(error);
                None
            }
        }
    }

    /// The oldest handed result is durable: committed, and shown.
    pub(crate) fn durable(
        &mut self,
        committed: Result<CommittedResult, PipelineError>,
        emitter: Emitter<'_>,
    ) {
        match committed {
            Ok(committed) => {
                emitter.emit(LiveEvent::Committed {
                    call_id: committed.identity().call_id.clone(),
                    seq: committed.seq(),
                    record: Arc::clone(committed.record()),
                });
                self.results.push(committed);
            }
            Err(error) => {
                self.failure.get_or_insert(error);
            }
        }
    }

    /// Progress of a call that has finished is dropped: the UI must not see it after the end.
    pub(crate) fn progress(&mut self, update: ProgressUpdate, emitter: Emitter<'_>) {
        if !self.finished.contains(&update.call_id) {
            emitter.emit(LiveEvent::Progress {
                call_id: update.call_id,
                data: update.data,
            });
        }
    }

    /// What the batch ended with: its results in model order, or its internal failure.
    pub(crate) fn end(self) -> Result<Vec<CommittedResult>, PipelineError> {
        match self.failure {
            Some(error) => Err(error),
            None => Ok(self.results),
        }
    }

    fn concurrency_of(&self, ready: &ReadyCall) -> Concurrency {
        if self.sequential || self.max_parallel == NonZeroUsize::MIN {
            Concurrency::Exclusive
        } else {
            ready.concurrency()
        }
    }

    /// Whether the call at `index` may start now: the one rule ([`admission::may_start`])
    /// over the ready and running calls in its way. Every call before a ready one is
    /// prepared already (preparation is in model order, one at a time), so only those the
    /// window names as barriers are looked at.
    fn may_start(&self, index: usize, concurrency: &Concurrency) -> bool {
        let turn = admission::StartTurn {
            next_to_commit: index == self.next_commit,
            running: self.running,
            max_parallel: self.max_parallel.get(),
        };
        let in_way = self.window.barriers_before(index).filter_map(|earlier| {
            match self.slots.get(earlier) {
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
            }
        });
        admission::may_start(concurrency, turn, in_way)
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
