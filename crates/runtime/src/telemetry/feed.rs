//! What a session's calls pay for its spans: each `turn/start` and `tool/call` is given its
//! span's ids, and every event a copy handed to a bounded channel — nothing else on the
//! calling path. A thread of the session's own takes the events in order and makes the spans
//! (`SessionSpans`) with the ids they carry, as a replay does with a log's recorded ones
//! (`replay.rs` feeds its log through this same channel). Past the bound events are dropped
//! and counted; the thread sees the gap in their numbers, ends what the turn left open and
//! skips the rest of it, so no broken tree is exported.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Weak};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{IdGenerator as _, RandomIdGenerator};
use parking_lot::Mutex;
use toolrail_session_log::event::{AssistantBlock, AssistantMessage, ToolCall, TurnStart};
use toolrail_session_log::{Event, EventData, EventDraft, TraceRef};

use super::genai::Capture;

use super::spans::{Resumption, SessionSpans};
use super::{Counters, Telemetry};

/// What the session's telemetry thread is handed, in order.
pub(super) enum Message {
    /// An event on its way to the log (or read back from it). `seq` numbers every event
    /// handed over, dropped ones too, so the thread sees a gap.
    Event { seq: u64, draft: EventDraft },
    /// The session was reopened after an interruption.
    Resumed {
        resumption: Resumption,
        at: SystemTime,
    },
    /// Everything handed over before this is made into spans: answered on the channel.
    Drained(SyncSender<()>),
    /// The session's telemetry ends, after `handed` events: the last ones may have been
    /// dropped.
    Ended { handed: u64 },
}

/// A session's channel to its telemetry thread, and the thread, to wake it.
pub(super) struct Link {
    sender: SyncSender<Message>,
    thread: Thread,
}

impl Link {
    /// Hands `message` over and wakes the thread for it (events do not wake it: see
    /// [`POLL`]).
    fn send_now(&self, message: Message) -> bool {
        let sent = self.sender.send(message).is_ok();
        self.thread.unpark();
        sent
    }
}

/// Every live session's channel, to drain them all before a flush.
pub(super) type Feeds = Mutex<Vec<Weak<Link>>>;

/// Drains every live session's channel: returns once each thread made the spans of what it
/// was handed before.
pub(super) fn drain(feeds: &Feeds) {
    let live: Vec<Arc<Link>> = {
        let mut feeds = feeds.lock();
        feeds.retain(|feed| feed.strong_count() > 0);
        feeds.iter().filter_map(Weak::upgrade).collect()
    };
    for link in live {
        let (reply, drained) = std::sync::mpsc::sync_channel(1);
        // A thread that is gone has nothing left to drain.
        if link.send_now(Message::Drained(reply)) {
            let _ = drained.recv();
        }
    }
}

/// The ids the calling path hands out, and where it is in the session.
struct Handing {
    next: u64,
    /// The open turn's trace: its calls' spans are in it.
    turn: Option<[u8; 16]>,
}

/// A session's spans, made on a thread of its own from the events handed to it: joined
/// when the session's telemetry ends (this is dropped).
pub(crate) struct SpanFeed {
    handing: Mutex<Handing>,
    /// Whether the spans carry argument text: without it a call's arguments are not copied.
    capture: Capture,
    link: Option<Arc<Link>>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
}

impl SpanFeed {
    /// Starts the thread making `spans` from what this feed is handed.
    pub(crate) fn start(telemetry: &Telemetry, spans: SessionSpans) -> std::io::Result<Self> {
        let (sender, events) = std::sync::mpsc::sync_channel(telemetry.queue);
        let counters = Arc::clone(&telemetry.counters);
        let skipped = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name("toolrail-spans".to_owned())
            .spawn(move || {
                lower_priority();
                make_spans(spans, &events, &skipped);
            })?;
        let link = Arc::new(Link {
            sender,
            thread: thread.thread().clone(),
        });
        telemetry.feeds.lock().push(Arc::downgrade(&link));
        Ok(Self {
            capture: telemetry.capture,
            handing: Mutex::new(Handing {
                next: 0,
                turn: None,
            }),
            link: Some(link),
            thread: Some(thread),
            counters,
        })
    }

