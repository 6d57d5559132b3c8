//! What the request being answered may do ([`Role`]), set by the guard for each request so
//! that pages can hide the actions the read token cannot take.

use super::AppState;

/// What a request's token lets it do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Read and act (the token, or no token configured on loopback).
    Act,
    /// Read only (the read token).
    Read,
}

tokio::task_local! {
    /// The role of the request being answered (set by the guard around each page).
    pub(super) static ROLE: Role;
}

/// Whether the request being answered may act: not `--read-only`, and not the read token.
pub fn can_act(st: &AppState) -> bool {
    !st.read_only && ROLE.try_with(|r| *r == Role::Act).unwrap_or(true)
}
