//! Child scopes: a sub-agent's view of its parent's tools. A scope may shadow a parent's
//! tool only explicitly, and may restrict what it inherits with allow/deny masks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::RwLock;

use toolrail_session_log::ToolSource;

use super::{RegistryError, SnapshotSource, compile, valid_name};
use crate::registry::toolset::{ToolEntry, ToolSet};
use crate::spec::Exposure;
use crate::tool::Tool;

/// A tool-name pattern: exact, or with `*` matching any run of characters (`mcp__github__*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamePattern(String);

impl NamePattern {
    /// A pattern from its text; any text is valid, and one without `*` matches that name only.
    pub fn new(pattern: impl Into<String>) -> Self {
        Self(pattern.into())
    }

    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        glob_match(self.0.as_bytes(), name.as_bytes())
    }
}

/// `*`-only glob matching with backtracking to the last star: linear in practice.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&byte| byte == b'*')
}

enum OwnTool {
    Shadow(Arc<ToolEntry>),
    Added(Arc<ToolEntry>),
}

impl OwnTool {
    fn entry(&self) -> &Arc<ToolEntry> {
        match self {
            Self::Shadow(entry) | Self::Added(entry) => entry,
        }
    }
}

/// How a scope's own tool relates to its parent's tools.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Joining {
    /// Replaces the parent's tool of the same name.
    Shadow,
    /// A name the parent does not have.
    Add,
}

/// Builds a [`ToolScope`].
pub struct ScopeBuilder {
    parent: Arc<dyn SnapshotSource>,
    own: BTreeMap<String, OwnTool>,
    allow: Option<Vec<NamePattern>>,
    deny: Vec<NamePattern>,
    errors: Vec<RegistryError>,
}

impl ScopeBuilder {
    pub(crate) fn new(parent: Arc<dyn SnapshotSource>) -> Self {
        Self {
            parent,
            own: BTreeMap::new(),
            allow: None,
            deny: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn parent_has(&self, name: &str) -> bool {
        self.parent
            .entries()
            .iter()
            .any(|entry| entry.name() == name)
    }

    fn own_tool(
        &mut self,
        source: ToolSource,
        tool: Arc<dyn Tool>,
        how: Joining,
    ) -> Result<Arc<ToolEntry>, ()> {
        let name = tool.spec().name().to_owned();
        let problem = if !valid_name(&name) {
            Some(RegistryError::InvalidName { name: name.clone() })
        } else if self.parent.is_reserved(&name) {
            Some(RegistryError::ReservedName { name: name.clone() })
        } else if how == Joining::Shadow && !self.parent_has(&name) {
            Some(RegistryError::Scope {
                message: format!(
                    "cannot shadow `{name}`: the parent has no tool of that name; use add"
                ),
            })
        } else if how == Joining::Add && self.parent_has(&name) {
            Some(RegistryError::Scope {
                message: format!(
                    "`{name}` exists in the parent; replacing it must be explicit: use shadow"
                ),
            })
        } else if self.own.contains_key(&name) {
            Some(RegistryError::Scope {
                message: format!("`{name}` was given to this scope twice"),
            })
        } else {
            None
        };
        if let Some(problem) = problem {
            self.errors.push(problem);
            return Err(());
        }
        compile(tool, source)
            .map(Arc::new)
            .map_err(|error| self.errors.push(error))
    }

    /// Replaces the parent's tool of the same name inside this scope.
    pub fn shadow(mut self, source: ToolSource, tool: Arc<dyn Tool>) -> Self {
        if let Ok(entry) = self.own_tool(source, tool, Joining::Shadow) {
            self.own
                .insert(entry.name().to_owned(), OwnTool::Shadow(entry));
        }
        self
    }

    /// Adds a tool the parent does not have.
    pub fn add(mut self, source: ToolSource, tool: Arc<dyn Tool>) -> Self {
        if let Ok(entry) = self.own_tool(source, tool, Joining::Add) {
            self.own
                .insert(entry.name().to_owned(), OwnTool::Added(entry));
        }
        self
    }

    /// Inherits only tools matching one of these patterns.
    pub fn allow(mut self, patterns: impl IntoIterator<Item = NamePattern>) -> Self {
        self.allow.get_or_insert_with(Vec::new).extend(patterns);
        self
    }

    /// Never inherits tools matching these patterns (deny beats allow).
    pub fn deny(mut self, patterns: impl IntoIterator<Item = NamePattern>) -> Self {
        self.deny.extend(patterns);
        self
    }

    /// The scope, or every problem with the tools it was given at once.
    pub fn build(mut self) -> Result<ToolScope, RegistryError> {
        match self.errors.len() {
            0 => Ok(ToolScope {
                parent: self.parent,
                own: self.own,
                allow: self.allow,
                deny: self.deny,
                loaded: RwLock::new(BTreeSet::new()),
            }),
            1 => Err(self.errors.remove(0)),
            _ => Err(RegistryError::Several(self.errors)),
        }
    }
}

/// A child view of a registry or of another scope.
///
/// The scope's own tools (added or shadowing) win over the parent's of the same name, also
/// over a parent tool that joins later: the scope named them explicitly.
pub struct ToolScope {
    parent: Arc<dyn SnapshotSource>,
    own: BTreeMap<String, OwnTool>,
    allow: Option<Vec<NamePattern>>,
    deny: Vec<NamePattern>,
    /// Deferred tools this scope loaded for itself; its parent does not see them.
    loaded: RwLock<BTreeSet<String>>,
}

impl ToolScope {
    fn inherits(&self, name: &str) -> bool {
        let allowed = self
            .allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|p| p.matches(name)));
        allowed && !self.deny.iter().any(|pattern| pattern.matches(name))
    }

