//! Page tokens of the Pending listing: where the next page resumes, bound to the listing
//! it came from so that it cannot be replayed against another.

use std::fmt;
use std::str::FromStr;

use super::table::TimerError;

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
