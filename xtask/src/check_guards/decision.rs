//! Check (b): a guard crate may refuse but never allow. It must not name the pre-execute
//! allow decision (`PreExecuteDecision::Allow`, directly, through an alias, or through an
//! import of the variants) and must not implement or name the pre-execute hook trait,
//! which is where allowing happens.
//!
//! The scan is lexical and works on names, not scopes: an alias introduced anywhere in the
//! crate counts everywhere in it. That over-approximates (a local type that happens to
//! share an alias's name is flagged too), which is the right failure for a safety check.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Result;

use super::lexer::{Token, TokenKind};
use super::{Finding, SourceFile, rust_sources};

const DECISION: &str = "PreExecuteDecision";
const HOOK: &str = "PreExecuteHook";
const ALLOW: &str = "Allow";

/// The names under which the decision enum and the hook trait are reachable in a crate.
#[derive(Debug, PartialEq, Eq)]
struct Names {
    decision: BTreeSet<String>,
    hook: BTreeSet<String>,
}

/// Scans the `.rs` files under `src_dir` (a guard crate's `src/`).
pub fn check_guard_crate(src_dir: &Path) -> Result<Vec<Finding>> {
    let sources = rust_sources(src_dir)?;
    let names = collect_names(&sources);
    let mut findings = Vec::new();
    for source in &sources {
        findings.extend(scan(source, &names));
    }
    findings.dedup();
    Ok(findings)
}

/// Follows aliases to a fixed point, so `use a::PreExecuteDecision as D;` in one module
/// and `use crate::a::D as E;` in another both count.
fn collect_names(sources: &[SourceFile]) -> Names {
    let mut names = Names {
        decision: BTreeSet::from([DECISION.to_owned()]),
        hook: BTreeSet::from([HOOK.to_owned()]),
    };
    loop {
        let before = names.decision.len() + names.hook.len();
        for source in sources {
            for (original, alias) in aliases(&source.tokens) {
                for set in [&mut names.decision, &mut names.hook] {
                    if set.contains(&original) {
                        set.insert(alias.clone());
                    }
                }
            }
        }
        if names.decision.len() + names.hook.len() == before {
            return names;
        }
    }
}

/// Every `(original, alias)` pair the tokens introduce:
/// `X as Y` (in `use`), `X::{self as Y}`, and `type Y = path::X;` / `type Y<..> = path::X<..>;`.
fn aliases(tokens: &[Token]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut last_path_head: Option<String> = None;
    for (i, token) in tokens.iter().enumerate() {
        let next = |k: usize| tokens.get(i + k);
        let Some(ident) = token.ident() else { continue };
        if ident == "as" {
            let alias = next(1).and_then(Token::ident).filter(|alias| *alias != "_");
            let original = match i.checked_sub(1).and_then(|j| tokens[j].ident()) {
                // `X::{self as Y}`: `self` stands for the path before the brace.
                Some("self") => last_path_head.clone(),
                Some(original) => Some(original.to_owned()),
                None => None,
            };
            if let (Some(original), Some(alias)) = (original, alias) {
                found.push((original, alias.to_owned()));
            }
        } else if ident == "type" {
            if let Some((alias, original)) = type_alias(&tokens[i + 1..]) {
                found.push((original, alias));
            }
        } else if next(1).is_some_and(|t| t.kind == TokenKind::PathSep)
            && next(2).is_some_and(|t| t.is_punct('{'))
        {
            last_path_head = Some(ident.to_owned());
        }
    }
    found
}

/// `Y <generics>? = a::b::X <args>? ;` → `(Y, X)`.
fn type_alias(after_type: &[Token]) -> Option<(String, String)> {
    let alias = after_type.first()?.ident()?.to_owned();
    let eq = after_type
        .iter()
        .position(|t| t.is_punct('=') || t.is_punct(';'))?;
    if !after_type[eq].is_punct('=') {
        return None; // an associated type declaration: `type Output;`
    }
    let mut last = None;
    for token in &after_type[eq + 1..] {
        match &token.kind {
            TokenKind::Ident(ident) => last = Some(ident.clone()),
            TokenKind::PathSep => {}
            TokenKind::Punct(_) | TokenKind::Opaque => break,
        }
    }
    Some((alias, last?))
}

