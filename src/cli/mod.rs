pub mod chat;
pub mod lines;
pub mod sessions;
