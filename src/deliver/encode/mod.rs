//! The payload of every destination kind, tested through its encoder: each kind's
//! `encode` lives in its folder (`deliver/kinds/<kind>/payload.rs`), built on the
//! helpers of `template::Fields` (the message alone, trimmed, or with the kind's
//! section); it is the kind's [`Kind::ENCODE`](super::kind::Kind::ENCODE), looked up by
//! [`kinds::encoder`](super::kinds::encoder).

#[cfg(test)]
mod tests;