    /// A reopened session (`earlier` is its log): its next turn links to the turn the
    /// interruption left open. Waits for room: it is handed once, as the session is built.
    pub(crate) fn resumed(&self, earlier: &[Event], at: SystemTime) {
        self.resume_from(Resumption::of(earlier), at);
    }

    /// As [`SpanFeed::resumed`], with the interruption already found.
    pub(crate) fn resume_from(&self, resumption: Option<Resumption>, at: SystemTime) {
        if let (Some(resumption), Some(link)) = (resumption, &self.link) {
            link.send_now(Message::Resumed { resumption, at });
        }
    }

    /// The span of the next call the session records: in the open turn's trace (a call
    /// outside a turn is a trace of its own).
    pub(crate) fn call_span(&self) -> Option<TraceRef> {
        self.link.as_ref()?;
        Some(self.handing.lock().call_ids())
    }

    /// A live event on its way to the store: its ids are written into it, and a copy is
    /// handed over, or dropped and counted when the thread is a whole queue behind.
    pub(crate) fn observe(&self, draft: &mut EventDraft) {
        let Some(link) = &self.link else { return };
        let seq = self.handing.lock().hand(draft);
        let message = Message::Event {
            seq,
            draft: for_spans(draft, self.capture),
        };
        if link.sender.try_send(message).is_err()
            && self.counters.events_dropped.fetch_add(1, Relaxed) == 0
        {
            tracing::warn!(
                "telemetry is not keeping up with the session: events past its queue are dropped and the rest of their turn is not exported (counted; the total is reported at exit)"
            );
        }
    }

    /// A recorded event, handed over whatever the wait (a replay drops nothing).
    pub(crate) fn observe_recorded(&self, mut draft: EventDraft) {
        let mut handing = self.handing.lock();
        let seq = handing.hand(&mut draft);
        if let Some(link) = &self.link {
            // The thread finds it at its next look, or is woken by the flush after it.
            let _ = link.sender.send(Message::Event { seq, draft });
        }
    }
}

impl Handing {
    /// The ids of a call's span: in the open turn's trace (a call outside a turn, one a
    /// reopened session asks again, is a trace of its own).
    fn call_ids(&self) -> TraceRef {
        TraceRef {
            trace_id: self.turn.unwrap_or_else(fresh_trace_id),
            span_id: fresh_span_id(),
        }
    }

    /// Gives a `turn/start` or a `tool/call` its span's ids (keeping those it was recorded
    /// with): the event's number.
    fn hand(&mut self, draft: &mut EventDraft) -> u64 {
        if let EventData::TurnStart(start) = &mut draft.data {
            // A turn a traced client asked for continues the client's trace.
            let caller = start
                .caller
                .filter(TraceRef::is_valid)
                .map(|caller| caller.trace_id);
            let ids = *start.trace.get_or_insert_with(|| TraceRef {
                trace_id: caller.unwrap_or_else(fresh_trace_id),
                span_id: fresh_span_id(),
            });
            self.turn = Some(ids.trace_id);
        } else if let EventData::ToolCall(call) = &mut draft.data
            && draft.call_id.is_some()
        {
            if call.trace.is_none() {
                call.trace = Some(self.call_ids());
            }
        } else if let EventData::TurnEnd(_) = &draft.data {
            self.turn = None;
        }
        let seq = self.next;
        self.next += 1;
        seq
    }
}

