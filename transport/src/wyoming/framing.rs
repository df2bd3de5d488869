//! Wyoming's framing: each event is one JSON header line
//! (`{"type", "data"?, "data_length"?, "payload_length"?, "version"?}`
//! and `\n`), then `data_length` bytes of JSON (an object merged into
//! `data`), then `payload_length` bytes of binary payload.
//!
//! [`Reader`] reads it incrementally with hard bounds: a header line over
//! [`MAX_HEADER_BYTES`], a `data_length` over [`MAX_DATA_BYTES`] or a
//! `payload_length` over [`MAX_PAYLOAD_BYTES`] (or a length that is not a
//! non-negative integer) cannot be read past, and ends the connection; a
//! malformed header or data (not JSON, not an object, no `type`) is
//! consumed and refused, the stream going on. Nothing is buffered beyond
//! one event's bounded size and one read.

use serde_json::{Map, Value};

use crate::protocol::ErrorCode;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Longest header line (without its `\n`).
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Largest `data_length` (the native protocol's text message limit).
pub const MAX_DATA_BYTES: usize = crate::protocol::MAX_TEXT_MESSAGE_BYTES;
/// Largest `payload_length` (a TTS client sends none; audio events of
/// other Wyoming services are read and dropped within this).
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;
/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 8 * 1024;

/// The Wyoming version written in every event's header (the `wyoming`
/// package's version this implementation was checked against).
pub const VERSION: &str = "1.10.2";

/// One event.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub ty: String,
    pub data: Map<String, Value>,
    pub payload: Vec<u8>,
}

/// Why [`Reader::next`] returned no event.
#[derive(Debug, PartialEq)]
pub enum ReadError {
    /// The event was malformed and has been consumed; the stream goes on.
    Bad(String),
    /// The stream cannot be read past this point: answer, then close.
    Fatal(ErrorCode, String),
    /// The peer closed (or the socket failed), maybe mid-event.
    Closed,
}

/// A header whose data and payload are still to come.
struct Head {
    ty: String,
    data: Map<String, Value>,
    data_len: usize,
    payload_len: usize,
    /// The header was readable but wrong: refused once its bytes are in.
    problem: Option<String>,
}

/// Reads events from `R`; cancel-safe (what has arrived is kept in the
/// reader between calls).
pub struct Reader<R> {
    r: R,
    buf: Vec<u8>,
    head: Option<Head>,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub fn new(r: R) -> Self {
        Reader {
            r,
            buf: Vec::new(),
            head: None,
        }
    }

    /// The stream itself (to drain it at the close).
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.r
    }

    /// The next event. Cancel-safe.
    pub async fn next(&mut self) -> Result<Event, ReadError> {
        loop {
            if let Some(e) = self.parse()? {
                return Ok(e);
            }
            let mut chunk = [0u8; READ_CHUNK];
            match self.r.read(&mut chunk).await {
                Ok(0) | Err(_) => return Err(ReadError::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// An event from what has arrived, if it is all there.
    fn parse(&mut self) -> Result<Option<Event>, ReadError> {
        if self.head.is_none() {
            loop {
                let window = &self.buf[..self.buf.len().min(MAX_HEADER_BYTES + 1)];
                let Some(i) = window.iter().position(|&b| b == b'\n') else {
                    if self.buf.len() > MAX_HEADER_BYTES {
                        return Err(ReadError::Fatal(
                            ErrorCode::MessageTooLarge,
                            format!("event header line over {MAX_HEADER_BYTES} bytes (no newline)"),
                        ));
                    }
                    return Ok(None);
                };
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                let line = &line[..i];
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue; // blank lines between events are tolerated
                }
                self.head = Some(head(line)?);
                break;
            }
        }
        let Some(h) = &self.head else {
            return Ok(None);
        };
        if self.buf.len() < h.data_len + h.payload_len {
            return Ok(None);
        }
        let Some(mut h) = self.head.take() else {
            return Ok(None);
        };
        let data: Vec<u8> = self.buf.drain(..h.data_len).collect();
        let payload: Vec<u8> = self.buf.drain(..h.payload_len).collect();
        if let Some(p) = h.problem {
            return Err(ReadError::Bad(p));
        }
        if !data.is_empty() {
            match serde_json::from_slice::<Value>(&data) {
                Ok(Value::Object(extra)) => h.data.extend(extra),
                Ok(_) => {
                    return Err(ReadError::Bad(format!(
                        "the data of event {:?} is not a JSON object",
                        h.ty
                    )))
                }
                Err(e) => {
                    return Err(ReadError::Bad(format!(
                        "the data of event {:?} is not JSON: {e}",
                        h.ty
                    )))
                }
            }
        }
        Ok(Some(Event {
            ty: h.ty,
            data: h.data,
            payload,
        }))
    }
}

/// A header line: its lengths must be readable (else the stream is lost);
/// anything else wrong is the event's problem, refused once consumed.
fn head(line: &[u8]) -> Result<Head, ReadError> {
    let v: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Err(ReadError::Bad(format!("event header is not JSON: {e}"))),
    };
    let Value::Object(mut o) = v else {
        return Err(ReadError::Bad(
            "event header is not a JSON object with a \"type\"".into(),
        ));
    };
    let len = |o: &Map<String, Value>, key: &str, max: usize| -> Result<usize, ReadError> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(0),
            Some(v) => match v.as_u64() {
                Some(n) if n <= max as u64 => Ok(n as usize),
                Some(n) => Err(ReadError::Fatal(
                    ErrorCode::MessageTooLarge,
                    format!("{key} {n} is over the limit of {max} bytes"),
                )),
                None => Err(ReadError::Fatal(
                    ErrorCode::InvalidMessage,
                    format!("{key} must be a non-negative integer, got {v}"),
                )),
            },
        }
    };
    let data_len = len(&o, "data_length", MAX_DATA_BYTES)?;
    let payload_len = len(&o, "payload_length", MAX_PAYLOAD_BYTES)?;
    let mut problem = None;
    let ty = match o.remove("type") {
        Some(Value::String(t)) if !t.is_empty() => t,
        _ => {
            problem = Some("event header has no \"type\" string".to_string());
            String::new()
        }
    };
    let data = match o.remove("data") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(d)) => d,
        Some(_) => {
            problem.get_or_insert_with(|| format!("the data of event {ty:?} is not a JSON object"));
            Map::new()
        }
    };
    Ok(Head {
        ty,
        data,
        data_len,
        payload_len,
        problem,
    })
}

