//! Why tickctl stops with an error, and the exit code and single stderr line each reason gets:
//! 1 the server refused the call, 2 bad usage, 3 tickd unreachable.

use std::process::ExitCode;

use tonic::{Code, Status};

/// Exit code of a call the server refused, in whole or in part (one refused timer of a batch,
/// an unknown delivery id, a service that is not serving).
pub(crate) const EXIT_REFUSED: u8 = 1;
/// Exit code of bad input: clap uses 2 for its own usage errors, so tickctl's match.
const EXIT_USAGE: u8 = 2;
/// Exit code when tickd cannot be reached, so scripts can tell "down" from "said no".
const EXIT_UNREACHABLE: u8 = 3;

/// Why tickctl stops with an error; each kind has its exit code.
pub(crate) enum Failure {
    /// Bad input found after parsing the command line (exit 2).
    Usage(String),
    /// The server answered with an error status (exit 1; 3 for UNAVAILABLE).
    Status(Status),
    /// The server could not be reached (exit 3).
    Unreachable(String),
    /// Anything else, e.g. a stream that ended early (exit 1).
    Other(String),
}

impl From<Status> for Failure {
    fn from(status: Status) -> Self {
        Failure::Status(status)
    }
}

impl Failure {
    /// The same failure, its message preceded by `context` (which part of the work it hit).
    pub(crate) fn after(self, context: &str) -> Failure {
        match self {
            Failure::Usage(message) => Failure::Usage(format!("{context}: {message}")),
            Failure::Status(status) => Failure::Status(Status::new(
                status.code(),
                format!("{context}: {}", status.message()),
            )),
            Failure::Unreachable(message) => Failure::Unreachable(format!("{context}: {message}")),
            Failure::Other(message) => Failure::Other(format!("{context}: {message}")),
        }
    }

    /// Prints the failure as one `tickctl: ...` line on stderr and returns its exit code.
    pub(crate) fn report(&self) -> ExitCode {
        let (message, exit_code) = match self {
            Failure::Usage(message) => (message.clone(), EXIT_USAGE),
            Failure::Status(status) => {
                let mut message = one_line(status.message());
                if message.is_empty() {
                    message = "(no message)".to_owned();
                }
                // UNAVAILABLE is tickd stopping or not listening: the same exit as when it
                // cannot be reached at all.
                let exit_code = if status.code() == Code::Unavailable {
                    EXIT_UNREACHABLE
                } else {
                    EXIT_REFUSED
                };
                (
                    format!("{}: {message}", grpc_code_name(status.code())),
                    exit_code,
                )
            }
            Failure::Unreachable(message) => (message.clone(), EXIT_UNREACHABLE),
            Failure::Other(message) => (message.clone(), EXIT_REFUSED),
        };
        eprintln!("tickctl: {message}");
        ExitCode::from(exit_code)
    }
}

/// Folds every run of whitespace (newlines included) into one space, so a server message or
/// an error chain always fits the single stderr line the tests and scripts rely on.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The canonical gRPC name of a status code, as in the gRPC spec (tonic's Display is prose).
pub(crate) fn grpc_code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
