//! The pending timers listed a page at a time, and the page tokens the table makes: a position in the wheel's storage, bound
//! to the namespace's number, which is never reused.

use super::timer_table::{TimerTable, SCAN_POSITIONS};
use crate::clock::Now;
use crate::domain::{PageToken, PendingPage, PendingQuery, TimerError, ALL_NAMESPACES};

impl PageToken {
    /// A token of the listing of the namespace numbered `number` (None: every namespace).
    /// Namespace numbers are 64 bits and never reused (slots are), so a token outlives
    /// the namespace it came from without ever matching another.
    pub(crate) fn local(number: Option<u64>, position: u32) -> Self {
        let number = number.unwrap_or(u64::from(ALL_NAMESPACES));
        Self {
            scope: number as u32,
            position: (number >> 32) << 32 | u64::from(position),
        }
    }

    /// Where this token resumes the listing of `number`, if it came from that listing.
    pub(crate) fn local_position(self, number: Option<u64>) -> Option<u32> {
        let listing = Self::local(number, 0);
        (self.scope == listing.scope && self.position >> 32 == listing.position >> 32)
            .then_some(self.position as u32)
    }
}

/// Listing the pending timers a page at a time.
impl TimerTable {
    /// One page of the pending timers, in storage order (see [`PageToken`]).
    pub(super) fn pending(&self, query: PendingQuery, now: Now) -> Result<PendingPage, TimerError> {
        let namespace = match &query.namespace {
            None => None,
            Some(name) => match self.namespaces.slot(name) {
                Some(slot) => Some(slot),
                None => return Ok(PendingPage::default()),
            },
        };
        let number = namespace.map(|slot| self.namespaces[slot].number);
        let start = match query.after {
            None => 0,
            Some(token) => token.local_position(number).ok_or_else(|| {
                TimerError::invalid(
                    "page_token",
                    "comes from the listing of another namespace (or of one since emptied)",
                )
            })?,
        };
        let count = namespace.map_or(self.wheel.len() as u64, |slot| {
            self.namespaces[slot].pending
        });
        if query.page_size == 0 {
            return Ok(PendingPage {
                count,
                ..PendingPage::default()
            });
        }
        let mut timers = Vec::new();
        let mut bytes = 0;
        let mut resume_at = None;
        for (position, timer) in self.wheel.positions_from(start).take(SCAN_POSITIONS) {
            if timers.len() == query.page_size || bytes >= query.max_bytes {
                resume_at = Some(position);
                break;
            }
            resume_at = position.checked_add(1);
            let Some((_, deadline, record)) = timer else {
                continue;
            };
            if namespace.is_none_or(|id| id == record.namespace) {
                let view = self.view(record, deadline, now);
                bytes += view.listed_bytes();
                timers.push(view);
            }
        }
        // Past the last position there is nothing more to list.
        let more =
            resume_at.is_some_and(|position| self.wheel.positions_from(position).next().is_some());
        Ok(PendingPage {
            count,
            timers,
            next_page_token: more.then(|| PageToken::local(number, resume_at.unwrap_or_default())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_resumes_only_the_listing_it_came_from() {
        let number = (7u64 << 32) | 5;
        let token: PageToken = PageToken::local(Some(number), 42)
            .to_string()
            .parse()
            .unwrap();
        assert_eq!(token.local_position(Some(number)), Some(42));
        // Same lower half, another namespace: refused.
        assert_eq!(token.local_position(Some(5)), None);
        assert_eq!(token.local_position(Some(number + 1)), None);
        assert_eq!(token.local_position(None), None);
        let every = PageToken::local(None, 9);
        assert_eq!(every.local_position(None), Some(9));
        assert_eq!(every.local_position(Some(number)), None);
    }
}
