//! Lines that made brush-parser run for minutes or hours (its grammars backtrack without
//! memoizing, and time multiplies with each construct nested in one it may read two ways) are
//! unknown commands, priced and refused before any parse; real lines parse as before.
//!
//! Without the budget this file does not finish: the smallest input below took 9 s in a release
//! build, and each family's largest size would take from hours to years.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use toolrail_tools_core::command_line::{CommandLine, UnknownProgram};

/// Whether some command of `text` is unknown because parsing it would cost too much.
fn refused(text: &str) -> bool {
    CommandLine::parse(text)
        .commands()
        .iter()
        .any(|command| command.unknown_program() == Some(&UnknownProgram::TooComplex))
}

/// A refused line is caught by what restricts and let through by nothing.
fn assert_unknown(text: &str) {
    let line = CommandLine::parse(text);
    assert!(refused(text), "{text:?}: {:?}", line.commands());
    assert!(line.has_unknown_program(), "{text:?}");
    assert!(!line.is_permitted_by(|_| true), "{text:?}");
}

/// The slow inputs found, with the time each took in a release build before the budget.
#[test]
fn the_slow_inputs_found_are_unknown_commands() {
    for text in [
        // The class the CI run hit (83 bytes): `)` escaped or quoted in a here-document's
        // `$(…)` closes nothing, so counting parentheses as written saw depth 1. 3× a level:
        // 18 levels, about a minute.
        format!("cat <<E\n{}\nE", "$(\\)".repeat(18)),
        format!("cat <<E\n{}\nE", "$(')'".repeat(18)),
        format!("cat <<E\n{}\nE", "$(\")\"".repeat(16)),
        // `${` was counted only for the stack: 12 `$(` and 8 `${a-`, 37 s at 65 bytes.
        format!("cat<<E\n{}{}\nE", "$(".repeat(12), "${a-".repeat(8)),
        // A valid word: each `${a[` is read by the twenty alternatives of `${…}` that begin
        // with a name. 6 levels, 42 bytes: 9.3 s; 7 levels: about three minutes.
        format!("echo {}x{}", "${a[".repeat(7), "]}".repeat(7)),
        // Found by random search: a word read as an assignment (`x[` …) by the line grammar.
        "x[}${a[;}x}}${a[}}${a[}#${a[${a[}}}${a[ ]]}${a[}${a[}}".to_owned(),
        // `$((` tried as arithmetic reads to the end of its word for `))`: 6× a level.
        format!("cat <<E\n$(x){}\nE", "$((".repeat(12)),
        // `case` items without `;;`, read as ending with one and then again as the last.
        format!("{}x", "case a in a) ".repeat(24)),
        // Quadratic, not exponential: the tokenizer queues the words after a here-document's
        // `<<` on its line and takes them from the front. 320 KB, 24 s.
        format!("cat <<E{}\nb\nE", " x".repeat(160_000)),
        format!("echo $(cat <<E{}\nb\nE\n)", " x".repeat(160_000)),
        format!("cat {}\n{}", "<<E ".repeat(40_000), "b\nE\n".repeat(40_000)),
        // Parentheses, as fuzzed before (23 levels held the fuzzer for twenty minutes).
        "(".repeat(40),
        format!("[[ x =~ {}x ]]", "(".repeat(40)),
    ] {
        assert_unknown(&text);
    }
}

/// One family of constructs, spelt at size `n`.
type Family = fn(usize) -> String;

