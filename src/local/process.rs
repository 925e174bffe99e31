//! Identifying a runner process across `ralph run` invocations: its pid plus its start
//! time, so a reused pid is not mistaken for the runner that held a claim.

/// The start time of process `pid` in clock ticks since boot (Linux `/proc/PID/stat`
/// field 22), or `None` when the process does not exist or the platform has no `/proc`.
pub(crate) fn start_time(pid: u32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// Reads field 22 (`starttime`) of a `/proc/PID/stat` line. The command name (field 2) is
/// parenthesised and may itself contain spaces and parentheses, so fields are counted from
/// the last `)`.
pub(crate) fn parse_start_time(stat: &str) -> Option<i64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// A process, told apart from a later process that reuses its pid by its start time:
/// written `pid:starttime` (or `pid` when the start time is unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessId {
    /// The process ID.
    pub pid: u32,
    /// Its start time ([`start_time`]), when known.
    pub start: Option<i64>,
}

impl ProcessId {
    /// Process `pid`, with its start time as read now.
    pub fn of(pid: u32) -> ProcessId {
        ProcessId {
            pid,
            start: start_time(pid),
        }
    }

    /// This process.
    pub fn own() -> ProcessId {
        ProcessId::of(std::process::id())
    }

    /// The process a `pid:starttime` (or `pid`) token names; `None` when it is malformed.
    pub fn parse(token: &str) -> Option<ProcessId> {
        let mut parts = token.splitn(2, ':');
        let pid = parts.next()?.parse().ok()?;
        let start = parts.next().and_then(|s| s.parse().ok());
        Some(ProcessId { pid, start })
    }

    /// Whether the process is alive and, when its start time is known, is the same process
    /// (not a later process that reused the pid). A zombie counts as gone.
    pub fn is_alive(&self) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) else {
            return signal_zero(self.pid);
        };
        let state = stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next());
        if matches!(state, Some("Z" | "X")) {
            return false;
        }
        match self.start {
            Some(expected) => parse_start_time(&stat) == Some(expected),
            None => true,
        }
    }
}

impl std::fmt::Display for ProcessId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.start {
            Some(start) => write!(f, "{}:{start}", self.pid),
            None => write!(f, "{}", self.pid),
        }
    }
}

/// `pid:starttime` naming this process, for records other processes check.
pub(crate) fn own_token() -> String {
    ProcessId::own().to_string()
}

/// Whether the process named by a token from [`own_token`] is still alive.
pub(crate) fn token_alive(token: &str) -> bool {
    ProcessId::parse(token).is_some_and(|process| process.is_alive())
}

/// The direct children of process `pid` (Linux `/proc/PID/task/*/children`).
pub(crate) fn children(pid: u32) -> Vec<u32> {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    threads
        .filter_map(Result::ok)
        .filter_map(|thread| std::fs::read_to_string(thread.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Kills a runner at once, with the process groups of its children (the agent runs in a
/// group of its own, which the runner can no longer stop once killed).
pub(crate) fn kill_runner(pid: u32) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    for child in children(pid) {
        if let Ok(child) = i32::try_from(child) {
            // Already gone is fine: the point is that nothing is left running.
            let _ = kill(Pid::from_raw(-child), Signal::SIGKILL);
            let _ = kill(Pid::from_raw(child), Signal::SIGKILL);
        }
    }
    if let Ok(pid) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

fn signal_zero(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_field_22_counted_after_the_command_name() {
        let stat = "42 (we ird) name)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 10 18446744073709551615";
        assert_eq!(parse_start_time(stat), Some(987_654));
    }

    #[test]
    fn a_truncated_stat_line_has_no_start_time() {
        assert_eq!(parse_start_time("42 (x) S 1 2"), None);
    }

    #[test]
    fn this_process_is_alive_with_its_own_start_time() {
        let own = ProcessId::own();
        assert!(own.start.is_some());
        assert!(own.is_alive());
    }

    #[test]
    fn a_spawned_child_is_listed_among_the_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep starts");
        let listed = children(std::process::id()).contains(&child.id());
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert!(listed);
    }

    #[test]
    fn this_process_token_is_alive() {
        assert!(token_alive(&own_token()));
    }

    #[test]
    fn a_token_reads_back_as_the_process_it_names() {
        let own = ProcessId::own();
        assert_eq!(ProcessId::parse(&own.to_string()), Some(own));
        let no_start = ProcessId {
            pid: 42,
            start: None,
        };
        assert_eq!(ProcessId::parse("42"), Some(no_start));
    }

    #[test]
    fn a_malformed_token_names_no_live_process() {
        assert!(!token_alive("not-a-pid"));
    }

    #[test]
    fn a_different_start_time_means_another_process() {
        let own = ProcessId::own();
        let other = ProcessId {
            start: own.start.map(|s| s + 1),
            ..own
        };
        assert!(!other.is_alive());
    }
}
