//! Where sessions are kept, from a store URL: `jsonl:DIR` (the embedded default),
//! `sqlite:FILE`, or `postgres://…`; and the one way the runtime creates, opens and reads
//! them.

use std::path::PathBuf;
use std::sync::Arc;

use toolrail_session_log::{Event, SessionId, SessionLog, event::SessionStart};
use toolrail_session_store::{Durability, JsonlStore, SessionStore, StoreError};

use crate::config::{ConfigError, DurabilityName, StoreConfig};

/// A parsed store URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// One JSON Lines file per session in this folder.
    Jsonl(PathBuf),
    /// Many sessions in one SQLite database.
    Sqlite(PathBuf),
    /// A PostgreSQL database (connection string as given).
    Postgres(String),
}

impl StoreUrl {
    /// Reads `jsonl:DIR`, `sqlite:FILE` or `postgres://…`.
    ///
    /// ```
    /// use toolrail_runtime::StoreUrl;
    /// assert_eq!(
    ///     StoreUrl::parse("jsonl:.toolrail/sessions").unwrap(),
    ///     StoreUrl::Jsonl(".toolrail/sessions".into())
    /// );
    /// assert!(StoreUrl::parse("mysql://db").unwrap_err().to_string().contains("jsonl:DIR"));
    /// ```
    pub fn parse(url: &str) -> Result<Self, ConfigError> {
        if let Some(folder) = url.strip_prefix("jsonl:") {
            return non_empty(folder).map(|folder| Self::Jsonl(PathBuf::from(folder)));
        }
        if let Some(file) = url.strip_prefix("sqlite:") {
            return non_empty(file).map(|file| Self::Sqlite(PathBuf::from(file)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url.to_owned()));
        }
        Err(ConfigError::invalid(
            "store.url",
            format!(
                "`{url}` is not a store: write `jsonl:DIR`, `sqlite:FILE` or `postgres://user@host/db`"
            ),
        ))
    }
}

fn non_empty(rest: &str) -> Result<&str, ConfigError> {
    if rest.trim().is_empty() {
        Err(ConfigError::invalid(
            "store.url",
            "names no path after its scheme (`jsonl:.toolrail/sessions`)",
        ))
    } else {
        Ok(rest)
    }
}

impl From<DurabilityName> for Durability {
    fn from(name: DurabilityName) -> Self {
        match name {
            DurabilityName::Strict => Durability::Strict,
            DurabilityName::Batched => Durability::Batched,
            DurabilityName::None => Durability::None,
        }
    }
}

/// Why a store, or a session in it, could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreOpenError {
    /// The store refused: a folder that cannot be made, a database that does not answer, a
    /// session that does not exist or is held by another process.
    #[error("the store `{url}`: {source}")]
    Store {
        /// The store's URL, as given.
        url: String,
        /// What the store said.
        #[source]
        source: StoreError,
    },
    /// The URL is not a store.
    #[error(transparent)]
    Url(#[from] ConfigError),
    /// The store's kind is not in this build.
    #[error(
        "the store `{url}` needs the `{feature}` feature of toolrail-runtime, which this build does not have"
    )]
    NotBuilt {
        /// The store's URL, as given.
        url: String,
        /// The cargo feature of `toolrail-runtime` that builds the kind in (`sqlite`,
        /// `postgres`).
        feature: &'static str,
    },
}

/// A store the runtime can create, open and read sessions in, whatever its kind.
///
/// ```
/// use toolrail_runtime::Store;
/// let folder = tempfile::tempdir()?;
/// let store = Store::jsonl(folder.path())?;
/// assert!(store.url().starts_with("jsonl:"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Store {
    url: String,
    durability: Durability,
    kind: StoreKind,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("url", &self.url).finish()
    }
}

#[derive(Clone)]
enum StoreKind {
    Jsonl(Arc<JsonlStore>),
    #[cfg(feature = "sqlite")]
    Sqlite(Arc<toolrail_session_store::SqliteStore>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<toolrail_session_store::PostgresStore>),
}

