pub mod chat;
pub mod sessions;
