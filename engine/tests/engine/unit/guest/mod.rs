//! The unit tests of `engine::guest`'s modules.

mod block_status;
mod discard;
