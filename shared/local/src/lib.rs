//! Local mode adapters (to be written).
