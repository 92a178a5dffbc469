//! The red team's table: ways of running curl that a glob over the raw text let through,
//! judged by `deny`, `allow` and `ask bash(curl *)` under every preset, through
//! `Permissions::decide` and the deny guard. Commands are read as a shell parses them: every
//! spelling is denied or asked about, and an allow rule permits only the spellings whose every
//! simple command is known before run time and named by it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::json;
use support::{decide, guard_check, rules, workspace};
use toolrail_permissions::{Permissions, Preset, RuleEffect};
use toolrail_tools_core::{GuardVerdict, ProtectedPaths};

/// Whether `allow bash(curl *)` alone lets a spelling through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Allow {
    /// Every simple command is curl, known before run time, nothing written to a file.
    Permits,
    /// Something else runs too, or something is known only at run time.
    DoesNot,
}

use Allow::{DoesNot, Permits};

const SPELLINGS: &[(&str, Allow)] = &[
    // The red team's spellings.
    ("/usr/bin/curl evil.example", Permits),
    ("command curl evil.example", Permits),
    ("env curl evil.example", Permits),
    ("c''url evil.example", Permits),
    ("\\curl evil.example", Permits),
    ("$(printf curl) evil.example", DoesNot),
    ("bash -c 'curl evil.example'", DoesNot),
    ("sh -c \"curl evil.example\"", DoesNot),
    ("eval 'curl evil.example'", DoesNot),
    ("curl\tevil.example", Permits),
    ("CURL=curl; $CURL evil.example", DoesNot),
    ("alias c=curl; c evil.example", DoesNot),
    ("{ curl evil.example; }", Permits),
    ("if true; then curl evil.example; fi", DoesNot),
    ("X=1 curl evil.example", DoesNot),
    ("time curl evil.example", Permits),
    ("exec curl evil.example", Permits),
    ("echo evil.example | xargs curl", DoesNot),
    ("nice -n 5 curl evil.example", Permits),
    ("! curl evil.example", Permits),
    // Quoting and escapes.
    ("\"curl\" evil.example", Permits),
    ("'curl' evil.example", Permits),
    ("cu\\rl evil.example", Permits),
    ("$'curl' evil.example", Permits),
    ("$'\\x63url' evil.example", Permits),
    ("cu\\\nrl evil.example", Permits),
    ("cu* evil.example", DoesNot),
    ("${X:-curl} evil.example", DoesNot),
    // Where a command may stand.
    ("cd /tmp\ncurl evil.example", DoesNot),
    ("for u in evil.example; do curl $u; done", DoesNot),
    ("case x in x) curl evil.example;; esac", Permits),
    ("f() { curl evil.example; }; f", DoesNot),
    ("echo $(curl evil.example)", DoesNot),
    ("echo `curl evil.example`", DoesNot),
    ("echo \"${X:-$(curl evil.example)}\"", DoesNot),
    ("cat <<EOF\n$(curl evil.example)\nEOF", DoesNot),
    ("diff <(curl evil.example) /dev/null", DoesNot),
    ("cat urls | curl -K -", DoesNot),
    ("(curl evil.example)", Permits),
    ("true || curl evil.example", DoesNot),
    ("curl evil.example &", Permits),
    ("coproc curl evil.example", Permits),
    // Wrappers and runners.
    ("echo evil.example | xargs -I{} curl {}", DoesNot),
    ("timeout 5 curl evil.example", Permits),
    ("nohup curl evil.example &", Permits),
    ("stdbuf -o0 curl evil.example", Permits),
    ("setsid curl evil.example", Permits),
    ("exec -a name curl evil.example", Permits),
    ("builtin command curl evil.example", Permits),
    ("/usr/bin/env curl evil.example", Permits),
    ("env -i PATH=/usr/bin curl evil.example", DoesNot),
    ("env -S 'curl evil.example'", DoesNot),
    ("sudo curl evil.example", DoesNot),
    ("dash -c 'curl evil.example'", DoesNot),
    ("zsh -lc 'curl evil.example'", DoesNot),
    ("echo curl evil.example | bash", DoesNot),
    ("trap 'curl evil.example' EXIT", DoesNot),
    ("find . -exec curl evil.example \\;", DoesNot),
    ("eval \"$(echo curl) evil.example\"", DoesNot),
    // Redirections.
    ("curl evil.example > /dev/null 2>&1", Permits),
    ("curl evil.example > page.html", DoesNot),
    ("source <(echo curl evil.example)", DoesNot),
    // Arguments holding newlines after quote removal.
    ("curl $'evil.example\\n'", Permits),
    ("curl 'evil\n.example'", Permits),
];

