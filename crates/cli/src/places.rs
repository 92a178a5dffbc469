//! Where sessions are kept, what they are called, and how one is named on the command line:
//! a workspace keeps its sessions in `.toolrail/sessions/` (or, when it cannot be written,
//! in the XDG state folder), each under a readable id (`20261202-085512-3fa1`); a session is
//! named by the path of its `.jsonl` file or by its id in a store.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use toolrail_runtime::Store;
use toolrail_session_log::SessionId;

use crate::bad_input;

/// The folder a workspace's sessions are kept in: `<workspace>/.toolrail/sessions` when it
/// can be made and written, else `$XDG_STATE_HOME/toolrail/sessions/<name>-<hash>` (default
/// `~/.local/state/…`).
pub(crate) fn sessions_folder(workspace: &Path) -> Result<PathBuf> {
    let inside = inside_folder(workspace);
    if writable(&inside) {
        // The sessions are the user's records, not the project's sources.
        let ignore = workspace.join(".toolrail").join(".gitignore");
        if !ignore.exists() {
            let _ = std::fs::write(&ignore, "*\n");
        }
        return Ok(inside);
    }
    let folder = state_sessions_folder(workspace)?;
    if writable(&folder) {
        Ok(folder)
    } else {
        Err(bad_input!(
            "neither {} nor {} can be written; give a store with --store",
            inside.display(),
            folder.display()
        ))
    }
}

/// The sessions folder of `workspace` if one was made, without making one.
pub(crate) fn existing_sessions_folder(workspace: &Path) -> Result<Option<PathBuf>> {
    let inside = inside_folder(workspace);
    if inside.is_dir() {
        return Ok(Some(inside));
    }
    let outside = state_sessions_folder(workspace)?;
    Ok(outside.is_dir().then_some(outside))
}

fn inside_folder(workspace: &Path) -> PathBuf {
    workspace.join(".toolrail").join("sessions")
}

/// `$XDG_STATE_HOME/toolrail/sessions/<name>-<hash of the path>`: the same folder for the
/// same workspace in every toolrail release (FNV-1a, not std's hasher, which may change).
fn state_sessions_folder(workspace: &Path) -> Result<PathBuf> {
    let hash = workspace
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
        });
    let name = workspace
        .file_name()
        .map_or_else(|| "root".into(), |name| name.to_string_lossy());
    Ok(state_folder()?
        .join("sessions")
        .join(format!("{name}-{:08x}", hash as u32)))
}

/// `$XDG_STATE_HOME/toolrail`, or `~/.local/state/toolrail`.
pub(crate) fn state_folder() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_STATE_HOME").filter(|value| !value.is_empty()) {
        Some(state) => PathBuf::from(state),
        None => match std::env::var_os("HOME").filter(|value| !value.is_empty()) {
            Some(home) => PathBuf::from(home).join(".local").join("state"),
            None => {
                return Err(bad_input!(
                    "neither XDG_STATE_HOME nor HOME is set; give --session-dir or --store"
                ));
            }
        },
    };
    Ok(std::path::absolute(base.join("toolrail"))?)
}

/// Whether `folder` exists (made if missing) and a file can be made in it.
fn writable(folder: &Path) -> bool {
    if std::fs::create_dir_all(folder).is_err() {
        return false;
    }
    let probe = folder.join(format!(".probe-{}", std::process::id()));
    let made = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(&probe);
    made
}

/// A new session's id: when it started (UTC) and four hex digits, `20261202-085512-3fa1`.
pub(crate) fn new_session_id() -> String {
    // `2026-12-02T08:55:12.345Z`: its digits, date and time apart.
    let now = toolrail_session_log::Timestamp::now().to_string();
    let digits: String = now.chars().take(19).filter(char::is_ascii_digit).collect();
    let (date, time) = digits.split_at(digits.len().min(8));
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let salt = (nanos ^ std::process::id().rotate_left(16)) & 0xffff;
    format!("{date}-{time}-{salt:04x}")
}

