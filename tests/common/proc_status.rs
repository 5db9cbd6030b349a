//! A process's memory as the kernel reports it in `/proc/<pid>/status`.

/// A field of `/proc/<pid>/status`, in bytes (`VmRSS`: resident now; `VmHWM`: the peak so
/// far).
pub(crate) fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .unwrap_or_else(|| panic!("no {field} in the status of {pid}"))
}

/// Resident set size of this process (the in-process server runs in it), in bytes.
pub(crate) fn rss_bytes() -> u64 {
    status_bytes(std::process::id(), "VmRSS")
}