/// Each family of constructs that multiply the parser's work, at every size from where the
/// budget refuses it to far past where it used to take hours: refused without being parsed
/// (each check takes microseconds), and the smallest sizes still read.
#[test]
fn every_family_is_refused_from_some_size_on() {
    let families: &[(&str, Family)] = &[
        ("$( unclosed in a here-document", |n| {
            format!("cat <<E\n{}x\nE", "$(".repeat(n))
        }),
        ("$(\\) in a here-document", |n| {
            format!("cat <<E\n{}\nE", "$(\\)".repeat(n))
        }),
        ("$(')' in a here-document", |n| {
            format!("cat <<E\n{}\nE", "$(')'".repeat(n))
        }),
        ("${a- in a here-document", |n| {
            format!("cat <<E\n$(x){}\nE", "${a-".repeat(n))
        }),
        ("${a// in a here-document", |n| {
            format!("cat <<E\n$(x){}\nE", "${a//".repeat(n))
        }),
        ("$[ in a here-document", |n| {
            format!("cat <<E\n$(x){}\nE", "$[".repeat(n))
        }),
        ("$(( in a here-document", |n| {
            format!("cat <<E\n$(x){}\nE", "$((".repeat(n))
        }),
        ("$((x) ) in a here-document", |n| {
            format!("cat <<E\n$(x){}\nE", "$((x) ) ".repeat(n))
        }),
        ("\"x$( in a here-document", |n| {
            format!("cat <<E\n{}\nE", "\"x$(".repeat(n))
        }),
        ("@( in $(", |n| format!("cat <<E\n$({}x\nE", "@(".repeat(n))),
        ("${a[ nested, closed", |n| {
            format!("echo {}x{}", "${a[".repeat(n), "]}".repeat(n))
        }),
        ("\"x$(x nested, closed", |n| {
            format!("echo {}x{}", "\"x$(x ".repeat(n), ")\"".repeat(n))
        }),
        ("x[${a[ as an assignment", |n| {
            format!("x[{}1{}]=1", "${a[".repeat(n), "]}".repeat(n))
        }),
        ("( unclosed", |n| "(".repeat(n)),
        ("( closed, failing inside", |n| {
            format!("{};{}", "( ".repeat(n), " )".repeat(n))
        }),
        ("case without ;;", |n| {
            format!("{}x", "case a in a) ".repeat(n))
        }),
        ("case without ;; closed", |n| {
            format!("{}x{}", "case a in a) ".repeat(n), " ;esac".repeat(n))
        }),
        ("=~ (", |n| format!("[[ x =~ {}x ]]", "(".repeat(n))),
        ("<( failing inside", |n| {
            format!("cat {};{}", "<(cat ".repeat(n), ")".repeat(n))
        }),
        ("bash -c nesting $(", |n| {
            format!("bash -c 'cat <<E\n{}x\nE'", "$(".repeat(n))
        }),
    ];
    for (name, family) in families {
        let first = (1..=64)
            .find(|&n| refused(&family(n)))
            .unwrap_or_else(|| panic!("{name}: never refused up to 64"));
        assert!(first > 1, "{name}: refused at 1");
        for n in first..=(first + 8).max(48) {
            assert_unknown(&family(n));
        }
    }
}

/// Strings parsed inside strings share the line's budget: many substitutions that each fit
/// do not add up to more than one line may cost.
#[test]
fn strings_in_strings_share_one_budget() {
    let one = format!("cat <<E\n{}x\nE", "$(".repeat(8));
    assert!(!refused(&one));
    let many = std::iter::repeat_n(one.as_str(), 64)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(refused(&many));
    // What is left after a refused string still serves the smaller ones after it.
    let line = CommandLine::parse(&format!("bash -c '{}'; curl x", "(".repeat(40)));
    let programs: Vec<_> = line.commands().iter().map(|c| c.program()).collect();
    assert_eq!(programs, [None, Some("bash"), Some("curl")]);
}

/// Lines as agents write them, nested as deep as they nest, read as before.
#[test]
fn real_lines_are_read_in_full() {
    let cases: &[(&str, &[&str])] = &[
        (
            r#"cat > setup.sh <<EOF
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION="${VERSION:-$(git describe --tags --always)}"
for f in "${FILES[@]}"; do echo "${f##*/} (${#FILES[@]}) $(date +%s) $((n + 1))"; done
echo "${arr[$((i+1))]}"
EOF"#,
            &["dirname", "cd", "pwd", "git", "date", "cat"],
        ),
        (
            "cat > README.md <<EOF\nRun `cargo test` and `cargo build`.\n```\ncargo run\n```\nEOF",
            &["cargo", "cargo", "cargo", "cat"],
        ),
        (
            r#"echo "$(dirname "$(readlink -f "$(command -v "${1:-bash}")")")""#,
            &["command", "readlink", "dirname", "echo"],
        ),
        (
            "case \"${1:-}\" in start|run) ./server;; stop) kill \"$(cat pid)\";; *) exit 1;; esac",
            &["server", "cat", "kill", "exit"],
        ),
        (
            "diff <(sort a) <(sort b) && echo $(( (a + b) * ((c)) )) ${x[$i]} ${s:0:${#s}-1}",
            &["sort", "sort", "diff", "echo"],
        ),
        (
            "while read -r l; do [[ $l =~ ^([a-z]+)=(.*)$ ]] && export \"${BASH_REMATCH[1]}=x\"; done",
            &["read", "export"],
        ),
        (
            "(cd a && (make -s || (echo fail; exit 1))) && bash -c 'for f in $(ls); do wc -l \"$f\"; done'",
            &["cd", "make", "echo", "exit", "ls", "wc", "bash"],
        ),
    ];
    for (text, programs) in cases {
        let line = CommandLine::parse(text);
        assert!(!refused(text), "{text:?}: {:?}", line.commands());
        let found: Vec<&str> = line.commands().iter().filter_map(|c| c.program()).collect();
        assert_eq!(&found, programs, "{text:?}");
    }
}
