//! The message for a rendered e-mail payload: a pure function.

use lettre::message::{Mailbox, MultiPart, SinglePart};
use serde_json::Value;

use crate::deliver::outcome::Unsendable;
use crate::model::Notification;

/// A recipient may list several addresses separated by `,`.
pub fn recipients(recipient: &str) -> Result<Vec<Mailbox>, Unsendable> {
    let list: Vec<&str> = recipient.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if list.is_empty() {
        return Err(Unsendable("no e-mail address in the recipient".into()));
    }
    list.into_iter().map(|a| a.parse::<Mailbox>().map_err(|e| Unsendable(format!("invalid address {a:?}: {e}")))).collect()
}

/// Subject, a text part, and an HTML alternative when the template has one.
pub fn message(from: &str, n: &Notification) -> Result<lettre::Message, Unsendable> {
    let s = |k: &str| n.payload.get(k).and_then(Value::as_str).map(str::to_string);
    let from: Mailbox = from.parse().map_err(|e| Unsendable(format!("invalid from address {from:?}: {e}")))?;
    let mut b = lettre::Message::builder().from(from).subject(s("subject").unwrap_or_default());
    for to in recipients(&n.destination.recipient)? {
        b = b.to(to);
    }
    let text = s("body").unwrap_or_default();
    let built = match s("html") {
        Some(html) => b.multipart(MultiPart::alternative().singlepart(SinglePart::plain(text)).singlepart(SinglePart::html(html))),
        None => b.singlepart(SinglePart::plain(text)),
    };
    built.map_err(|e| Unsendable(format!("building the message: {e}")))
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    let mut out = serde_json::Map::new();
    let subject = match f.text("email.subject")? {
        Some(s) => s,
        None => f.message.lines().next().unwrap_or_default().to_string(),
    };
    out.insert("subject".into(), subject.trim().into());
    out.insert("body".into(), f.text("email.body")?.unwrap_or_else(|| f.message.clone()).into());
    if let Some(h) = f.text("email.html")? {
        out.insert("html".into(), h.into());
    }
    Ok(out)
}
