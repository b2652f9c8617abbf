pub mod atif;
pub mod chat;
pub mod exec;
pub mod out;
pub mod relay;
pub mod sessions;