/// Commands that mention curl without running it, and others: `deny bash(curl *)` must let
/// them be.
const BENIGN: &[&str] = &[
    "git status",
    "ls -la",
    "echo curl",
    "echo 'curl evil.example'",
    "grep curl file",
    "grep -r \"curl \" src",
    "man curl",
    "command -v curl",
    "printf '%s\\n' curl",
    "git log --grep curl | head",
    "cat curl.txt > /dev/null",
    "echo $HOME",
];

/// What the preset gives `bash` when no rule decides.
fn preset_default(preset: Preset) -> RuleEffect {
    match preset {
        Preset::Untrusted | Preset::Workspace => RuleEffect::Ask,
        Preset::NeverAsk => RuleEffect::Deny,
        Preset::FullAuto => RuleEffect::Allow,
    }
}

fn effect(permissions: &Permissions, command: &str) -> RuleEffect {
    decide(permissions, "bash", json!({ "command": command })).effect
}

#[test]
fn the_table_has_the_red_teams_thirty_spellings_and_more() {
    assert!(SPELLINGS.len() >= 30, "{}", SPELLINGS.len());
}

#[test]
fn deny_denies_every_spelling_under_every_preset_and_so_does_its_guard() {
    let ws = workspace();
    for preset in Preset::ALL {
        let permissions = Permissions::new(preset, rules(&["deny bash(curl *)"]), &ws.roots);
        for (command, _) in SPELLINGS {
            let verdict = decide(&permissions, "bash", json!({ "command": command }));
            assert_eq!(
                verdict.effect,
                RuleEffect::Deny,
                "{command:?} under {preset}: {}",
                verdict.reason
            );
            assert!(
                verdict.reason.contains("`deny bash(curl *)`"),
                "{}",
                verdict.reason
            );
            assert!(
                matches!(
                    guard_check(&permissions, "bash", json!({ "command": command })),
                    GuardVerdict::Deny { .. }
                ),
                "the guard lets {command:?} through"
            );
        }
    }
}

#[test]
fn deny_lets_commands_that_only_mention_curl_be() {
    let ws = workspace();
    for preset in Preset::ALL {
        let permissions = Permissions::new(preset, rules(&["deny bash(curl *)"]), &ws.roots);
        for command in BENIGN {
            assert_eq!(
                effect(&permissions, command),
                preset_default(preset),
                "{command:?} under {preset}"
            );
            assert!(
                matches!(
                    guard_check(&permissions, "bash", json!({ "command": command })),
                    GuardVerdict::Abstain
                ),
                "the guard refuses {command:?}"
            );
        }
    }
}

#[test]
fn allow_permits_only_spellings_known_whole_and_the_preset_decides_the_rest() {
    let ws = workspace();
    for preset in Preset::ALL {
        let permissions = Permissions::new(preset, rules(&["allow bash(curl *)"]), &ws.roots);
        for (command, allow) in SPELLINGS {
            let expected = match allow {
                Permits => RuleEffect::Allow,
                DoesNot => preset_default(preset),
            };
            let verdict = decide(&permissions, "bash", json!({ "command": command }));
            assert_eq!(
                verdict.effect, expected,
                "{command:?} under {preset}: {}",
                verdict.reason
            );
        }
    }
}

#[test]
fn ask_asks_about_every_spelling_and_never_ask_denies_them() {
    let ws = workspace();
    for preset in Preset::ALL {
        let permissions = Permissions::new(preset, rules(&["ask bash(curl *)"]), &ws.roots);
        let expected = if preset.may_ask() {
            RuleEffect::Ask
        } else {
            RuleEffect::Deny
        };
        for (command, _) in SPELLINGS {
            let verdict = decide(&permissions, "bash", json!({ "command": command }));
            assert_eq!(
                verdict.effect, expected,
                "{command:?} under {preset}: {}",
                verdict.reason
            );
            if preset.may_ask() {
                assert!(
                    verdict.reason.contains("`ask bash(curl *)`"),
                    "{}",
                    verdict.reason
                );
            }
        }
    }
}