/// One event's bytes: the header line (with `data_length` when there is
/// data, `payload_length` when there is a payload), the data, the payload.
pub fn encode(ty: &str, data: Option<&Value>, payload: &[u8]) -> Vec<u8> {
    let data = data
        .filter(|d| d.as_object().is_some_and(|o| !o.is_empty()))
        .map(|d| d.to_string().into_bytes());
    let mut h = serde_json::json!({"type": ty, "version": VERSION});
    if let Some(d) = &data {
        h["data_length"] = d.len().into();
    }
    if !payload.is_empty() {
        h["payload_length"] = payload.len().into();
    }
    let mut out = h.to_string().into_bytes();
    out.push(b'\n');
    if let Some(d) = data {
        out.extend_from_slice(&d);
    }
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn read_all(bytes: &[u8]) -> Vec<Result<Event, ReadError>> {
        let mut r = Reader::new(bytes);
        let mut out = Vec::new();
        loop {
            let e = r.next().await;
            let done = e == Err(ReadError::Closed) || matches!(e, Err(ReadError::Fatal(..)));
            out.push(e);
            if done {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn events_round_trip_with_data_and_payload() {
        let mut bytes = encode("audio-chunk", Some(&json!({"rate": 24000})), b"\x01\x02");
        bytes.extend(encode("describe", None, b""));
        // Inline data and data_length merge.
        bytes.extend(
            b"{\"type\":\"synthesize\",\"data\":{\"a\":1},\"data_length\":10}\n{\"text\":1}",
        );
        let ev = read_all(&bytes).await;
        let e0 = ev[0].as_ref().unwrap();
        assert_eq!(e0.ty, "audio-chunk");
        assert_eq!(e0.data["rate"], 24000);
        assert_eq!(e0.payload, b"\x01\x02");
        assert_eq!(ev[1].as_ref().unwrap().ty, "describe");
        let e2 = ev[2].as_ref().unwrap();
        assert_eq!(
            (e2.data["a"].clone(), e2.data["text"].clone()),
            (json!(1), json!(1))
        );
        assert_eq!(ev[3], Err(ReadError::Closed));
    }

    #[tokio::test]
    async fn malformed_events_are_refused_and_the_stream_goes_on() {
        let mut bytes = b"not json\n[1]\n{\"data\":{}}\n".to_vec();
        bytes.extend(b"{\"type\":\"x\",\"data_length\":3}\nabc");
        bytes.extend(encode("describe", None, b""));
        let ev = read_all(&bytes).await;
        assert!(matches!(&ev[0], Err(ReadError::Bad(m)) if m.contains("not JSON")));
        assert!(matches!(&ev[1], Err(ReadError::Bad(_))));
        assert!(matches!(&ev[2], Err(ReadError::Bad(m)) if m.contains("type")));
        assert!(matches!(&ev[3], Err(ReadError::Bad(m)) if m.contains("data")));
        assert_eq!(ev[4].as_ref().unwrap().ty, "describe");
    }

    #[tokio::test]
    async fn over_the_bounds_is_fatal_without_buffering_it() {
        let long = vec![b'a'; MAX_HEADER_BYTES + 10];
        assert!(
            matches!(&read_all(&long).await[0], Err(ReadError::Fatal(_, m)) if m.contains("header"))
        );
        let big = format!("{{\"type\":\"x\",\"payload_length\":{}}}\n", u64::MAX);
        assert!(
            matches!(&read_all(big.as_bytes()).await[0], Err(ReadError::Fatal(_, m)) if m.contains("payload_length"))
        );
        let big = format!(
            "{{\"type\":\"x\",\"data_length\":{}}}\n",
            MAX_DATA_BYTES + 1
        );
        assert!(
            matches!(&read_all(big.as_bytes()).await[0], Err(ReadError::Fatal(_, m)) if m.contains("data_length"))
        );
        let neg = b"{\"type\":\"x\",\"data_length\":-1}\n";
        assert!(matches!(&read_all(neg).await[0], Err(ReadError::Fatal(..))));
    }
}
