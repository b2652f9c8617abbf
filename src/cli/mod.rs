pub mod chat;
pub mod out;
pub mod sessions;
