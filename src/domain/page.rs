//! The Pending listing: what a page asks for, what it answers, and the token where the
//! next page resumes, bound to the listing it came from so that it cannot be replayed
//! against another.

use std::fmt;
use std::str::FromStr;

use super::error::TimerError;
use super::timer::TimerView;

/// Where a page of the pending listing resumes: a position in the wheel's storage (see
/// [`crate::wheel::Wheel::positions_from`]), bound to the listing it came from (one
/// namespace, or all of them) so that it cannot be replayed against another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageToken {
    /// The namespace's number, or `ALL_NAMESPACES` (here, the lower half of the number).
    pub scope: u32,
    /// Where the listing resumes: a storage position here, the last id listed in the
    /// replicated store. Storage positions take 32 bits: here the upper half holds the
    /// upper half of the namespace's number.
    pub position: u64,
}

/// The `scope` of a token from a listing of every namespace.
pub const ALL_NAMESPACES: u32 = u32::MAX;

impl fmt::Display for PageToken {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{:x}.{:x}", self.scope, self.position)
    }
}

impl FromStr for PageToken {
    type Err = TimerError;
    fn from_str(text: &str) -> Result<Self, TimerError> {
        let malformed = || TimerError::invalid("page_token", "not a token from a previous page");
        let (scope, position) = text.split_once('.').ok_or_else(malformed)?;
        Ok(PageToken {
            scope: u32::from_str_radix(scope, 16).map_err(|_| malformed())?,
            position: u64::from_str_radix(position, 16).map_err(|_| malformed())?,
        })
    }
}

/// One page of the Pending listing, as asked.
#[derive(Debug, Clone)]
pub struct PendingQuery {
    /// None: every namespace.
    pub namespace: Option<String>,
    pub page_size: usize,
    /// A page ends once its timers hold this many bytes (one timer at least), so that the
    /// answer fits what clients accept.
    pub max_bytes: usize,
    pub after: Option<PageToken>,
}

/// One page of the Pending listing: `count` is every timer of the listing, not only
/// those on this page.
#[derive(Debug, Clone, Default)]
pub struct PendingPage {
    pub count: u64,
    pub timers: Vec<TimerView>,
    pub next_page_token: Option<PageToken>,
}
