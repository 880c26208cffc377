//! One connection's authentication state: the user it authenticated as (at most one, as on
//! MongoDB 6.0+), and the SASL conversation in progress.
//!
//! Must not: outlive its connection, or be read for authorization without the current users and
//! roles (a user dropped since it authenticated has no privileges: `check` asks the cache).

use shoal_auth::scram::server::ServerConversation;
use shoal_proto::catalog::UserName;

/// A SASL conversation between `saslStart` and its last `saslContinue`.
#[derive(Debug)]
pub struct Conversation {
    pub id: i32,
    /// The database the user is defined on (`saslStart`'s `$db`).
    pub db: String,
    pub scram: ServerConversation,
    /// The client asked to finish with the server signature (`options.skipEmptyExchange`)
    /// instead of one more, empty, `saslContinue`.
    pub skip_empty_exchange: bool,
    /// The proof was accepted and the server signature sent; an empty `saslContinue` finishes.
    pub verified: bool,
}

#[derive(Debug, Default)]
pub struct Session {
    user: Option<UserName>,
    conversation: Option<Conversation>,
    last_conversation_id: i32,
}

impl Session {
    pub fn user(&self) -> Option<&UserName> {
        self.user.as_ref()
    }

    pub fn set_user(&mut self, user: UserName) {
        self.user = Some(user);
    }

    /// `logout`: forgets the user and any conversation.
    pub fn logout(&mut self) {
        self.user = None;
        self.conversation = None;
    }

    /// Starts a conversation (replacing an unfinished one, as MongoDB does); answers its id.
    pub fn begin(&mut self, db: String, scram: ServerConversation, skip_empty_exchange: bool) -> i32 {
        self.last_conversation_id = self.last_conversation_id.wrapping_add(1).max(1);
        let id = self.last_conversation_id;
        self.conversation = Some(Conversation { id, db, scram, skip_empty_exchange, verified: false });
        id
    }

    pub fn conversation(&mut self) -> Option<&mut Conversation> {
        self.conversation.as_mut()
    }

    /// Ends the conversation in progress and answers it.
    pub fn end_conversation(&mut self) -> Option<Conversation> {
        self.conversation.take()
    }
}
