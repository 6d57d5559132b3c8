//! Who this worker process is: host, kernel boot id, pid and process start time, so another
//! worker on the same host can tell for sure whether it is still alive.

/// Kernel boot id (`/proc/sys/kernel/random/boot_id`), or "unknown".
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The process's pid namespace (`/proc/self/ns/pid`, e.g. `pid:[4026531836]`), or "unknown".
/// Containers can share a host name and a kernel (boot id) yet number pids apart: a pid can
/// only be checked by a process in the same namespace.
pub fn pid_namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|p| p.into_os_string().into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}

/// The host name, or "unknown".
pub fn host() -> String {
    hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}

/// The host name a worker records: `worker.host_id` when set (tests and containers that
/// share a machine but act as separate hosts), else the machine's.
pub fn host_of(cfg: &crate::config::WorkerConfig) -> String {
    cfg.host_id.clone().unwrap_or_else(host)
}

/// Start time of process `pid` in clock ticks since boot (field 22 of `/proc/PID/stat`),
/// or None when the process does not exist or has exited (a zombie waiting to be reaped).
pub fn process_start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: parse after the last ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    // Field 3, the state: Z (zombie) and X (dead) have exited already.
    if matches!(fields.next(), Some("Z" | "X")) {
        return None;
    }
    fields.nth(18).map(str::to_string)
}

/// Whether the process (pid, start time) recorded on this host and boot is certainly gone.
pub fn is_dead(pid: i64, start_time: &str) -> bool {
    let Ok(pid) = u32::try_from(pid) else {
        return false;
    };
    match process_start_time(pid) {
        None => std::path::Path::new("/proc/self").exists(),
        Some(now) => now != start_time,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_bogus_one_is_dead() {
        let me = std::process::id();
        let st = process_start_time(me).unwrap();
        assert!(!is_dead(me as i64, &st));
        assert!(is_dead(me as i64, "1"));
        assert!(is_dead(4_000_000, "1"));
    }
}