impl Drop for SpanFeed {
    fn drop(&mut self) {
        // The thread ends once its channel is closed and what it holds is made.
        if let Some(link) = self.link.take() {
            let handed = self.handing.lock().next;
            link.send_now(Message::Ended { handed });
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The copy of a live event the telemetry thread is handed: what its spans read, not the
/// rest. A model's message keeps its stop reason and one of its calls (the spans ask
/// whether it calls tools, not which: a burst of a thousand calls is not copied again), a
/// turn's start its ids and not the user's words, and a call its arguments only when they
/// are exported. A replay hands the whole recorded event; `crates/cli/tests/otlp.rs`
/// checks that both make the same spans.
fn for_spans(draft: &EventDraft, capture: Capture) -> EventDraft {
    let data = if let EventData::AssistantMessage(message) = &draft.data {
        EventData::AssistantMessage(AssistantMessage {
            blocks: message
                .blocks
                .iter()
                .find(|block| matches!(block, AssistantBlock::ToolCall { .. }))
                .cloned()
                .into_iter()
                .collect(),
            stop_reason: message.stop_reason.clone(),
        })
    } else if let EventData::TurnStart(start) = &draft.data {
        EventData::TurnStart(TurnStart {
            user: Vec::new(),
            trace: start.trace,
            caller: start.caller,
            client: start.client,
        })
    } else if let EventData::ToolCall(call) = &draft.data
        && capture == Capture::Off
    {
        EventData::ToolCall(ToolCall {
            index: call.index,
            name: call.name.clone(),
            arguments_raw: String::new(),
            source: call.source.clone(),
            version: call.version.clone(),
            trace: call.trace,
        })
    } else {
        draft.data.clone()
    };
    EventDraft {
        ts: draft.ts,
        turn: draft.turn,
        step: draft.step,
        call_id: draft.call_id.clone(),
        data,
    }
}

/// The telemetry thread: the spans of what it is handed, in order; after a gap, what the
/// turn left open is ended and the rest of it skipped (counted) until the next turn.
pub(super) fn make_spans(mut spans: SessionSpans, events: &Receiver<Message>, counters: &Counters) {
    let mut expected = 0;
    let mut skipping = false;
    let mut idle = 0;
    while let Some(message) = next(events, &mut idle) {
        match message {
            Message::Event { seq, draft } => {
                if seq != expected {
                    spans.lost();
                    skipping = true;
                }
                expected = seq + 1;
                if skipping && !matches!(draft.data, EventData::TurnStart(_)) {
                    counters.events_dropped.fetch_add(1, Relaxed);
                    continue;
                }
                skipping = false;
                spans.observe(&draft);
            }
            Message::Resumed { resumption, at } => spans.resumed(resumption, at),
            Message::Drained(reply) => {
                let _ = reply.send(());
            }
            // Nothing follows: the thread ends now rather than at its next look.
            Message::Ended { handed } => {
                if handed != expected {
                    spans.lost();
                }
                return;
            }
        }
    }
}

/// How long the thread sleeps when it finds nothing to make, before it looks again (a
/// flush, a resumption or the session's end wake it at once). Events never wake it: a
/// wake-up for each (a futex call, a thread scheduled on the session's cores) cost a call
/// more than making its spans (12.6 µs a call against 6.1 µs in `benches/otlp.rs`, 2
/// cores). Polled, it makes a burst's spans a batch at a time, mostly after the burst; the
/// SDK exports every 500 ms anyway. Events are dropped only when `max_queue` of them
/// arrive between two looks.
const POLL: Duration = Duration::from_millis(10);

/// Empty polls before the thread waits to be woken: an idle session costs no wake-ups,
/// and the first event after a pause (a model's answer) pays one.
const IDLE_POLLS: u32 = 50;

/// The next message, or none once the channel is closed and empty.
fn next(events: &Receiver<Message>, idle: &mut u32) -> Option<Message> {
    loop {
        match events.try_recv() {
            Ok(message) => {
                *idle = 0;
                return Some(message);
            }
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if *idle < IDLE_POLLS => {
                *idle += 1;
                std::thread::park_timeout(POLL);
            }
            Err(TryRecvError::Empty) => {
                *idle = 0;
                return events.recv().ok();
            }
        }
    }
}

/// The calling thread runs at the lowest priority: it takes what the session's calls
/// leave of the cores, and catches up while they wait (on the model, on a person). On
/// Linux `nice` is the calling thread's own; elsewhere it would be the process's, so it
/// is left alone there.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    if let Err(error) = rustix::process::nice(19) {
        tracing::debug!(%error, "the telemetry thread keeps its priority");
    }
}

/// A W3C trace id: random, never all zeros.
fn fresh_trace_id() -> [u8; 16] {
    loop {
        let id = RandomIdGenerator::default().new_trace_id();
        if id != TraceId::INVALID {
            return id.to_bytes();
        }
    }
}

/// A W3C span id: random, never all zeros.
fn fresh_span_id() -> [u8; 8] {
    loop {
        let id = RandomIdGenerator::default().new_span_id();
        if id != SpanId::INVALID {
            return id.to_bytes();
        }
    }
}
