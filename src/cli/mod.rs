pub mod chat;
pub mod lines;
pub mod out;
pub mod sessions;
