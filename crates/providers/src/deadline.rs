//! The two deadlines of a model request — one per try, from sending to the answer's end,
//! and one per step, every try and wait included — and what a try had seen when one of
//! them passed. Bytes do not move a deadline: that is the idle timeout's job (reqwest's
//! read timeout), which stays the detector of a silent connection.

use std::time::Duration;

use tokio::time::Instant;

/// Which deadline ended a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// One try's (`ProviderConfig::request_timeout`).
    Request,
    /// The whole request's, retries included (`ProviderConfig::step_timeout`).
    Step,
}

/// The deadlines of one model request, started when it is made.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    request: Duration,
    step: Duration,
    step_ends: Instant,
}

impl Clock {
    pub(crate) fn start(request: Duration, step: Duration) -> Self {
        Self {
            request,
            step,
            step_ends: later(Instant::now(), step),
        }
    }

    /// When a try starting now must end, and which deadline that is.
    pub(crate) fn try_ends(&self) -> (Instant, Deadline) {
        let request_ends = later(Instant::now(), self.request);
        if request_ends < self.step_ends {
            (request_ends, Deadline::Request)
        } else {
            (self.step_ends, Deadline::Step)
        }
    }

    /// What is left of the step.
    pub(crate) fn left(&self) -> Duration {
        self.step_ends.saturating_duration_since(Instant::now())
    }

    /// The configured length of `deadline`.
    pub(crate) fn of(&self, deadline: Deadline) -> Duration {
        match deadline {
            Deadline::Request => self.request,
            Deadline::Step => self.step,
        }
    }
}

/// `from + length`, or a moment decades away when that is past what the clock holds (a
/// deadline configured as "practically never").
fn later(from: Instant, length: Duration) -> Instant {
    from.checked_add(length)
        .or_else(|| from.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(from)
}

/// What one try had seen so far. It lives outside the try's future, so that when a deadline
/// drops the future the failure can still say how far the answer had come.
#[derive(Debug)]
pub(crate) struct Progress {
    pub started: Instant,
    /// The answer's status and the server's request id, once its head arrived.
    pub status: Option<u16>,
    pub request_id: Option<String>,
    /// Bytes of the answer's body read.
    pub received: usize,
    /// When the last part of the answer itself (a delta) arrived; keepalives, pings and
    /// other bytes are not parts of the answer.
    pub last_part: Option<Instant>,
}

impl Progress {
    pub(crate) fn new() -> Self {
        Self {
            started: Instant::now(),
            status: None,
            request_id: None,
            received: 0,
            last_part: None,
        }
    }

    /// Whether deltas were handed on: the next try must declare them void.
    pub(crate) fn streamed(&self) -> bool {
        self.last_part.is_some()
    }

    /// Whether the answer has stalled: nothing of it for `quiet` (the idle timeout — the
    /// silence that ends a connection sending no bytes at all ends one sending only
    /// keepalives too, once a deadline makes the client look).
    pub(crate) fn stalled(&self, quiet: Duration) -> bool {
        self.last_part.unwrap_or(self.started).elapsed() >= quiet
    }

    /// How far the answer had come, in words.
    pub(crate) fn said(&self) -> String {
        let Some(status) = self.status else {
            return "the server had not begun to answer".to_owned();
        };
        let body = format!(
            "the server answered {status} and sent {} bytes",
            self.received
        );
        match self.last_part {
            None => format!("{body}, none of them part of the answer"),
            Some(at) => format!(
                "{body}; the last part of the answer had come {} earlier",
                spoken(at.elapsed())
            ),
        }
    }
}

/// A duration as people write it: `300 ms`, `1.5 s`, `90 s`, `20 min`.
pub(crate) fn spoken(length: Duration) -> String {
    let ms = length.as_millis();
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(60_000) && ms >= 120_000 {
        format!("{} min", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{} s", ms / 1_000)
    } else {
        format!("{:.1} s", length.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::spoken;

    #[test]
    fn durations_read_as_written() {
        let said: Vec<String> = [250, 1_000, 1_500, 60_000, 90_000, 120_000, 1_200_000]
            .into_iter()
            .map(|ms| spoken(Duration::from_millis(ms)))
            .collect();
        assert_eq!(
            said,
            ["250 ms", "1 s", "1.5 s", "60 s", "90 s", "2 min", "20 min"]
        );
    }
}
