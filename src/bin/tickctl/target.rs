//! Naming one timer on the command line, by its id or by `--key`, and the `TimerRef` (within
//! `--namespace`) that the calls taking one timer send.

use clap::Args;

use crate::values::timer_id;
use tickd::proto::{timer_ref, TimerRef};

/// One timer, by id or by key.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub(crate) struct Target {
    /// The timer's id (16 hexadecimal digits, as `add` prints it).
    #[arg(value_parser = timer_id)]
    pub(crate) id: Option<String>,
    /// The timer's client key instead of its id.
    #[arg(long)]
    pub(crate) key: Option<String>,
}

impl Target {
    /// None only if clap let neither through, which its required group prevents; the server
    /// then refuses the call with its own message.
    pub(crate) fn timer_ref(&self, namespace: &str) -> Option<TimerRef> {
        let target = match (&self.id, &self.key) {
            (Some(id), _) => timer_ref::Target::Id(id.clone()),
            (None, Some(key)) => timer_ref::Target::Key(key.clone()),
            (None, None) => return None,
        };
        Some(timer_ref_in(namespace, target))
    }
}

/// A reference to a timer of `namespace`, by id or by key.
pub(crate) fn timer_ref_in(namespace: &str, target: timer_ref::Target) -> TimerRef {
    TimerRef {
        namespace: namespace.to_owned(),
        target: Some(target),
    }
}