fn scan(source: &SourceFile, names: &Names) -> Vec<Finding> {
    const WHY: &str = "a guard may only refuse (DESIGN §3 stage 5)";
    let tokens = &source.tokens;
    let mut findings = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let Some(ident) = token.ident() else { continue };
        // The alias in `X as Alias` is reported once, at `X`, not again as its own use. (Only
        // there: in `<T as PreExecuteHook>::decide` the name after `as` is a use.)
        let declares_alias = i >= 2
            && tokens[i - 1].is_ident("as")
            && tokens[i - 2].ident().is_some_and(|before| {
                before == "self" || names.hook.contains(before) || names.decision.contains(before)
            });
        if declares_alias {
            continue;
        }
        if names.hook.contains(ident) {
            findings.push(source.finding(
                token.line,
                format!(
                    "names the pre-execute hook trait `{HOOK}`{}: a guard crate must not \
                     implement or use pre-execute hooks, which can allow; {WHY}",
                    via(ident, HOOK)
                ),
            ));
            continue;
        }
        if !names.decision.contains(ident)
            || tokens
                .get(i + 1)
                .is_none_or(|t| t.kind != TokenKind::PathSep)
        {
            continue;
        }
        let Some(after) = tokens.get(i + 2) else {
            continue;
        };
        let via = via(ident, DECISION);
        if after.is_ident(ALLOW) {
            findings.push(source.finding(
                after.line,
                format!("names the allow decision `{DECISION}::{ALLOW}`{via}; {WHY}"),
            ));
        } else if after.is_punct('*') {
            findings.push(source.finding(
                after.line,
                format!(
                    "glob-imports the variants of `{DECISION}`{via}, which brings `{ALLOW}` \
                     into scope; {WHY}"
                ),
            ));
        } else if after.is_punct('{') {
            for inner in group(&tokens[i + 3..]) {
                if inner.is_ident(ALLOW) || inner.is_punct('*') {
                    findings.push(source.finding(
                        inner.line,
                        format!("imports the allow decision `{DECISION}::{ALLOW}`{via}; {WHY}"),
                    ));
                }
            }
        }
    }
    findings
}

/// The tokens of a brace group whose opening brace was just consumed.
fn group(tokens: &[Token]) -> &[Token] {
    let mut depth = 1usize;
    for (i, token) in tokens.iter().enumerate() {
        if token.is_punct('{') {
            depth += 1;
        } else if token.is_punct('}') {
            depth -= 1;
            if depth == 0 {
                return &tokens[..i];
            }
        }
    }
    tokens
}

/// ` (as `D`)` when the name seen is an alias of the original.
fn via(seen: &str, original: &str) -> String {
    if seen == original {
        String::new()
    } else {
        format!(" (as `{seen}`)")
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::lexer::tokenize;
    use super::*;

    fn source(text: &str) -> SourceFile {
        SourceFile {
            path: PathBuf::from("lib.rs"),
            tokens: tokenize(text),
        }
    }

    fn lines(text: &str) -> Vec<usize> {
        let sources = [source(text)];
        let names = collect_names(&sources);
        scan(&sources[0], &names)
            .into_iter()
            .map(|f| f.line.unwrap_or(0))
            .collect()
    }

    #[test]
    fn direct_alias_type_alias_and_chained_alias() {
        let text = "\
use toolrail_tools_core::PreExecuteDecision as D;
use self::D as E;
type F<T> = toolrail_tools_core::pipeline::PreExecuteDecision;
fn a() -> D { D::Allow }
fn b() -> E { E::Deny { reason: String::new() } }
fn c() { let _ = E::Allow; let _ = F::Allow; }
";
        assert_eq!(lines(text), vec![4, 6, 6]);
    }

    #[test]
    fn variant_imports_and_self_alias() {
        let text = "\
use toolrail_tools_core::PreExecuteDecision::*;
use toolrail_tools_core::PreExecuteDecision::{Deny, Allow as Yes};
use toolrail_tools_core::PreExecuteDecision::{self as P};
fn f() { let _ = P::Allow; }
";
        assert_eq!(lines(text), vec![1, 2, 4]);
    }

    #[test]
    fn the_hook_trait_by_any_name() {
        let text = "\
use toolrail_tools_core::{PreExecuteHook as Hook, Guard};
struct G;
impl Hook for G {}
impl Guard for G {}
fn call<T>(t: &T) { <T as PreExecuteHook>::name(t); }
";
        assert_eq!(lines(text), vec![1, 3, 5]);
    }

    #[test]
    fn comments_strings_and_denies_are_fine() {
        let text = r#"
// A guard never returns PreExecuteDecision::Allow; it is not a PreExecuteHook.
/// Unlike PreExecuteDecision::Allow, GuardVerdict has no allow.
fn f() -> GuardVerdict {
    let _ = "PreExecuteDecision::Allow";
    let _ = PreExecuteDecision::Deny { reason: r"x".into() };
    let Allow = 1; // a local binding named Allow is not the decision
    GuardVerdict::Abstain
}
"#;
        assert_eq!(lines(text), Vec::<usize>::new());
    }

    #[test]
    fn associated_types_are_not_aliases() {
        let tokens = tokenize("trait T { type Output; } type X = Vec<PreExecuteDecision>;");
        assert_eq!(aliases(&tokens), vec![("Vec".to_owned(), "X".to_owned())]);
    }
}
