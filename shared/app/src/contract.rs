//! The store contract suite: one set of behaviours every [`crate::Store`] implementation must
//! show. Adapters call [`run_all`] from their own tests with a factory of fresh stores.
//! (Filled in by the store work; see the module's tests in `tests/`.)
