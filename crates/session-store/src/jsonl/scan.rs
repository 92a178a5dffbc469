//! A session file scanned, not decoded: every line's envelope (`seq`, time, kind, turn,
//! step, call) is read and checked, and where its line is in the file kept; a payload is
//! read back and decoded only when its event is asked for. Listing sessions, counting turns
//! or finding how a session ended decodes a few payloads of thousands, and the file is read
//! in chunks through one buffer, never held whole.
//!
//! Lines as this store writes them (`seq` first, `data` last, no escapes in the envelope's
//! strings but the call id's) are read by hand; any other line is read by serde, its payload
//! skipped, so a line written by hand or by another tool scans too.

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::{FileShelf, check_first};
use crate::StoreError;
use crate::spill::{load_form, refs_in};
use toolrail_session_log::{CallId, Event, EventData, StepId, Timestamp, TurnId};

/// One event's envelope as scanned, kept compact: its call id is a place in the session's
/// one string of call ids, its kind an index into the known kinds where it is one.
#[derive(Clone, Debug)]
struct Entry {
    seq: u64,
    ts: Timestamp,
    turn: Option<TurnId>,
    step: Option<StepId>,
    /// Where the call id is in [`ScannedSession::call_ids`].
    call_id: Option<(u32, u32)>,
    kind: Kind,
    /// Where its line is in the file, without the newline.
    line: Range<u64>,
}

#[derive(Clone, Debug)]
enum Kind {
    Known(&'static str),
    Other(Box<str>),
}

/// One event's envelope, as scanned: everything but its payload.
#[derive(Clone, Copy, Debug)]
pub struct Envelope<'a> {
    entry: &'a Entry,
    call_ids: &'a str,
}

impl<'a> Envelope<'a> {
    /// Position in the session, from 1.
    pub fn seq(&self) -> u64 {
        self.entry.seq
    }

    /// When the event was appended.
    pub fn ts(&self) -> Timestamp {
        self.entry.ts
    }

    /// The event's kind (`tool/result`, `turn/end`, or a kind this version does not know).
    pub fn kind(&self) -> &'a str {
        match &self.entry.kind {
            Kind::Known(kind) => kind,
            Kind::Other(kind) => kind,
        }
    }

    /// The user turn it belongs to.
    pub fn turn(&self) -> Option<TurnId> {
        self.entry.turn
    }

    /// The model request inside the turn.
    pub fn step(&self) -> Option<StepId> {
        self.entry.step
    }

    /// The tool call it is about.
    pub fn call_id(&self) -> Option<&'a str> {
        let (start, length) = self.entry.call_id?;
        let start = usize::try_from(start).ok()?;
        self.call_ids
            .get(start..start.checked_add(usize::try_from(length).ok()?)?)
    }
}

/// A session's events, scanned: envelopes checked (`seq` dense from 1, the first a
/// `session/start`), payloads decoded when asked for.
///
/// # Example
///
/// ```
/// use toolrail_session_log::{
///     AppendUrgency, ContentBlock, EventData, EventDraft, EventSink, SessionId, Timestamp,
///     TurnId, event::{SessionStart, TurnStart},
/// };
/// use toolrail_session_store::{Durability, JsonlStore, SessionStore};
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let dir = tempfile::tempdir()?;
/// let store = JsonlStore::new(dir.path(), Durability::None)?;
/// let id = SessionId::new("s1");
/// let start = SessionStart { format_version: 0, session_id: id.clone(), tools: vec![], meta: None };
/// let log = store.create(start)?;
/// for word in ["one", "two"] {
///     let turn = TurnStart { user: vec![ContentBlock::text(word)], trace: None, caller: None, client: false };
///     let draft = EventDraft {
///         ts: Timestamp::now(),
///         turn: Some(TurnId(1)),
///         step: None,
///         call_id: None,
///         data: EventData::TurnStart(turn),
///     };
///     log.append(draft, AppendUrgency::Buffered).await?;
/// }
/// drop(log);
///
/// let scanned = store.scan(&id)?;
/// let kinds: Vec<&str> = scanned.envelopes().map(|envelope| envelope.kind()).collect();
/// assert_eq!(kinds, ["session/start", "turn/start", "turn/start"]);
/// // Only the payload asked for is decoded.
/// let EventData::TurnStart(last) = scanned.event(2)?.data else { unreachable!() };
/// assert_eq!(last.user, [ContentBlock::text("two")]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ScannedSession {
    path: PathBuf,
    file: File,
    entries: Vec<Entry>,
    /// Every call id, one after the other (a call's events share one).
    call_ids: String,
    torn_bytes: u64,
    shelf: FileShelf,
}

