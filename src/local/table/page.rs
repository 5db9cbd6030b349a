//! Page tokens as the worker's table makes them: a position in the wheel's storage, bound
//! to the namespace's number, which is never reused.

use crate::domain::{PageToken, ALL_NAMESPACES};

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
