//! Which encoder shapes the payload of each destination kind: every kind's own
//! `encode` lives in its folder (`deliver/kinds/<kind>/payload.rs`), built on the
//! helpers of `template::Fields` (the message alone, trimmed, or with the kind's
//! section), and is its [`Kind::ENCODE`](super::kind::Kind::ENCODE).

use crate::model::DestinationKind;
use crate::template::Encoder;

/// The encoder of `kind`, from the registry.
pub fn encoder(kind: DestinationKind) -> Encoder {
    super::kinds::encoder(kind)
}

#[cfg(test)]
mod tests;
