//! The items of an `EventList`, cut out of the body as it arrives (review N6): a batch
//! is never refused for its size. Each event is held whole up to a bound; past it, its
//! `requestObject` and `responseObject` are left out (replaced by [`ELIDED`]), so who did
//! what to which object is still read; an event still over the bound without them is
//! skipped. Memory is one event, not the batch.
//!
//! This is a JSON scanner, not a parser: it follows strings, escapes and nesting to
//! find where each item and each of its top-level members begins and ends, and checks
//! the structure around the items; each item is decoded by `serde_json` afterwards.

use crate::audit::event::ELIDED;

/// Nesting deeper than this is refused (`serde_json` refuses past 128 anyway).
const MAX_DEPTH: usize = 256;

/// The members of an event left out when it is over the bound: the object bodies, the
/// only parts of an audit event that grow with what the client wrote.
const BODIES: [&[u8]; 2] = [b"requestObject", b"responseObject"];

/// Keys longer than this are never one the scanner looks for.
const MAX_KEY: usize = 16;

/// A body that is not an `EventList`.
#[derive(Debug, thiserror::Error)]
#[error("not an audit.k8s.io/v1 EventList: {0}")]
pub struct NotAList(&'static str);

/// One event cut out of the list.
#[derive(Debug)]
pub struct Cut {
    pub bytes: Vec<u8>,
    /// Its object bodies were left out.
    pub elided: bool,
}

/// What a container is, for the scanner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The list itself.
    Root,
    /// `items`.
    Items,
    /// An event (an object directly in `items`).
    Item,
    Other,
}

/// What may come next in a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Just opened: a key (object) or a value (array), or the end.
    First,
    /// After a comma.
    Next,
    /// After an object's key.
    Colon,
    /// After a colon.
    Value,
    /// After a value.
    CommaOrEnd,
}

#[derive(Debug)]
struct Frame {
    object: bool,
    role: Role,
    expect: Expect,
    /// The current member's key (objects; cut at [`MAX_KEY`]).
    key: Vec<u8>,
}

/// The event being cut.
#[derive(Debug, Default)]
struct Item {
    buf: Vec<u8>,
    /// Object bodies complete in `buf` (start, end).
    bodies: Vec<(usize, usize)>,
    /// Where the object body being read starts in `buf`.
    open_body: Option<usize>,
    /// The open body was left out: its bytes are not kept.
    skipping: bool,
    elided: bool,
    /// Over the bound even without its bodies: nothing kept.
    dropped: bool,
}

impl Item {
    fn push(&mut self, b: u8, max: usize) {
        if self.dropped || self.skipping {
            return;
        }
        self.buf.push(b);
        if self.buf.len() > max {
            self.shrink(max);
        }
    }

    /// Leaves out the bodies read so far and the one being read; drops the event if
    /// it is still over `max`.
    fn shrink(&mut self, max: usize) {
        // The open body is the last thing in `buf`: cut it first, then the complete ones
        // before it from the back, so each range still points at its bytes.
        if let Some(start) = self.open_body
            && !self.skipping
        {
            self.buf.truncate(start);
            self.buf.extend_from_slice(ELIDED.as_bytes());
            self.skipping = true;
            self.elided = true;
        }
        for (start, end) in self.bodies.drain(..).rev() {
            self.buf.splice(start..end, ELIDED.bytes());
            self.elided = true;
        }
        if self.buf.len() > max {
            self.dropped = true;
            self.buf = Vec::new();
        }
    }
}

/// The scanner: fed the body chunk by chunk, it hands back each complete event.
#[derive(Debug)]
pub struct Items {
    max_item: usize,
    frames: Vec<Frame>,
    /// Inside a string: (it is a key, the previous byte was a backslash).
    string: Option<(bool, bool)>,
    /// Inside a number, `true`, `false` or `null`.
    scalar: bool,
    root_done: bool,
    items_seen: bool,
    item: Option<Item>,
    /// Events skipped whole: over the bound without their bodies.
    pub over_limit: u64,
}

impl Items {
    /// A scanner keeping events of at most `max_item` bytes whole.
    pub fn new(max_item: usize) -> Items {
        Items { max_item, frames: Vec::new(), string: None, scalar: false, root_done: false, items_seen: false, item: None, over_limit: 0 }
    }

