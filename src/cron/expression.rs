//! Reading a cron expression: the field count, nicknames, names, and errors that say
//! which field is wrong.
//!
//! croner does the parsing proper and defines what each field matches (read into bit
//! masks by [`super::civil`]). This file adds what a
//! gRPC caller needs on top: a position and token in every error it can place, names
//! checked in the field they belong to (croner replaces `MON` or `JAN` anywhere in the
//! expression, so `0 0 * MON *` would silently mean January), croner's own extensions
//! that tickd does not promise (`+` for day-of-month AND day-of-week, a 7th year field)
//! refused, and an expression that can never fire refused at parse time instead of
//! scheduling a timer that never comes.

use croner::parser::{CronParser, Seconds, Year};

use super::civil::CivilMatcher;

/// Field names in the order of a 6-field expression; a 5-field one starts at "minute".
const FIELD_NAMES: [&str; 6] = [
    "second",
    "minute",
    "hour",
    "day of month",
    "month",
    "day of week",
];
/// The values each field takes, in the same order, for the error messages.
const FIELD_RANGES: [&str; 6] = ["0-59", "0-59", "0-23", "1-31", "1-12", "0-7"];
const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Why a schedule was refused. The API turns it into INVALID_ARGUMENT; [`Self::field`]
/// names the request field and `Display` gives the whole message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// Wrong as a whole: empty, wrong field count, or a combination that never fires.
    #[error("cron: {reason}")]
    Expression { reason: String },
    /// One field (1-based `position` in the expression as written) is wrong.
    #[error("cron: field {position} ({name}) {token:?}: {reason}")]
    Field {
        position: usize,
        name: &'static str,
        token: String,
        reason: String,
    },
    #[error("time_zone: unknown IANA time zone {name:?}")]
    TimeZone { name: String },
}

impl ScheduleError {
    /// The request field at fault: "cron" or "time_zone".
    pub fn field(&self) -> &'static str {
        match self {
            ScheduleError::Expression { .. } | ScheduleError::Field { .. } => "cron",
            ScheduleError::TimeZone { .. } => "time_zone",
        }
    }
}

/// Parses `expression` (already trimmed, not empty) with croner into the masks that
/// the search runs on.
pub(super) fn parse(expression: &str) -> Result<CivilMatcher, ScheduleError> {
    let expanded;
    let text = if expression.starts_with('@') {
        expanded = nickname(expression)?;
        expanded
    } else {
        expression
    };
    let tokens: Vec<&str> = text.split_whitespace().collect();
    let names: &[&'static str] = match tokens.len() {
        5 => &FIELD_NAMES[1..],
        6 => &FIELD_NAMES[..],
        n => {
            return Err(ScheduleError::Expression {
                reason: format!(
                    "expected 5 fields (minute hour day-of-month month day-of-week) \
                     or 6 (with seconds first), found {n}"
                ),
            })
        }
    };
    for (index, (token, name)) in tokens.iter().zip(names).enumerate() {
        check_letters(token, name).map_err(|reason| field_error(index, name, token, reason))?;
    }
    let cron = croner_parser().parse(text).map_err(|whole| {
        // croner's messages do not say which field; parse each field alone, the others
        // wildcards, to find the first one that croner refuses by itself.
        for (index, name) in names.iter().enumerate() {
            let mut probe = vec!["*"; tokens.len()];
            probe[index] = tokens[index];
            if let Err(error) = croner_parser().parse(&probe.join(" ")) {
                let range = FIELD_RANGES[index + 6 - names.len()];
                let reason = format!("{} (the field takes {range})", clean(error));
                return field_error(index, name, tokens[index], reason);
            }
        }
        ScheduleError::Expression {
            reason: clean(whole),
        }
    })?;
    let matcher = CivilMatcher::new(&cron);
    if !matcher.fires_at_all() {
        return Err(ScheduleError::Expression {
            reason: "never fires: no date matches its day-of-month, month and day-of-week \
                     fields (e.g. 30 February)"
                .into(),
        });
    }
    Ok(matcher)
}

/// The `@` forms of Vixie cron that mean a schedule (`@reboot` does not, for a timer).
fn nickname(expression: &str) -> Result<&'static str, ScheduleError> {
    Ok(match expression.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        _ => {
            return Err(field_error(
                0,
                "nickname",
                expression,
                "expected one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, \
                 @hourly"
                    .into(),
            ))
        }
    })
}

/// Letters are allowed only as names in their own field and as `L`/`W`; `+` (croner's
/// AND switch) is refused so the day rule stays Vixie's OR (see the module docs).
fn check_letters(token: &str, name: &str) -> Result<(), String> {
    if token.contains('+') {
        return Err("`+` (match day of month AND day of week) is not supported".into());
    }
    for word in token.split(|c: char| !c.is_ascii_alphabetic()) {
        let upper = word.to_ascii_uppercase();
        let allowed = word.is_empty()
            || match name {
                "month" => MONTH_NAMES.contains(&upper.as_str()),
                "day of week" => DAY_NAMES.contains(&upper.as_str()) || upper == "L",
                "day of month" => matches!(upper.as_str(), "L" | "W" | "LW"),
                _ => false,
            };
        if !allowed {
            return Err(format!("{word:?} is not a value of this field"));
        }
    }
    Ok(())
}

pub(super) fn croner_parser() -> CronParser {
    // Year disallowed: 5 or 6 fields only. Day of month and day of week combine with
    // OR when both are restricted (croner's default, as in Vixie cron).
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

fn field_error(index: usize, name: &'static str, token: &str, reason: String) -> ScheduleError {
    ScheduleError::Field {
        position: index + 1,
        name,
        token: token.to_string(),
        reason,
    }
}

/// croner's message without its "Component error: " style prefix.
fn clean(error: croner::errors::CronError) -> String {
    use croner::errors::CronError as E;
    match error {
        E::InvalidPattern(text) | E::IllegalCharacters(text) | E::ComponentError(text) => {
            text.trim_end_matches('.').to_string()
        }
        other => other.to_string(),
    }
}