impl std::fmt::Debug for ScannedSession {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ScannedSession")
            .field("path", &self.path)
            .field("events", &self.entries.len())
            .field("torn_bytes", &self.torn_bytes)
            .finish_non_exhaustive()
    }
}

impl ScannedSession {
    /// Every complete event's envelope, in `seq` order.
    pub fn envelopes(
        &self,
    ) -> impl DoubleEndedIterator<Item = Envelope<'_>> + ExactSizeIterator + '_ {
        self.entries.iter().map(|entry| Envelope {
            entry,
            call_ids: &self.call_ids,
        })
    }

    /// The envelope of the event at `index` (from 0; its `seq` is `index + 1`).
    pub fn envelope(&self, index: usize) -> Option<Envelope<'_>> {
        self.entries.get(index).map(|entry| Envelope {
            entry,
            call_ids: &self.call_ids,
        })
    }

    /// How many complete events the session has.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it has none (a scanned session always has its `session/start`).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of a torn last line that were left out.
    pub fn torn_bytes(&self) -> u64 {
        self.torn_bytes
    }

    /// The event at `index` (from 0; its `seq` is `index + 1`), decoded whole, with the
    /// values kept beside the log put back. A payload that cannot be read is
    /// [`StoreError::Corrupt`], naming its line.
    pub fn event(&self, index: usize) -> Result<Event, StoreError> {
        let Some(envelope) = self.entries.get(index) else {
            return Err(self.corrupt(index, "there is no such event".to_owned()));
        };
        let line = read_line(&self.file, &envelope.line).map_err(|error| {
            self.corrupt(index, format!("the line cannot be read again: {error}"))
        })?;
        let mut event: Event = serde_json::from_slice(&line)
            .map_err(|error| self.corrupt(index, error.to_string()))?;
        if event.seq != envelope.seq {
            // The file was replaced since the scan: never another event in its place.
            return Err(self.corrupt(
                index,
                format!("seq {} where {} was scanned", event.seq, envelope.seq),
            ));
        }
        let refs = refs_in(&event, &line).map_err(|why| self.corrupt(index, why))?;
        load_form(&mut event, refs, &self.shelf).map_err(|why| self.corrupt(index, why))?;
        Ok(event)
    }

    /// Every event, decoded.
    pub fn events(&self) -> Result<Vec<Event>, StoreError> {
        (0..self.entries.len())
            .map(|index| self.event(index))
            .collect()
    }

    fn corrupt(&self, index: usize, why: String) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            line: index + 1,
            why,
        }
    }
}

/// The bytes of one line of `file`.
fn read_line(file: &File, line: &Range<u64>) -> std::io::Result<Vec<u8>> {
    let length = usize::try_from(line.end - line.start)
        .map_err(|_| std::io::Error::other("a line longer than memory"))?;
    let mut bytes = vec![0; length];
    file.read_exact_at(&mut bytes, line.start)?;
    Ok(bytes)
}

/// The chunk the file is read through.
const CHUNK: usize = 1 << 20;