    /// Reads `chunk`, adding each event it completes to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<Cut>) -> Result<(), NotAList> {
        for &b in chunk {
            self.byte(b, out)?;
        }
        Ok(())
    }

    /// The body ended: whether it was a whole list with `items`.
    pub fn finish(&self) -> Result<(), NotAList> {
        match (self.root_done, self.items_seen) {
            (false, _) => Err(NotAList("the body ended before the list did")),
            (true, false) => Err(NotAList("no items")),
            (true, true) => Ok(()),
        }
    }

    fn push(&mut self, b: u8) {
        if let Some(item) = self.item.as_mut() {
            item.push(b, self.max_item);
        }
    }

    fn byte(&mut self, b: u8, out: &mut Vec<Cut>) -> Result<(), NotAList> {
        if let Some((key, escaped)) = self.string {
            self.push(b);
            if escaped {
                self.string = Some((key, false));
            } else if b == b'\\' {
                self.string = Some((key, true));
            } else if b == b'"' {
                self.string = None;
                if !key {
                    self.value_ended(out);
                } else if let Some(f) = self.frames.last_mut() {
                    f.expect = Expect::Colon;
                }
            } else if key && let Some(f) = self.frames.last_mut() {
                // Cut at MAX_KEY + 1, so a longer key never equals one looked for.
                if f.key.len() <= MAX_KEY {
                    f.key.push(b);
                }
            }
            return Ok(());
        }
        if self.scalar {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.') {
                self.push(b);
                return Ok(());
            }
            self.scalar = false;
            self.value_ended(out);
        }
        if b.is_ascii_whitespace() {
            self.push(b);
            return Ok(());
        }
        if self.root_done {
            return Err(NotAList("more after the list"));
        }
        let Some(top) = self.frames.last_mut() else {
            return if b == b'{' { self.open(b, true, Role::Root) } else { Err(NotAList("the body is not a JSON object")) };
        };
        match (top.object, top.expect, b) {
            (true, Expect::First | Expect::Next, b'"') => {
                top.key.clear();
                self.string = Some((true, false));
                self.push(b);
            }
            (true, Expect::Colon, b':') => {
                top.expect = Expect::Value;
                self.push(b);
            }
            (_, Expect::CommaOrEnd, b',') => {
                top.expect = Expect::Next;
                self.push(b);
            }
            (true, Expect::First | Expect::CommaOrEnd, b'}') | (false, Expect::First | Expect::CommaOrEnd, b']') => {
                self.push(b);
                self.frames.pop();
                self.value_ended(out);
            }
            (true, Expect::Value, _) | (false, Expect::First | Expect::Next, _) => self.value(b)?,
            _ => return Err(NotAList("not JSON")),
        }
        Ok(())
    }

    /// A value begins with `b` in the top container.
    fn value(&mut self, b: u8) -> Result<(), NotAList> {
        let (role, key) = match self.frames.last() {
            Some(f) => (f.role, f.key.as_slice()),
            None => return Err(NotAList("not JSON")),
        };
        let child = match role {
            Role::Root if key == b"items" => {
                if self.items_seen || b != b'[' {
                    return Err(NotAList("items is not one list"));
                }
                self.items_seen = true;
                Role::Items
            }
            Role::Items => {
                self.item = Some(Item::default());
                if b == b'{' { Role::Item } else { Role::Other }
            }
            Role::Item => {
                if BODIES.contains(&key)
                    && let Some(item) = self.item.as_mut()
                {
                    item.open_body = Some(item.buf.len());
                }
                Role::Other
            }
            _ => Role::Other,
        };
        match b {
            b'{' => self.open(b, true, child),
            b'[' => self.open(b, false, child),
            b'"' => {
                self.push(b);
                self.string = Some((false, false));
                Ok(())
            }
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                self.push(b);
                self.scalar = true;
                Ok(())
            }
            _ => Err(NotAList("not JSON")),
        }
    }

    fn open(&mut self, b: u8, object: bool, role: Role) -> Result<(), NotAList> {
        if self.frames.len() >= MAX_DEPTH {
            return Err(NotAList("nested too deep"));
        }
        self.push(b);
        self.frames.push(Frame { object, role, expect: Expect::First, key: Vec::new() });
        Ok(())
    }

    /// A value of the top container (or the list itself) ended.
    fn value_ended(&mut self, out: &mut Vec<Cut>) {
        let Some(top) = self.frames.last_mut() else {
            self.root_done = true;
            return;
        };
        top.expect = Expect::CommaOrEnd;
        match top.role {
            Role::Items => {
                if let Some(item) = self.item.take() {
                    if item.dropped {
                        self.over_limit += 1;
                    } else {
                        out.push(Cut { bytes: item.buf, elided: item.elided });
                    }
                }
            }
            Role::Item => {
                if let Some(item) = self.item.as_mut()
                    && let Some(start) = item.open_body.take()
                {
                    if item.skipping {
                        item.skipping = false;
                    } else if !item.dropped {
                        item.bodies.push((start, item.buf.len()));
                    }
                }
            }
            Role::Root | Role::Other => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(body: &[u8], max: usize, chunk: usize) -> Result<(Vec<(String, bool)>, u64), NotAList> {
        let mut s = Items::new(max);
        let mut out = Vec::new();
        for c in body.chunks(chunk.max(1)) {
            s.feed(c, &mut out)?;
        }
        s.finish()?;
        Ok((out.into_iter().map(|c| (String::from_utf8(c.bytes).unwrap(), c.elided)).collect(), s.over_limit))
    }

    #[test]
    fn items_are_cut_whatever_the_chunks() {
        let body = br#"{"kind":"EventList","metadata":{"a":[1,{"items":2}]},"items":[{"auditID":"a\"}","n":-1.5e3,"t":true},
            {"requestObject":{"x":"]}"},"b":null} , 7, "s", [1]],"apiVersion":"audit.k8s.io/v1"}"#;
        for chunk in [1, 2, 7, 1000] {
            let (items, over) = cut(body, 1000, chunk).unwrap();
            let texts: Vec<&str> = items.iter().map(|(t, _)| t.as_str()).collect();
            assert_eq!(
                texts,
                [r#"{"auditID":"a\"}","n":-1.5e3,"t":true}"#, r#"{"requestObject":{"x":"]}"},"b":null}"#, "7", r#""s""#, "[1]"],
                "chunk {chunk}"
            );
            assert_eq!(over, 0);
        }
    }

    /// Past the bound, an event's object bodies are left out (the rest of it read), and
    /// an event still too large without them is skipped; the events around are whole.
    #[test]
    fn an_event_over_the_bound_loses_its_bodies_not_the_batch() {
        let pad = "\\u0001".repeat(200);
        let body = format!(
            r#"{{"items":[{{"auditID":"small","verb":"patch"}},{{"auditID":"big","requestObject":{{"data":{{"x":"{pad}"}}}},"verb":"create","responseObject":"{pad}","stage":"ResponseComplete"}},{{"auditID":"huge","annotations":{{"x":"{pad}"}}}},{{"auditID":"after"}}]}}"#
        );
        for chunk in [1, 13, 100_000] {
            let (items, over) = cut(body.as_bytes(), 400, chunk).unwrap();
            let parsed: Vec<serde_json::Value> = items.iter().map(|(t, _)| serde_json::from_str(t).unwrap()).collect();
            let ids: Vec<&str> = parsed.iter().map(|v| v["auditID"].as_str().unwrap()).collect();
            assert_eq!(ids, ["small", "big", "after"], "chunk {chunk}");
            assert_eq!(items.iter().map(|(_, e)| *e).collect::<Vec<_>>(), [false, true, false]);
            let big = &parsed[1];
            let marker = serde_json::Value::from(ELIDED.trim_matches('"'));
            assert_eq!((&big["requestObject"], &big["responseObject"]), (&marker, &marker));
            assert_eq!((big["verb"].as_str(), big["stage"].as_str()), (Some("create"), Some("ResponseComplete")));
            assert_eq!(over, 1, "the event too large without its bodies");
        }
    }

    #[test]
    fn what_is_not_a_list_is_refused() {
        for bad in [
            &b"[]"[..],
            b"{\"items\": [",
            b"{}",
            b"{\"items\": 3}",
            b"{\"items\": [], \"items\": []}",
            b"{\"items\": []} x",
            b"  ",
            b"{\"a\" 1}",
        ] {
            assert!(cut(bad, 100, 3).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let nested = |n: usize| format!("{{\"items\":[{}{}]}}", "[".repeat(n), "]".repeat(n));
        assert!(cut(nested(300).as_bytes(), 100_000, 3).is_err(), "nested too deep");
        assert_eq!(cut(nested(100).as_bytes(), 100_000, 3).unwrap().0.len(), 1);
        assert_eq!(cut(b" {\"items\": []} \n", 100, 1).unwrap().0.len(), 0);
    }
}
