//! The standard `process_*` metrics (CPU time, memory, file descriptors, start time), read
//! from `/proc/self` at scrape time, under the names every Prometheus client library uses,
//! so that the fleet's dashboards and alerts for them work on tickd unchanged.
//!
//! Only Linux has `/proc/self`; elsewhere (or if it cannot be read) the families are left
//! out of the scrape rather than reported as zeros.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;
use tracing::debug;

/// Clock ticks per second in `/proc/self/stat`'s times. The kernel reports them in USER_HZ,
/// fixed at 100 on every architecture Linux exposes to user space (Go's procfs, which the
/// Prometheus Go client reads these metrics with, assumes the same).
const USER_HZ: f64 = 100.0;

/// The figures of one scrape.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ProcessFigures {
    pub(crate) cpu_seconds: f64,
    pub(crate) resident_memory_bytes: u64,
    pub(crate) virtual_memory_bytes: u64,
    pub(crate) start_time_seconds: f64,
    pub(crate) open_fds: u64,
    pub(crate) max_fds: Option<u64>,
}

/// Registered on the registry's root: the names carry no `tickd_` prefix.
#[derive(Debug, Default)]
pub(crate) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let figures = match read_figures() {
            Ok(figures) => figures,
            Err(error) => {
                debug!(%error, "process metrics unavailable");
                return Ok(());
            }
        };
        let cpu = ConstCounter::new(figures.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?)?;
        let gauges = [
            (
                "process_resident_memory",
                "Resident memory size",
                Some(Unit::Bytes),
                figures.resident_memory_bytes as f64,
            ),
            (
                "process_virtual_memory",
                "Virtual memory size",
                Some(Unit::Bytes),
                figures.virtual_memory_bytes as f64,
            ),
            (
                "process_start_time",
                "Start time of the process since the Unix epoch",
                Some(Unit::Seconds),
                figures.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Open file descriptors",
                None,
                figures.open_fds as f64,
            ),
        ];
        let max_fds = figures.max_fds.map(|max| {
            (
                "process_max_fds",
                "Limit on open file descriptors (soft)",
                None,
                max as f64,
            )
        });
        for (name, help, unit, value) in gauges.into_iter().chain(max_fds) {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(
                name,
                help,
                unit.as_ref(),
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(target_os = "linux")]
fn read_figures() -> std::io::Result<ProcessFigures> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let boot_time = boot_time_seconds(&std::fs::read_to_string("/proc/stat")?)?;
    let status = std::fs::read_to_string("/proc/self/status")?;
    let mut figures = parse_stat(&stat, boot_time)?;
    // VmRSS in kB needs no page size (which only a libc call would give).
    figures.resident_memory_bytes = status_kilobytes(&status, "VmRSS:").unwrap_or(0) * 1024;
    figures.open_fds = std::fs::read_dir("/proc/self/fd")?.count() as u64;
    figures.max_fds = rlimit::Resource::NOFILE.get_soft().ok();
    Ok(figures)
}

#[cfg(not(target_os = "linux"))]
fn read_figures() -> std::io::Result<ProcessFigures> {
    Err(std::io::Error::other("no /proc on this system"))
}

fn malformed(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("malformed {what}"))
}

/// CPU time, virtual memory and start time from `/proc/self/stat` (see proc(5)).
fn parse_stat(stat: &str, boot_time: f64) -> std::io::Result<ProcessFigures> {
    // The command name (field 2) is in parentheses and may hold spaces or parentheses
    // itself: the fields that follow start after the last ')'.
    let after_name = stat
        .rsplit_once(')')
        .ok_or_else(|| malformed("/proc/self/stat"))?
        .1;
    // `fields[0]` is field 3 (state); field N is `fields[N - 3]`.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |number: usize| -> std::io::Result<u64> {
        fields
            .get(number - 3)
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| malformed("/proc/self/stat"))
    };
    let (user_ticks, system_ticks) = (field(14)?, field(15)?);
    Ok(ProcessFigures {
        cpu_seconds: (user_ticks + system_ticks) as f64 / USER_HZ,
        virtual_memory_bytes: field(23)?,
        start_time_seconds: boot_time + field(22)? as f64 / USER_HZ,
        ..ProcessFigures::default()
    })
}

/// `btime` of `/proc/stat`: when the system booted, in seconds since the Unix epoch.
fn boot_time_seconds(stat: &str) -> std::io::Result<f64> {
    stat.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| malformed("/proc/stat"))
}

/// A `Name:   1234 kB` line of `/proc/self/status`.
fn status_kilobytes(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_a_command_name_holding_spaces_and_parentheses() {
        let stat = "4242 (tick d) (x)) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    250 150 0 0 20 0 9 0 12345 104857600 2048 18446744073709551615";
        let figures = parse_stat(stat, 1_700_000_000.0).unwrap();
        assert_eq!(figures.cpu_seconds, 4.0);
        assert_eq!(figures.virtual_memory_bytes, 104_857_600);
        assert_eq!(figures.start_time_seconds, 1_700_000_123.45);
    }

    #[test]
    fn a_truncated_stat_is_an_error_not_zeros() {
        assert!(parse_stat("4242 (tickd) S 1 2 3", 0.0).is_err());
        assert!(parse_stat("no parenthesis", 0.0).is_err());
        assert!(boot_time_seconds("cpu 1 2 3\n").is_err());
    }

    #[test]
    fn status_lines_are_read_in_kilobytes() {
        let status = "Name:\ttickd\nVmSize:\t  102400 kB\nVmRSS:\t    2048 kB\n";
        assert_eq!(status_kilobytes(status, "VmRSS:"), Some(2048));
        assert_eq!(status_kilobytes(status, "VmSwap:"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_as_alive() {
        let figures = read_figures().unwrap();
        assert!(figures.resident_memory_bytes > 0);
        assert!(figures.virtual_memory_bytes >= figures.resident_memory_bytes);
        assert!(figures.open_fds > 0);
        assert!(figures.max_fds.unwrap() >= figures.open_fds);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        // Started before now, and after the system booted (a day is generous for a test).
        assert!(figures.start_time_seconds <= now + 1.0);
        assert!(figures.start_time_seconds > now - 86_400.0);
    }
}