/// Scans `path`: the same rules as reading it whole (a torn last line is left out and
/// reported, a line out of `seq` order is corruption), except that a payload is checked when
/// it is decoded — but the last line's, which decides whether it is torn.
pub(super) fn scan(path: &Path, shelf: FileShelf) -> Result<ScannedSession, StoreError> {
    let reading = |source| StoreError::io("reading", path, source);
    let corrupt = |line: usize, why: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        line,
        why,
    };
    let mut file = File::open(path).map_err(|source| StoreError::io("opening", path, source))?;
    let size = file.metadata().map_err(reading)?.len();
    let mut envelopes: Vec<Entry> =
        Vec::with_capacity(usize::try_from(size / 320).unwrap_or(0) + 1);
    // `buffer[..filled]` holds the file from offset `base`; lines are found in it, and a
    // line cut by the chunk's end moves to its front before the next read.
    let mut buffer = vec![0_u8; CHUNK];
    let (mut base, mut filled) = (0_u64, 0_usize);
    // A line whose envelope did not read: corruption if another line follows, else torn.
    let mut unreadable: Option<(usize, u64)> = None;
    let mut last_line = LastLine::default();
    loop {
        if filled == buffer.len() {
            // One line longer than the buffer: make room for it.
            buffer.resize(buffer.len() * 2, 0);
        }
        let read = file.read(&mut buffer[filled..]).map_err(reading)?;
        filled += read;
        let mut start = 0;
        while let Some(at) = memchr::memchr(b'\n', &buffer[start..filled]) {
            let end = start + at;
            if let Some((number, _)) = unreadable {
                return Err(corrupt(number, "its envelope cannot be read".to_owned()));
            }
            let number = envelopes.len() + 1;
            let range = base + start as u64..base + end as u64;
            match envelope_of(&buffer[start..end], range, &mut last_line) {
                Some(envelope) if envelope.seq == number as u64 => envelopes.push(envelope),
                Some(envelope) => {
                    return Err(corrupt(
                        number,
                        format!(
                            "seq {} where {number} was expected (a gap or a repeat)",
                            envelope.seq
                        ),
                    ));
                }
                None => unreadable = Some((number, base + start as u64)),
            }
            start = end + 1;
        }
        if read == 0 {
            // The end: what is left has no newline.
            let tail = &buffer[start..filled];
            if !tail.is_empty() {
                if let Some((number, _)) = unreadable {
                    return Err(corrupt(number, "its envelope cannot be read".to_owned()));
                }
                let number = envelopes.len() + 1;
                let range = base + start as u64..base + filled as u64;
                let whole = serde_json::from_slice::<Event>(tail)
                    .ok()
                    .filter(|event| event.seq == number as u64)
                    .and_then(|_| envelope_of(tail, range, &mut last_line));
                match whole {
                    Some(envelope) => envelopes.push(envelope),
                    None => unreadable = Some((number, base + start as u64)),
                }
            }
            break;
        }
        buffer.copy_within(start..filled, 0);
        base += start as u64;
        filled -= start;
    }
    // The last line with its newline is whole only if it decodes as the event it says it is,
    // as `read` decides; else it is torn with everything after it.
    if unreadable.is_none()
        && let Some(last) = envelopes.last()
        && last.line.end < size
    {
        let line = read_line(&file, &last.line).map_err(reading)?;
        if serde_json::from_slice::<Event>(&line).is_err() {
            unreadable = Some((envelopes.len(), last.line.start));
            envelopes.pop();
        }
    }
    let torn_bytes = unreadable.map_or(0, |(_, from)| size - from);
    // The first event is decoded whole: what it says decides whether this is a session this
    // version reads.
    let first = match envelopes.first() {
        Some(envelope) => Some(read_line(&file, &envelope.line).map_err(reading).and_then(
            |line| {
                serde_json::from_slice::<Event>(&line)
                    .map_err(|error| corrupt(1, error.to_string()))
            },
        )?),
        None => None,
    };
    check_first(path, first.as_slice())?;
    Ok(ScannedSession {
        path: path.to_path_buf(),
        file,
        entries: envelopes,
        call_ids: last_line.call_ids,
        torn_bytes,
        shelf,
    })
}

/// The envelope of one line: read by hand when it is as this store writes it, else by serde.
fn envelope_of(line: &[u8], at: Range<u64>, last: &mut LastLine) -> Option<Entry> {
    by_hand(line, at.clone(), last).or_else(|| by_serde(line, at, last))
}

