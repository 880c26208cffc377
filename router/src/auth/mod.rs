//! Who a client is and what it may do (docs/security.md): authentication conversations, each
//! connection's session, the router's copy of users and roles, and the authorization check every
//! command passes before it runs. The decisions themselves (SCRAM, privileges, roles) are the
//! `shoal-auth` crate's; this module does the I/O around them.
//!
//! ```text
//!  driver ─ hello{speculativeAuthenticate} / saslStart / saslContinue ─► sasl ─► Session.user
//!  any command ─► dispatch ─► check::authorize(Spec::access, session, cache) ─► handler
//!  config service ─ watch (security version) ─► cache::follow ─► SecurityCache (users, roles)
//!  getMore / killCursors ─► cursors: a cursor belongs to the user who opened it
//! ```
//!
//! Must not: store or log a password, or decide from a connection's memory what only the current
//! users and roles can say.

pub mod cache;
pub mod check;
pub mod cursors;
pub mod pipeline;
pub mod sasl;
pub mod session;
pub mod x509;
