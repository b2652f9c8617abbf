//! The wire: line framing in, ordered frames out, the JSON-RPC frame shapes, and the client
//! connection behind the [`Outbox`] the rest of the gateway speaks through.

pub mod call_log;
pub mod client_conn;
pub mod clients;
pub mod frame;
pub mod line_reader;
pub mod listener;
pub mod out_queue;
pub mod outbox;
pub(crate) mod refused;

pub use call_log::CallLog;
pub use frame::{Request, RpcError};
pub use line_reader::{Line, LineReader};
pub use out_queue::OutQueue;
pub use outbox::Outbox;
