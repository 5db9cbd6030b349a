//! The deterministic simulation, run over many seeds (the `sim` feature).
