//! How a scenario ends: the outcome types that the harness, the out-of-band channel between
//! ranks (`pmi`) and every scenario return.

/// Why a scenario did not pass.
#[derive(Debug)]
pub enum TestErr {
    /// The provider did something wrong (or timed out).
    Fail(String),
    /// The provider does not offer what the scenario needs (libfabric code, explanation).
    Nos(i32, String),
    /// Another rank gave up first; its reason is the one that counts.
    Aborted(String),
}

pub type TResult<T = ()> = Result<T, TestErr>;