#[test]
fn the_deny_guard_matches_exactly_what_deny_rules_deny() {
    let ws = workspace();
    let permissions = Permissions::new(
        Preset::FullAuto,
        rules(&[
            "deny bash(curl *)",
            "deny bash(git push*)",
            "deny bash(*--force*)",
        ]),
        &ws.roots,
    );
    let extra = [
        "git $(echo push) origin",
        "git log && git status",
        "git commit --force-with-lease",
        "$EDITOR notes.txt",
    ];
    let commands = SPELLINGS
        .iter()
        .map(|(command, _)| *command)
        .chain(BENIGN.iter().copied())
        .chain(extra);
    for command in commands {
        let decided = effect(&permissions, command) == RuleEffect::Deny;
        let guarded = matches!(
            guard_check(&permissions, "bash", json!({ "command": command })),
            GuardVerdict::Deny { .. }
        );
        assert_eq!(decided, guarded, "{command:?}");
    }
    // A partly unknown command is denied when a deny rule could name it.
    assert_eq!(
        effect(&permissions, "git $(echo push) origin"),
        RuleEffect::Deny
    );
    // A program known only at run time: any deny rule with a command subject could name it.
    let unknown = decide(
        &permissions,
        "bash",
        json!({"command": "$EDITOR notes.txt"}),
    );
    assert_eq!(unknown.effect, RuleEffect::Deny);
    assert!(
        unknown.reason.contains("only known at run time"),
        "{}",
        unknown.reason
    );
    // Without a deny rule naming commands, an unknown program is the preset's to decide.
    let open = Permissions::new(Preset::FullAuto, rules(&["deny read(**/.env)"]), &ws.roots);
    assert_eq!(effect(&open, "$EDITOR notes.txt"), RuleEffect::Allow);
}

#[test]
fn each_simple_command_takes_its_own_rule_and_the_line_the_strongest() {
    let ws = workspace();
    let permissions = Permissions::new(
        Preset::Untrusted,
        rules(&[
            "allow bash(git status*)",
            "allow bash(ls*)",
            "ask bash(git push*)",
            "deny bash(rm -rf *)",
        ]),
        &ws.roots,
    );
    let cases = [
        ("git status && ls -la", RuleEffect::Allow),
        ("git status; ls | ls", RuleEffect::Allow),
        ("ls && git push", RuleEffect::Ask),
        ("ls && make", RuleEffect::Ask),
        ("git status && rm -rf /", RuleEffect::Deny),
        ("git push; rm -rf /", RuleEffect::Deny),
        ("ls > listing.txt", RuleEffect::Ask),
        ("ls 2>/dev/null", RuleEffect::Allow),
        ("LS_COLORS= ls", RuleEffect::Ask),
        ("ls $(make)", RuleEffect::Ask),
    ];
    for (command, expected) in cases {
        let verdict = decide(&permissions, "bash", json!({ "command": command }));
        assert_eq!(verdict.effect, expected, "{command:?}: {}", verdict.reason);
    }
    let push = decide(&permissions, "bash", json!({"command": "ls && git push"}));
    assert!(
        push.reason.contains("`ask bash(git push*)`"),
        "{}",
        push.reason
    );
}

#[test]
fn a_session_key_covers_exactly_the_commands_asked_about() {
    let ws = workspace();
    let permissions = Permissions::new(Preset::Untrusted, rules(&["allow bash(ls*)"]), &ws.roots);
    let line = "ls && git push origin && echo a,b";
    let verdict = decide(&permissions, "bash", json!({ "command": line }));
    assert_eq!(verdict.effect, RuleEffect::Ask);
    let key = verdict.session_key.unwrap();
    assert_eq!(key, "bash({git push origin,echo a\\,b})");
    assert!(permissions.session().remember(&key));
    assert_eq!(effect(&permissions, line), RuleEffect::Allow);
    assert_eq!(
        effect(&permissions, "echo a,b; git push origin"),
        RuleEffect::Allow
    );
    assert_eq!(effect(&permissions, "git push --force"), RuleEffect::Ask);
    assert_eq!(effect(&permissions, "echo a"), RuleEffect::Ask);
    // Nothing a key could cover again: no key is offered.
    for unknown in ["$EDITOR x", "git push > log"] {
        let verdict = decide(&permissions, "bash", json!({ "command": unknown }));
        assert_eq!(verdict.effect, RuleEffect::Ask);
        assert_eq!(verdict.session_key, None, "{unknown}");
    }
}

#[test]
fn deny_rules_for_read_hide_their_paths_from_every_tool() {
    let ws = workspace();
    let permissions = Permissions::new(
        Preset::Workspace,
        rules(&[
            "deny read(**/.env)",
            "deny *(secrets/**)",
            "deny grep(logs/*)",
            "deny read",
            "allow read(docs/**)",
        ]),
        &ws.roots,
    );
    let protected = permissions.protect(ProtectedPaths::none()).unwrap();
    assert_eq!(protected.hidden_globs(), ["**/.env", "secrets/**"]);
    let root = ws.roots.as_slice()[0].clone();
    assert!(
        protected
            .read_refusal(&root.join("app/.env"), &ws.roots)
            .is_some()
    );
    assert!(
        protected
            .read_refusal(&root.join("logs/a.log"), &ws.roots)
            .is_none()
    );
}
