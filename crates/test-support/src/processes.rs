//! The process table as tests read it: which live processes a run left behind.

/// Whether process `pid` lives (exists and is not a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

/// Live (not zombie) processes whose command line contains one of `needles`, as
/// `"<pid>: <command line>"`. Zombies are dead already: they only wait to be reaped, which
/// the machine's PID 1 may do late.
pub fn live_with(needles: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !needles
            .iter()
            .any(|needle| cmdline.contains(needle.as_str()))
        {
            continue;
        }
        // The state follows the command name in parentheses.
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next());
        if state != Some("Z") {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}
