//! placeholder: written next
