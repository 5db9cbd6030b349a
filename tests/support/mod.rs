//! Real processes for the integration tests that need more than an in-process server:
//! `tickd` daemons launched from the built binary ([`daemon`]) and a throwaway PostgreSQL
//! server ([`postgres`]).
//!
//! [`postgres`] installs PostgreSQL with `crate::common::tooling` when it is missing, so a
//! test crate using this module also declares `mod common;`.
#![allow(dead_code)]

pub mod daemon;
pub mod postgres;