/// A session made or opened: its log, and every event it held before.
pub(crate) struct OpenedSession {
    pub log: Arc<dyn SessionLog>,
    pub events: Vec<Event>,
    pub torn_bytes_dropped: u64,
}

impl Store {
    /// Opens the store `url` with `durability` (folders and database files are made).
    pub fn open(url: &str, durability: Durability) -> Result<Self, StoreOpenError> {
        let failed = |source: StoreError| StoreOpenError::Store {
            url: url.to_owned(),
            source,
        };
        let kind = match StoreUrl::parse(url)? {
            StoreUrl::Jsonl(folder) => {
                std::fs::create_dir_all(&folder).map_err(|source| {
                    failed(StoreError::Io {
                        action: "creating",
                        path: folder.clone(),
                        source,
                    })
                })?;
                StoreKind::Jsonl(Arc::new(
                    JsonlStore::new(&folder, durability).map_err(failed)?,
                ))
            }
            #[cfg(feature = "sqlite")]
            StoreUrl::Sqlite(file) => {
                if let Some(folder) = file
                    .parent()
                    .filter(|folder| !folder.as_os_str().is_empty())
                {
                    std::fs::create_dir_all(folder).map_err(|source| {
                        failed(StoreError::Io {
                            action: "creating",
                            path: folder.to_path_buf(),
                            source,
                        })
                    })?;
                }
                StoreKind::Sqlite(Arc::new(
                    toolrail_session_store::SqliteStore::new(&file, durability).map_err(failed)?,
                ))
            }
            #[cfg(not(feature = "sqlite"))]
            StoreUrl::Sqlite(_) => {
                return Err(StoreOpenError::NotBuilt {
                    url: url.to_owned(),
                    feature: "sqlite",
                });
            }
            #[cfg(feature = "postgres")]
            StoreUrl::Postgres(connection) => StoreKind::Postgres(Arc::new(
                toolrail_session_store::PostgresStore::connect(&connection, durability)
                    .map_err(failed)?,
            )),
            #[cfg(not(feature = "postgres"))]
            StoreUrl::Postgres(_) => {
                return Err(StoreOpenError::NotBuilt {
                    url: url.to_owned(),
                    feature: "postgres",
                });
            }
        };
        Ok(Self {
            url: url.to_owned(),
            durability,
            kind,
        })
    }

    /// The store a configuration's `[store]` names.
    pub fn from_config(config: &StoreConfig) -> Result<Self, StoreOpenError> {
        Self::open(&config.url, config.durability.into())
    }

    /// A JSON Lines store in `folder`, strictly durable.
    pub fn jsonl(folder: impl Into<PathBuf>) -> Result<Self, StoreOpenError> {
        let folder = folder.into();
        Self::open(&format!("jsonl:{}", folder.display()), Durability::Strict)
    }

    /// A refusal of this store, naming it.
    pub(crate) fn refused(&self, source: StoreError) -> StoreOpenError {
        StoreOpenError::Store {
            url: self.url.clone(),
            source,
        }
    }

    /// How durably its logs are written.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The URL it was opened from.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The JSONL file of a session, for a store that keeps one.
    pub fn file_of(&self, id: &SessionId) -> Option<PathBuf> {
        match &self.kind {
            StoreKind::Jsonl(store) => store.path_of(id).ok(),
            #[cfg(feature = "sqlite")]
            StoreKind::Sqlite(_) => None,
            #[cfg(feature = "postgres")]
            StoreKind::Postgres(_) => None,
        }
    }

    /// The folder of a JSONL store.
    pub(crate) fn folder(&self) -> Option<PathBuf> {
        match StoreUrl::parse(&self.url) {
            Ok(StoreUrl::Jsonl(folder)) => Some(std::path::absolute(&folder).unwrap_or(folder)),
            Ok(StoreUrl::Sqlite(_) | StoreUrl::Postgres(_)) | Err(_) => None,
        }
    }

