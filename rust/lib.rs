//! The I/O-free core of awa, exposed to Python as the private module
//! `awa._core`. Nothing here opens a socket, touches an event loop or reads
//! the clock: callers pass `now` in, and get decisions and query
//! parameters back.

pub mod completion;
pub mod dispatch;
pub mod insert;
pub mod json;
pub mod payload;
pub mod pg_array;
pub mod rescue;
pub mod retry;
pub mod staging;
pub mod state;
pub mod unique;

#[cfg(feature = "python")]
mod python;