/// Whether `session` names a log file rather than an id in a store.
pub(crate) fn names_a_path(session: &str, store: Option<&str>) -> bool {
    store.is_none()
        && (session.ends_with(".jsonl") || session.contains('/') || Path::new(session).is_file())
}

/// A session named on the command line, and its events as read (nothing changed).
pub(crate) struct Located {
    pub store: Store,
    pub id: SessionId,
    pub events: Vec<toolrail_session_log::Event>,
}

/// `session` as a path to a `.jsonl` log, or an id in `store` (default: the current
/// folder's sessions), read once.
pub(crate) fn locate(session: &str, store: Option<&str>) -> Result<Located> {
    if names_a_path(session, store) {
        let file = crate::session::SessionFile::at(Path::new(session))?;
        let events = file.events()?;
        let folder = match file.path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        return Ok(Located {
            store: Store::jsonl(std::path::absolute(folder)?)
                .map_err(|error| bad_input!("{error}"))?,
            id: file.id,
            events,
        });
    }
    let store = open_store(store)?;
    let id = SessionId::new(session);
    let missing_file = store.file_of(&id).is_some_and(|file| !file.exists());
    let events = if missing_file {
        Vec::new()
    } else {
        store.read(&id).map_err(|error| bad_input!("{error}"))?
    };
    if events.is_empty() {
        return Err(bad_input!(
            "{} holds no session `{session}`; `toolrail sessions{}` lists the ones it has",
            store.url(),
            if store.url().starts_with("jsonl:") {
                String::new()
            } else {
                format!(" --store {}", store.url())
            }
        ));
    }
    Ok(Located { store, id, events })
}

/// The store `--store` names, or the sessions kept for the current folder (which must
/// exist: a command that only reads makes no folder).
pub(crate) fn open_store(store: Option<&str>) -> Result<Store> {
    let url = match store {
        Some(url) => url.to_owned(),
        None => {
            let here = std::env::current_dir()?;
            match existing_sessions_folder(&here)? {
                Some(folder) => format!("jsonl:{}", folder.display()),
                None => {
                    return Err(bad_input!(
                        "no sessions are kept for {} yet (no .toolrail/sessions here); give --store, or start one with `toolrail chat`",
                        here.display()
                    ));
                }
            }
        }
    };
    // A URL that names no store is bad input; a store that does not answer is a failure.
    Store::open(&url, toolrail_session_store::Durability::Strict).map_err(|error| match error {
        url_error @ (toolrail_runtime::StoreOpenError::Url(_)
        | toolrail_runtime::StoreOpenError::NotBuilt { .. }) => bad_input!("{url_error}"),
        failed @ toolrail_runtime::StoreOpenError::Store { .. } => anyhow::Error::new(failed),
    })
}

/// How to name this session to `toolrail resume`: its id, and its store when that is not
/// the current folder's own.
pub(crate) fn resume_hint(store: &Store, id: &SessionId) -> String {
    session_command("resume", store, id)
}

/// `toolrail <command>` naming this session (`resume`, `replay`): its id, and its store
/// when that is not the current folder's own.
pub(crate) fn session_command(command: &str, store: &Store, id: &SessionId) -> String {
    let here = std::env::current_dir()
        .ok()
        .map(|folder| format!("jsonl:{}", inside_folder(&folder).display()));
    if here.as_deref() == Some(store.url()) {
        format!("toolrail {command} {id}")
    } else {
        format!("toolrail {command} {id} --store {}", store.url())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_read_as_times_and_sort_as_them() {
        let id = new_session_id();
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(
            parts.iter().map(|part| part.len()).collect::<Vec<_>>(),
            [8, 6, 4],
            "{id}"
        );
        assert!(
            parts[0].starts_with("20") && parts[1].chars().all(|c| c.is_ascii_digit()),
            "{id}"
        );
    }

    #[test]
    fn a_workspace_s_state_folder_does_not_move() {
        // FNV-1a of the path (64-bit, low half): a fixed value, whatever the release; this one
        // computed by hand elsewhere.
        let folder = state_sessions_folder(Path::new("/work/project")).unwrap();
        let name = folder.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(name, "project-78300849", "{}", folder.display());
    }
}