    /// Every event session `id` holds, read without taking it (a JSONL session is read
    /// while another process may be writing it).
    pub fn read(&self, id: &SessionId) -> Result<Vec<Event>, StoreOpenError> {
        let failed = |source| self.refused(source);
        match &self.kind {
            StoreKind::Jsonl(store) => Ok(store.read(id).map_err(failed)?.events),
            #[cfg(feature = "sqlite")]
            StoreKind::Sqlite(store) => Ok(store.open(id).map_err(failed)?.events),
            #[cfg(feature = "postgres")]
            StoreKind::Postgres(store) => store.read(id).map_err(failed),
        }
    }

    /// The JSONL store behind this one, for scanning its sessions without decoding them
    /// ([`JsonlStore::scan`](toolrail_session_store::JsonlStore::scan)).
    pub fn jsonl_store(&self) -> Option<&toolrail_session_store::JsonlStore> {
        match &self.kind {
            StoreKind::Jsonl(store) => Some(store),
            #[cfg(feature = "sqlite")]
            StoreKind::Sqlite(_) => None,
            #[cfg(feature = "postgres")]
            StoreKind::Postgres(_) => None,
        }
    }

    /// The PostgreSQL store behind this one, for leases and the work queue.
    #[cfg(feature = "postgres")]
    pub fn postgres(&self) -> Option<&toolrail_session_store::PostgresStore> {
        match &self.kind {
            StoreKind::Postgres(store) => Some(store),
            StoreKind::Jsonl(_) => None,
            #[cfg(feature = "sqlite")]
            StoreKind::Sqlite(_) => None,
        }
    }

    /// A PostgreSQL store, as the runtime's.
    #[cfg(feature = "postgres")]
    pub fn from_postgres(store: toolrail_session_store::PostgresStore, url: &str) -> Self {
        Self {
            url: url.to_owned(),
            durability: store.durability(),
            kind: StoreKind::Postgres(Arc::new(store)),
        }
    }

    pub(crate) fn create(
        &self,
        start: SessionStart,
    ) -> Result<Arc<dyn SessionLog>, StoreOpenError> {
        let failed = |source| self.refused(source);
        Ok(match &self.kind {
            StoreKind::Jsonl(store) => Arc::new(store.create(start).map_err(failed)?),
            #[cfg(feature = "sqlite")]
            StoreKind::Sqlite(store) => Arc::new(store.create(start).map_err(failed)?),
            #[cfg(feature = "postgres")]
            StoreKind::Postgres(store) => Arc::new(store.create(start).map_err(failed)?),
        })
    }

    pub(crate) fn open_session(&self, id: &SessionId) -> Result<OpenedSession, StoreOpenError> {
        let failed = |source| self.refused(source);
        fn opened<L: SessionLog + 'static>(
            opened: toolrail_session_store::Opened<L>,
        ) -> OpenedSession {
            OpenedSession {
                log: Arc::new(opened.log),
                events: opened.events,
                torn_bytes_dropped: opened.torn_bytes_dropped,
            }
        }
        Ok(match &self.kind {
            StoreKind::Jsonl(store) => opened(store.open(id).map_err(failed)?),
            #[cfg(feature = "sqlite")]
            StoreKind::Sqlite(store) => opened(store.open(id).map_err(failed)?),
            #[cfg(feature = "postgres")]
            StoreKind::Postgres(store) => opened(store.open(id).map_err(failed)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_name_their_kind_or_say_what_to_write() {
        assert_eq!(
            StoreUrl::parse("jsonl:sessions").ok(),
            Some(StoreUrl::Jsonl(PathBuf::from("sessions")))
        );
        assert_eq!(
            StoreUrl::parse("sqlite:/var/lib/t.db").ok(),
            Some(StoreUrl::Sqlite(PathBuf::from("/var/lib/t.db")))
        );
        assert!(matches!(
            StoreUrl::parse("postgres://u@h/db"),
            Ok(StoreUrl::Postgres(_))
        ));
        let error = StoreUrl::parse("mysql://x")
            .err()
            .map(|error| error.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|text| text.contains("jsonl:DIR")),
            "{error:?}"
        );
        assert!(StoreUrl::parse("jsonl:").is_err());
    }
}