/// What the last line read leaves for the next: the day of its timestamp, so that the next
/// one of the same day (nearly all of a session's) is read from its time of day alone, and
/// its call id, shared with the next line of the same call.
#[derive(Default)]
struct LastLine {
    date: [u8; 10],
    /// Milliseconds since the epoch at the day's midnight; `None` before the first.
    midnight: Option<u64>,
    /// Every call id read, one after the other.
    call_ids: String,
    /// Where the last one is in `call_ids`: a call's events follow each other and share it.
    call_id: Option<(u32, u32)>,
}

impl LastLine {
    /// Where `text` is kept in the session's string of call ids.
    fn call_id(&mut self, text: &str) -> Option<(u32, u32)> {
        if let Some((start, length)) = self.call_id {
            let start_at = usize::try_from(start).ok()?;
            let kept = self
                .call_ids
                .get(start_at..start_at + usize::try_from(length).ok()?);
            if kept == Some(text) {
                return self.call_id;
            }
        }
        let place = (
            u32::try_from(self.call_ids.len()).ok()?,
            u32::try_from(text.len()).ok()?,
        );
        self.call_ids.push_str(text);
        self.call_id = Some(place);
        Some(place)
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ`, as this store writes it; anything else is read by
    /// [`Timestamp::parse`].
    fn timestamp(&mut self, text: &[u8]) -> Option<Timestamp> {
        let fast = (text.len() == 24
            && text[10] == b'T'
            && text[13] == b':'
            && text[16] == b':'
            && text[19] == b'.'
            && text[23] == b'Z')
            .then(|| {
                let two = |at: usize| digits(&text[at..at + 2]);
                let (hour, minute, second) = (two(11)?, two(14)?, two(17)?);
                let millis = digits(&text[20..23])?;
                (hour < 24 && minute < 60 && second < 60)
                    .then(|| ((hour * 60 + minute) * 60 + second) * 1000 + millis)
            })
            .flatten();
        match (fast, self.midnight) {
            (Some(of_day), Some(midnight)) if text[..10] == self.date => {
                Some(Timestamp::from_millis(midnight + of_day))
            }
            _ => {
                let parsed = Timestamp::parse(std::str::from_utf8(text).ok()?).ok()?;
                if let Some(of_day) = fast {
                    self.date.copy_from_slice(&text[..10]);
                    self.midnight = parsed.as_millis().checked_sub(of_day);
                }
                Some(parsed)
            }
        }
    }
}

/// The number ASCII digits spell, `None` if any byte is not one.
fn digits(text: &[u8]) -> Option<u64> {
    text.iter().try_fold(0_u64, |value, byte| {
        byte.is_ascii_digit()
            .then(|| value * 10 + u64::from(byte - b'0'))
    })
}

/// `{"seq":N,"ts":"…","kind":"…"[,"turn":N][,"step":N][,"call_id":"…"],"data":…}`.
fn by_hand(line: &[u8], at: Range<u64>, last: &mut LastLine) -> Option<Entry> {
    let mut cursor = Cursor { line, at: 0 };
    cursor.expect(b"{\"seq\":")?;
    let seq = cursor.number()?;
    cursor.expect(b",\"ts\":\"")?;
    let ts = last.timestamp(cursor.plain_bytes()?)?;
    cursor.expect(b",\"kind\":\"")?;
    let kind = known_bytes(cursor.plain_bytes()?)?;
    let turn = if cursor.take(b",\"turn\":") {
        Some(TurnId(u32::try_from(cursor.number()?).ok()?))
    } else {
        None
    };
    let step = if cursor.take(b",\"step\":") {
        Some(StepId(u32::try_from(cursor.number()?).ok()?))
    } else {
        None
    };
    let call_id = if cursor.take(b",\"call_id\":\"") {
        Some(last.call_id(cursor.plain_string()?)?)
    } else {
        None
    };
    cursor.expect(b",\"data\":")?;
    // `data` is last: what is left is the payload and the envelope's closing brace.
    let rest = line.get(cursor.at..)?;
    if rest.len() < 2 || rest.last() != Some(&b'}') {
        return None;
    }
    Some(Entry {
        seq,
        ts,
        turn,
        step,
        call_id,
        kind,
        line: at,
    })
}

/// Any other envelope: serde reads the line (and so checks it is JSON), skipping the payload.
fn by_serde(line: &[u8], at: Range<u64>, last: &mut LastLine) -> Option<Entry> {
    #[derive(Deserialize)]
    struct Loose {
        seq: u64,
        ts: Timestamp,
        kind: String,
        #[serde(default)]
        turn: Option<TurnId>,
        #[serde(default)]
        step: Option<StepId>,
        #[serde(default)]
        call_id: Option<CallId>,
        #[serde(default)]
        #[allow(dead_code, reason = "read to check the line is whole, then dropped")]
        data: Option<IgnoredAny>,
    }
    let loose: Loose = serde_json::from_slice(line).ok()?;
    Some(Entry {
        seq: loose.seq,
        ts: loose.ts,
        turn: loose.turn,
        step: loose.step,
        call_id: match &loose.call_id {
            Some(id) => Some(last.call_id(id.as_str())?),
            None => None,
        },
        kind: known(&loose.kind),
        line: at,
    })
}

/// The known kind `kind` spells, found among the known kinds of its length.
fn known_kind(kind: &[u8]) -> Option<&'static str> {
    static BY_LENGTH: std::sync::LazyLock<Vec<Vec<&'static str>>> =
        std::sync::LazyLock::new(|| {
            let longest = EventData::KNOWN_KINDS.iter().map(|kind| kind.len()).max();
            let mut by_length = vec![Vec::new(); longest.unwrap_or(0) + 1];
            for kind in EventData::KNOWN_KINDS {
                by_length[kind.len()].push(*kind);
            }
            by_length
        });
    BY_LENGTH
        .get(kind.len())
        .and_then(|same| same.iter().find(|known| known.as_bytes() == kind))
        .copied()
}

/// A kind read as bytes: a known one without an allocation.
fn known_bytes(kind: &[u8]) -> Option<Kind> {
    match known_kind(kind) {
        Some(known) => Some(Kind::Known(known)),
        // Written by another tool: it must be plain text.
        None => std::str::from_utf8(kind)
            .ok()
            .filter(|kind| !kind.chars().any(char::is_control))
            .map(|kind| Kind::Other(kind.into())),
    }
}

/// A known kind without an allocation.
fn known(kind: &str) -> Kind {
    match known_kind(kind.as_bytes()) {
        Some(known) => Kind::Known(known),
        None => Kind::Other(kind.into()),
    }
}

/// A read position in one line.
struct Cursor<'a> {
    line: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, text: &[u8]) -> bool {
        let taken = self
            .line
            .get(self.at..)
            .is_some_and(|rest| rest.starts_with(text));
        if taken {
            self.at += text.len();
        }
        taken
    }

    fn expect(&mut self, text: &[u8]) -> Option<()> {
        self.take(text).then_some(())
    }

    /// An unsigned integer without a sign, exponent or leading zero.
    fn number(&mut self) -> Option<u64> {
        let rest = self.line.get(self.at..)?;
        let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
        if digits == 0 || (digits > 1 && rest.first() == Some(&b'0')) {
            return None;
        }
        let mut value: u64 = 0;
        for digit in rest.get(..digits)? {
            value = value
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
        }
        self.at += digits;
        Some(value)
    }

    /// The rest of a string whose opening quote was taken, up to its closing quote: `None`
    /// for a string with an escape (serde reads those). Its bytes are checked by whoever
    /// reads them: a timestamp's are digits, a kind's a known kind's.
    fn plain_bytes(&mut self) -> Option<&'a [u8]> {
        let rest = self.line.get(self.at..)?;
        let end = memchr::memchr2(b'"', b'\\', rest)?;
        if rest.get(end) != Some(&b'"') {
            return None;
        }
        self.at += end + 1;
        rest.get(..end)
    }

    /// As [`plain_bytes`](Self::plain_bytes), as text without control characters (which
    /// JSON would have escaped).
    fn plain_string(&mut self) -> Option<&'a str> {
        let text = self.plain_bytes()?;
        if text.iter().any(|byte| *byte < 0x20) {
            return None;
        }
        std::str::from_utf8(text).ok()
    }
}
