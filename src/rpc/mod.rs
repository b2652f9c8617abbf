//! The wire: line framing in, ordered frames out, and the JSON-RPC frame shapes.

pub mod call_log;
pub mod frame;
pub mod line_reader;
pub mod out_queue;

pub use call_log::CallLog;
pub use frame::{Request, RpcError};
pub use line_reader::{Line, LineReader};
pub use out_queue::OutQueue;
