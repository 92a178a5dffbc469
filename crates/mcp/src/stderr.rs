//! A server's stderr, kept: whole in a file of the session folder (when the embedder gives
//! one) and its last bytes in memory, so the errors that say how a server failed or ended
//! quote what it said last.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bytes of stderr kept in memory.
const TAIL_KEPT: usize = 8 << 10;

/// Bytes of the tail quoted in an error.
const TAIL_QUOTED: usize = 600;

/// One server's stderr over all its connections.
pub(crate) struct StderrLog {
    tail: Mutex<VecDeque<u8>>,
    file: Option<PathBuf>,
    /// Connections whose stderr is still being read; `closed` wakes whoever waits for 0.
    open: std::sync::atomic::AtomicUsize,
    closed: tokio::sync::Notify,
}

impl StderrLog {
    pub(crate) fn new(file: Option<PathBuf>) -> Self {
        Self {
            tail: Mutex::new(VecDeque::with_capacity(TAIL_KEPT)),
            file,
            open: std::sync::atomic::AtomicUsize::new(0),
            closed: tokio::sync::Notify::new(),
        }
    }

    /// [`StderrLog::quoted`] once every connection's stderr has been read to its end, or
    /// after `patience`: a server that died wrote its last words before its pipes closed,
    /// but they may still be on their way here.
    pub(crate) async fn quoted_after_end(&self, patience: std::time::Duration) -> String {
        let _ = tokio::time::timeout(patience, async {
            loop {
                let closed = self.closed.notified();
                if self.open.load(std::sync::atomic::Ordering::Acquire) == 0 {
                    return;
                }
                closed.await;
            }
        })
        .await;
        self.quoted()
    }

    /// Where the whole of it is written, if anywhere.
    pub(crate) fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The last bytes kept, as text.
    pub(crate) fn tail(&self) -> String {
        let tail = self.tail.lock();
        let (front, back) = tail.as_slices();
        let mut bytes = Vec::with_capacity(tail.len());
        bytes.extend_from_slice(front);
        bytes.extend_from_slice(back);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// What an error adds about the server's stderr: its last lines, and where the rest is;
    /// empty when it said nothing.
    pub(crate) fn quoted(&self) -> String {
        let tail = self.tail();
        let tail = tail.trim_end();
        if tail.is_empty() {
            return String::new();
        }
        let mut start = tail.len().saturating_sub(TAIL_QUOTED);
        while !tail.is_char_boundary(start) {
            start += 1;
        }
        // From a line's start when one is near, so the quote does not open mid-word.
        if start > 0
            && let Some(line) = tail[start..].find('\n')
        {
            start += line + 1;
        }
        let whole = self
            .file
            .as_ref()
            .map(|file| format!(" (all of it in {})", file.display()))
            .unwrap_or_default();
        format!(
            "; its stderr ended with: {}{whole}",
            tail[start..].replace('\n', " ⏎ ")
        )
    }

    fn keep(&self, bytes: &[u8]) {
        let mut tail = self.tail.lock();
        let bytes = &bytes[bytes.len().saturating_sub(TAIL_KEPT)..];
        let kept = tail.len();
        let overflow = (kept + bytes.len()).saturating_sub(TAIL_KEPT);
        tail.drain(..overflow.min(kept));
        tail.extend(bytes);
    }

    /// Reads one connection's stderr to its end, keeping it. `header` opens the
    /// connection's part of the file.
    pub(crate) async fn drain(&self, stderr: impl tokio::io::AsyncRead + Unpin, header: &str) {
        self.open.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        // Counted down however the read ends (at the end of the pipe, or dropped).
        struct Closing<'a>(&'a StderrLog);
        impl Drop for Closing<'_> {
            fn drop(&mut self) {
                self.0
                    .open
                    .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                self.0.closed.notify_waiters();
            }
        }
        let _closing = Closing(self);
        self.read_to_end(stderr, header).await;
    }

    async fn read_to_end(&self, mut stderr: impl tokio::io::AsyncRead + Unpin, header: &str) {
        let mut file = match &self.file {
            Some(path) => open(path, header).await,
            None => None,
        };
        let mut buffer = vec![0u8; 16 << 10];
        loop {
            let read = match stderr.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            let Some(bytes) = buffer.get(..read) else {
                break;
            };
            self.keep(bytes);
            // A file that cannot be written loses the file, not the server.
            if let Some(writer) = &mut file
                && writer.write_all(bytes).await.is_err()
            {
                file = None;
            }
        }
        if let Some(mut writer) = file {
            let _ = writer.flush().await;
        }
    }
}

/// The file, opened to append, its folder made, with the connection's header written.
async fn open(path: &Path, header: &str) -> Option<tokio::fs::File> {
    if let Some(folder) = path.parent() {
        tokio::fs::create_dir_all(folder).await.ok()?;
    }
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .await
        .ok()?;
    file.write_all(format!("--- {header} ---\n").as_bytes())
        .await
        .ok()?;
    Some(file)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::StderrLog;

    #[tokio::test]
    async fn the_tail_is_kept_and_the_whole_written() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mcp/s.stderr.log");
        let log = StderrLog::new(Some(file.clone()));
        let text = (0..2_000)
            .map(|n| format!("line {n}\n"))
            .collect::<String>();
        log.drain(text.as_bytes(), "s started").await;
        let written = std::fs::read_to_string(&file).unwrap();
        assert_eq!(written, format!("--- s started ---\n{text}"));
        assert!(log.tail().ends_with("line 1999\n"));
        assert!(log.tail().len() <= 8 << 10);
        let quoted = log.quoted();
        assert!(
            quoted.starts_with("; its stderr ended with: line "),
            "{quoted}"
        );
        assert!(quoted.contains("line 1999 (all of it in"), "{quoted}");
        assert!(StderrLog::new(None).quoted().is_empty());
    }
}
