//! The in-process event sink and loop (being written).
