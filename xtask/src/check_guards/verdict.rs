//! Check (a): `GuardVerdict`, the type a guard returns, has exactly `Deny(reason)` and
//! `Abstain`. The type is what makes "a guard can only refuse" true (DESIGN §3 stage 5),
//! so a new variant — an allow by any name — must not slip in unnoticed.

use std::path::Path;

use anyhow::Result;

use super::lexer::{Token, TokenKind};
use super::{Finding, SourceFile, rust_sources};

const ENUM_NAME: &str = "GuardVerdict";
const DENY: &str = "Deny";
const ABSTAIN: &str = "Abstain";

/// One variant as declared: its name, line, and whether it carries a payload.
#[derive(Debug, PartialEq, Eq)]
struct Variant {
    name: String,
    line: usize,
    has_payload: bool,
}

/// Checks every `enum GuardVerdict` under `src_dir` (tools-core's `src/`). Finding none
/// is itself a failure: the guarantee cannot be checked on a type that does not exist.
pub fn check_guard_verdict(src_dir: &Path) -> Result<Vec<Finding>> {
    let sources = rust_sources(src_dir)?;
    let mut findings = Vec::new();
    let mut found = false;
    for source in &sources {
        for (line, variants) in enums_named(&source.tokens, ENUM_NAME) {
            found = true;
            findings.extend(check_variants(source, line, &variants));
        }
    }
    if !found {
        findings.push(Finding::in_dir(
            src_dir,
            format!(
                "`pub enum {ENUM_NAME}` was not found; guards must return a {ENUM_NAME} with \
                 exactly `{DENY}` (with a reason) and `{ABSTAIN}` (DESIGN §3 stage 5)"
            ),
        ));
    }
    Ok(findings)
}

fn check_variants(source: &SourceFile, enum_line: usize, variants: &[Variant]) -> Vec<Finding> {
    let mut findings = Vec::new();
    for variant in variants {
        match variant.name.as_str() {
            DENY if !variant.has_payload => findings.push(source.finding(
                variant.line,
                format!("{ENUM_NAME}::{DENY} must carry the reason for the refusal"),
            )),
            DENY | ABSTAIN => {}
            other => findings.push(source.finding(
                variant.line,
                format!(
                    "{ENUM_NAME} has a variant `{other}`; a guard can only refuse, so its \
                     variants must be exactly `{DENY}` (with a reason) and `{ABSTAIN}`{}",
                    if looks_like_allow(other) {
                        " — an allow belongs in a pre-execute hook"
                    } else {
                        ""
                    }
                ),
            )),
        }
    }
    for required in [DENY, ABSTAIN] {
        if !variants.iter().any(|variant| variant.name == required) {
            findings.push(source.finding(
                enum_line,
                format!("{ENUM_NAME} has no `{required}` variant"),
            ));
        }
    }
    findings
}

fn looks_like_allow(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ["allow", "approv", "permit", "accept", "grant", "pass"]
        .iter()
        .any(|word| lower.contains(word))
}

/// Every `enum <name>` in the token stream, with its line and parsed variants.
fn enums_named(tokens: &[Token], name: &str) -> Vec<(usize, Vec<Variant>)> {
    let mut found = Vec::new();
    for (i, window) in tokens.windows(2).enumerate() {
        if window[0].is_ident("enum") && window[1].is_ident(name) {
            let body_start = tokens[i + 2..].iter().position(|t| t.is_punct('{'));
            if let Some(offset) = body_start {
                found.push((
                    window[0].line,
                    parse_variants(&tokens[i + 2 + offset + 1..]),
                ));
            }
        }
    }
    found
}

/// Parses variants from the tokens after an enum's opening brace, up to its closing one.
fn parse_variants(body: &[Token]) -> Vec<Variant> {
    let mut variants = Vec::new();
    let mut depth = 0usize;
    let mut segment: Vec<&Token> = Vec::new();
    for token in body {
        match token.kind {
            TokenKind::Punct('(' | '[' | '{') => depth += 1,
            TokenKind::Punct(')' | ']') => depth = depth.saturating_sub(1),
            TokenKind::Punct('}') if depth == 0 => break,
            TokenKind::Punct('}') => depth -= 1,
            TokenKind::Punct(',') if depth == 0 => {
                variants.extend(variant_of(&segment));
                segment.clear();
                continue;
            }
            TokenKind::Ident(_) | TokenKind::PathSep | TokenKind::Punct(_) | TokenKind::Opaque => {}
        }
        segment.push(token);
    }
    variants.extend(variant_of(&segment));
    variants
}

/// Reads one variant: `#[attr]* Name ( payload )?` / `{ payload }` / `= discriminant`.
fn variant_of(segment: &[&Token]) -> Option<Variant> {
    let mut i = 0;
    // Skip attributes: `#` followed by a bracketed group.
    while segment.get(i).is_some_and(|t| t.is_punct('#')) {
        let mut depth = 0usize;
        i += 1;
        while let Some(token) = segment.get(i) {
            i += 1;
            if token.is_punct('[') {
                depth += 1;
            } else if token.is_punct(']') {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    break;
                }
            }
        }
    }
    let name_token = segment.get(i)?;
    let name = name_token.ident()?.to_owned();
    let has_payload = match segment.get(i + 1) {
        Some(open) if open.is_punct('(') || open.is_punct('{') => {
            let close = if open.is_punct('(') { ')' } else { '}' };
            segment.get(i + 2).is_some_and(|t| !t.is_punct(close))
        }
        Some(_) | None => false,
    };
    Some(Variant {
        name,
        line: name_token.line,
        has_payload,
    })
}

#[cfg(test)]
mod tests {
    use super::super::lexer::tokenize;
    use super::*;

    fn variants(source: &str) -> Vec<(String, bool)> {
        enums_named(&tokenize(source), ENUM_NAME)
            .into_iter()
            .flat_map(|(_, variants)| variants)
            .map(|variant| (variant.name, variant.has_payload))
            .collect()
    }

    #[test]
    fn variants_with_attributes_payloads_and_docs() {
        let source = r#"
            /// What a guard says. enum GuardVerdict { Allow } in a comment does not count.
            #[derive(Debug, Clone)]
            #[non_exhaustive]
            pub enum GuardVerdict<R = String> where R: Clone {
                /// Refuse, with a reason.
                #[serde(rename = "deny")]
                Deny { reason: R, code: Option<(u8, u8)> },
                Abstain,
            }
            enum Other { Allow }
        "#;
        assert_eq!(
            variants(source),
            vec![("Deny".to_owned(), true), ("Abstain".to_owned(), false)]
        );
    }

    #[test]
    fn tuple_and_empty_payloads() {
        let source = "pub enum GuardVerdict { Deny(), Abstain, Allow(String) = 3 }";
        assert_eq!(
            variants(source),
            vec![
                ("Deny".to_owned(), false),
                ("Abstain".to_owned(), false),
                ("Allow".to_owned(), true)
            ]
        );
    }
}
