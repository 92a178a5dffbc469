//! One output stream of a command: kept head and tail within a cap, and written to a spill
//! file as it arrives, so a huge output costs bounded memory. The spill file has a cap of
//! its own (a command printing forever must not fill the disk); past it the file stops and
//! the result says so. It is created fresh, never through a symlink or over a file that is
//! there.

use std::path::{Path, PathBuf};

use tokio::fs::File;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// A stream as captured.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    head: Vec<u8>,
    /// The last bytes, as a ring once full.
    tail: Vec<u8>,
    tail_start: usize,
    pub total: u64,
    half_cap: usize,
    /// The spill file stopped at its cap: bytes after it were not saved.
    pub spill_cut: bool,
}

impl Captured {
    fn new(cap: usize) -> Self {
        Self {
            half_cap: cap / 2,
            ..Self::default()
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.half_cap.saturating_sub(self.head.len());
        let (to_head, rest) = bytes.split_at(bytes.len().min(room));
        self.head.extend_from_slice(to_head);
        bytes = rest;
        if bytes.len() >= self.half_cap {
            // Only the newest half_cap bytes of this piece can survive.
            self.tail.clear();
            self.tail_start = 0;
            self.tail
                .extend_from_slice(bytes.get(bytes.len() - self.half_cap..).unwrap_or_default());
            return;
        }
        for byte in bytes {
            if self.tail.len() < self.half_cap {
                self.tail.push(*byte);
            } else if let Some(slot) = self.tail.get_mut(self.tail_start) {
                *slot = *byte;
                self.tail_start = (self.tail_start + 1) % self.half_cap.max(1);
            }
        }
    }

    /// Bytes left out between head and tail.
    pub(crate) fn omitted(&self) -> u64 {
        self.total
            .saturating_sub((self.head.len() + self.tail.len()) as u64)
    }

    /// The text shown: head, a marker for what was left out, tail; invalid UTF-8 lossily.
    pub(crate) fn shown(&self) -> String {
        let mut tail = Vec::with_capacity(self.tail.len());
        tail.extend_from_slice(self.tail.get(self.tail_start..).unwrap_or_default());
        tail.extend_from_slice(self.tail.get(..self.tail_start).unwrap_or_default());
        let omitted = self.omitted();
        if omitted == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        format!(
            "{}\n[… {omitted} bytes left out …]\n{}",
            String::from_utf8_lossy(&self.head),
            String::from_utf8_lossy(&tail)
        )
    }
}

/// Reads `stream` to its end, keeping what `cap` allows; once the stream outgrows the cap,
/// everything (from the first byte, up to `spill_cap` bytes) goes to `spill` as well, so a
/// short output touches no file. A spill file that cannot be written only loses the spill,
/// never the command's result. Returns the spill file's path if it was written.
pub(crate) async fn capture(
    mut stream: impl AsyncRead + Unpin,
    cap: usize,
    spill: &Path,
    spill_cap: u64,
) -> (Captured, Option<PathBuf>) {
    let mut captured = Captured::new(cap);
    // What was read before the stream outgrew the cap: at most `cap` and one read.
    let mut early = Vec::new();
    let mut file: Spill = Spill::NotNeeded;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut spilled: u64 = 0;
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                let bytes = buffer.get(..read).unwrap_or_default();
                captured.push(bytes);
                match &mut file {
                    Spill::NotNeeded => {
                        early.extend_from_slice(bytes);
                        if early.len() > cap {
                            let room = usize::try_from(spill_cap).unwrap_or(usize::MAX);
                            let kept = early.get(..early.len().min(room)).unwrap_or_default();
                            spilled = kept.len() as u64;
                            captured.spill_cut |= kept.len() < early.len();
                            file = Spill::start(spill, kept).await;
                            early = Vec::new();
                        }
                    }
                    Spill::Writing(open) => {
                        let room = spill_cap.saturating_sub(spilled);
                        let kept = bytes
                            .get(..bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX)))
                            .unwrap_or_default();
                        captured.spill_cut |= kept.len() < bytes.len();
                        spilled += kept.len() as u64;
                        if !kept.is_empty() && open.write_all(kept).await.is_err() {
                            file = Spill::Failed;
                        }
                    }
                    Spill::Failed => {}
                }
            }
        }
    }
    let kept = match file {
        Spill::Writing(mut open) => open.flush().await.is_ok(),
        Spill::NotNeeded | Spill::Failed => false,
    };
    (captured, kept.then(|| spill.to_path_buf()))
}

enum Spill {
    NotNeeded,
    Writing(File),
    Failed,
}

impl Spill {
    async fn start(path: &Path, early: &[u8]) -> Self {
        let mut options = tokio::fs::OpenOptions::new();
        options
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
        let Ok(mut file) = options.open(path).await else {
            return Self::Failed;
        };
        match file.write_all(early).await {
            Ok(()) => Self::Writing(file),
            Err(_) => Self::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_and_tail_are_kept_and_the_middle_counted() {
        let mut captured = Captured::new(8);
        captured.push(b"0123");
        captured.push(b"456789");
        captured.push(b"ab");
        assert_eq!(captured.total, 12);
        assert_eq!(captured.omitted(), 4);
        assert_eq!(captured.shown(), "0123\n[… 4 bytes left out …]\n89ab");
        let mut small = Captured::new(8);
        small.push(b"hey");
        assert_eq!(small.shown(), "hey");
        let mut big = Captured::new(8);
        big.push(&[b'x'; 100]);
        big.push(b"END!");
        assert_eq!(big.shown(), "xxxx\n[… 96 bytes left out …]\nEND!");
    }
}
