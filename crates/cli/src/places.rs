//! Where sessions are kept, what they are called, and how one is named on the command line:
//! a workspace keeps its sessions in `.toolrail/sessions/` (or, when it cannot be written,
//! in the XDG state folder), each under a readable id (`20261202-085512-3fa1`); a session is
//! named by the path of its `.jsonl` file or by its id in a store.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use toolrail_runtime::Store;
use toolrail_session_log::SessionId;

use crate::bad_input;

/// The folder a workspace's sessions are kept in: `<workspace>/.toolrail/sessions` when it
/// can be made and written, else `$XDG_STATE_HOME/toolrail/sessions/<name>-<hash>` (default
/// `~/.local/state/…`).
pub fn sessions_folder(workspace: &Path) -> Result<PathBuf> {
    let inside = workspace.join(".toolrail").join("sessions");
    if writable(&inside) {
        // The sessions are the user's records, not the project's sources.
        let ignore = workspace.join(".toolrail").join(".gitignore");
        if !ignore.exists() {
            let _ = std::fs::write(&ignore, "*\n");
        }
        return Ok(inside);
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    workspace.hash(&mut hasher);
    let name = workspace
        .file_name()
        .map_or_else(|| "root".into(), |name| name.to_string_lossy());
    let folder = state_folder()?
        .join("sessions")
        .join(format!("{name}-{:08x}", hasher.finish() as u32));
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

/// `$XDG_STATE_HOME/toolrail`, or `~/.local/state/toolrail`.
pub fn state_folder() -> Result<PathBuf> {
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
pub fn new_session_id() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = now.as_secs();
    let (year, month, day) = civil_date(seconds / 86_400);
    let of_day = seconds % 86_400;
    let salt = (now.subsec_nanos() ^ std::process::id().rotate_left(16)) & 0xffff;
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}-{salt:04x}",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// The calendar date of a day counted from 1970-01-01 (proleptic Gregorian).
fn civil_date(days: u64) -> (u64, u64, u64) {
    // Counted in 400-year eras from 0000-03-01, where the leap day ends the year.
    let days = days + 719_468;
    let era = days / 146_097;
    let of_era = days % 146_097;
    let year_of_era = (of_era - of_era / 1460 + of_era / 36_524 - of_era / 146_096) / 365;
    let of_year = of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * of_year + 2) / 153;
    let day = of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// A session named on the command line.
pub struct Located {
    pub store: Store,
    pub id: SessionId,
}

/// `session` as a path to a `.jsonl` log, or an id in `store` (default: the current
/// folder's sessions).
pub fn locate(session: &str, store: Option<&str>) -> Result<Located> {
    let path = Path::new(session);
    let looks_like_path = session.ends_with(".jsonl") || session.contains('/');
    if store.is_none() && looks_like_path {
        if !path.exists() {
            return Err(bad_input!(
                "{session} does not exist; give the path of a session log or a session id (`toolrail sessions` lists them)"
            ));
        }
        let (Some(stem), Some("jsonl")) = (
            path.file_stem().and_then(|stem| stem.to_str()),
            path.extension().and_then(|extension| extension.to_str()),
        ) else {
            return Err(bad_input!(
                "{session} is not a session log (`<session>.jsonl`); give one, or a session id"
            ));
        };
        let folder = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        return Ok(Located {
            store: Store::jsonl(std::path::absolute(folder)?)
                .map_err(|error| bad_input!("{error}"))?,
            id: SessionId::new(stem),
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
    Ok(Located { store, id })
}

/// The store `--store` names, or the current folder's sessions.
pub fn open_store(store: Option<&str>) -> Result<Store> {
    let url = match store {
        Some(url) => url.to_owned(),
        None => format!(
            "jsonl:{}",
            sessions_folder(&std::env::current_dir()?)?.display()
        ),
    };
    Store::open(&url, toolrail_session_log::Durability::Strict)
        .map_err(|error| bad_input!("--store {url}: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_become_dates() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        assert_eq!(civil_date(20_789), (2026, 12, 2));
        assert_eq!(civil_date(20_818), (2026, 12, 31));
        assert_eq!(civil_date(20_819), (2027, 1, 1));
    }

    #[test]
    fn ids_read_as_times_and_sort_as_them() {
        let id = new_session_id();
        assert_eq!(id.len(), "20261202-085512-3fa1".len(), "{id}");
        assert!(id.starts_with("20"), "{id}");
    }
}