    /// The immutable tool set of this scope for the next model request.
    pub fn snapshot(&self) -> ToolSet {
        let entries = self.entries();
        ToolSet::from_entries(entries.iter(), |name| self.is_loaded(name))
    }

    /// Makes deferred tools of this scope (its own or inherited) visible from its next
    /// snapshot, without changing what the parent offers; returns the names newly loaded.
    pub fn load_deferred(&self, names: &[&str]) -> Vec<String> {
        let deferred: BTreeSet<String> = self
            .entries()
            .into_iter()
            .filter(|entry| entry.spec().exposure() == Exposure::Deferred)
            .map(|entry| entry.name().to_owned())
            .collect();
        let mut loaded = self.loaded.write();
        names
            .iter()
            .filter(|name| deferred.contains(**name) && !self.parent.is_loaded(name))
            .filter(|name| loaded.insert((**name).to_owned()))
            .map(|name| (*name).to_owned())
            .collect()
    }

    /// Starts a scope nested in this one.
    pub fn scope(self: &Arc<Self>) -> ScopeBuilder {
        ScopeBuilder::new(Arc::clone(self) as Arc<dyn SnapshotSource>)
    }
}

impl SnapshotSource for ToolScope {
    fn entries(&self) -> Vec<Arc<ToolEntry>> {
        let mut merged: BTreeMap<String, Arc<ToolEntry>> = self
            .parent
            .entries()
            .into_iter()
            .filter(|entry| self.inherits(entry.name()))
            .map(|entry| (entry.name().to_owned(), entry))
            .collect();
        for (name, own) in &self.own {
            merged.insert(name.clone(), Arc::clone(own.entry()));
        }
        merged.into_values().collect()
    }

    fn is_loaded(&self, name: &str) -> bool {
        self.loaded.read().contains(name) || self.parent.is_loaded(name)
    }

    fn is_reserved(&self, name: &str) -> bool {
        self.parent.is_reserved(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_patterns() {
        let p = NamePattern::new("mcp__github__*");
        assert!(p.matches("mcp__github__create_issue"));
        assert!(!p.matches("mcp__gitlab__x"));
        assert!(NamePattern::new("read").matches("read"));
        assert!(!NamePattern::new("read").matches("reader"));
        assert!(NamePattern::new("*_file").matches("write_file"));
        assert!(NamePattern::new("a*b*c").matches("aXXbYYc"));
        assert!(!NamePattern::new("a*b*c").matches("aXXbYY"));
        assert!(NamePattern::new("*").matches(""));
    }
}
