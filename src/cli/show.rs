//! How a replay shows what it submits: for a person ([`ConsoleWriter`]) or as JSON
//! lines (`--record`, [`JsonLinesWriter`]).

use std::io::Write;

use crate::model::Notification;

/// Shows notifications for a person to read, as a replay submits them.
pub struct ConsoleWriter<W: Write> {
    out: W,
}

impl<W: Write> ConsoleWriter<W> {
    pub fn new(out: W) -> Self {
        ConsoleWriter { out }
    }

    pub fn show(&mut self, n: &Notification) -> std::io::Result<()> {
        // Plain data with string keys: serializing cannot fail.
        let payload = serde_json::to_string_pretty(&n.payload).unwrap_or_default();
        let action = if n.action == crate::model::Action::Resolve { " [resolve]" } else { "" };
        writeln!(self.out, "  -> {} ({}) {}: {}[{}] -> {}{action}", n.destination, n.kind, n.app, n.trigger, n.condition, n.template)?;
        for line in payload.lines() {
            writeln!(self.out, "     {line}")?;
        }
        Ok(())
    }

    /// A member joining or leaving a group: one line; the group's message is shown
    /// once, when it goes out.
    pub fn show_member(&mut self, n: &Notification, g: &crate::model::GroupRef) -> std::io::Result<()> {
        let labels: Vec<String> = g.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let (verb, when) = if g.joins {
            ("joins", "its message goes out when the group's wait ends")
        } else {
            ("leaves", "the group's message is updated at its next interval")
        };
        writeln!(self.out, "  -> {} {verb} the group of {} ({}) at {}: {when}", g.member, n.trigger, labels.join(", "), n.destination)
    }
}

/// Appends one JSON object per notification, as a replay submits them.
pub struct JsonLinesWriter<W: Write> {
    out: W,
    /// Added to every record as `step` (the replay file), when set.
    pub step: String,
}

impl<W: Write> JsonLinesWriter<W> {
    pub fn new(out: W) -> Self {
        JsonLinesWriter { out, step: String::new() }
    }

    pub fn show(&mut self, n: &Notification) -> std::io::Result<()> {
        let mut v = serde_json::to_value(n).unwrap_or_default();
        if let (Some(map), false) = (v.as_object_mut(), self.step.is_empty()) {
            map.insert("step".into(), self.step.clone().into());
        }
        writeln!(self.out, "{v}")?;
        self.out.flush()
    }
}
