//! `TraceRef`: the OpenTelemetry span an event opened, so a session's log and its trace can
//! be joined (a `turn/start` names its `invoke_agent` span, a `tool/call` its
//! `execute_tool` span). Written only by a session that exports telemetry; older logs have
//! none, and readers treat its absence as "not traced".

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A span's place in a trace: the W3C trace id (16 bytes) and span id (8 bytes), written
/// as lowercase hex (`{"trace_id":"4bf9…","span_id":"00f0…"}`), as trace viewers show them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TraceRef {
    /// The trace the span belongs to.
    #[serde(with = "hex")]
    pub trace_id: [u8; 16],
    /// The span itself.
    #[serde(with = "hex")]
    pub span_id: [u8; 8],
}

impl fmt::Display for TraceRef {
    /// The W3C `traceparent` form, sampled: `00-<trace id>-<span id>-01`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        write_hex(f, &self.trace_id)?;
        f.write_str("-")?;
        write_hex(f, &self.span_id)?;
        f.write_str("-01")
    }
}

impl TraceRef {
    /// Whether it can name a span: W3C forbids an all-zero trace id or span id.
    ///
    /// ```
    /// use toolrail_session_log::TraceRef;
    /// assert!(!TraceRef { trace_id: [0; 16], span_id: [1; 8] }.is_valid());
    /// assert!(TraceRef { trace_id: [1; 16], span_id: [1; 8] }.is_valid());
    /// ```
    pub fn is_valid(&self) -> bool {
        self.trace_id != [0; 16] && self.span_id != [0; 8]
    }

    /// Reads a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), as a caller sends it in
    /// an MCP request's `_meta`. `None` for anything else: another version's layout, upper
    /// case, an all-zero id, a version `ff` — a malformed parent is ignored, as the W3C
    /// recommendation asks, and the turn starts a trace of its own.
    ///
    /// ```
    /// use toolrail_session_log::TraceRef;
    /// let parent = TraceRef::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    /// assert_eq!(parent.map(|trace| trace.span_id[0]), Some(0x00));
    /// assert_eq!(TraceRef::from_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), None);
    /// ```
    pub fn from_traceparent(text: &str) -> Option<Self> {
        let mut parts = text.split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        // Version 00 has exactly four parts; a later version may add some after them.
        let lowercase = |part: &str| {
            part.bytes()
                .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
        };
        if version.len() != 2
            || !lowercase(version)
            || version == "ff"
            || (version == "00" && parts.next().is_some())
            || flags.len() != 2
            || !lowercase(flags)
            || !lowercase(trace)
            || !lowercase(span)
        {
            return None;
        }
        let trace_id = from_hex::<16, serde::de::value::Error>(trace).ok()?;
        let span_id = from_hex::<8, serde::de::value::Error>(span).ok()?;
        Some(Self { trace_id, span_id }).filter(Self::is_valid)
    }
}

fn write_hex(f: &mut impl fmt::Write, bytes: &[u8]) -> fmt::Result {
    f.write_str(hex_in(bytes, &mut [0; 32]))
}

/// `bytes` as lowercase hex, written into `buffer` (two digits a byte; what does not fit is
/// left out — ids are 8 and 16 bytes). Whole rather than a digit at a time: every traced
/// call writes 48 digits into the log, and a string written a character at a time went
/// through the JSON writer's escaping once per character (about 5,000 instructions a call,
/// `benches/otlp.rs` under callgrind), where a whole one is checked in one pass.
fn hex_in<'b, const N: usize>(bytes: &[u8], buffer: &'b mut [u8; N]) -> &'b str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut written = 0;
    for (pair, byte) in buffer.chunks_exact_mut(2).zip(bytes) {
        if let [high, low] = pair {
            *high = DIGITS[usize::from(byte >> 4)];
            *low = DIGITS[usize::from(byte & 0x0f)];
            written += 2;
        }
    }
    // Only ASCII digits were written.
    std::str::from_utf8(buffer.get(..written).unwrap_or_default()).unwrap_or_default()
}

fn from_hex<const N: usize, E: serde::de::Error>(text: &str) -> Result<[u8; N], E> {
    let wrong = || {
        E::custom(format_args!(
            "expected {} lowercase hex digits, got {text:?}",
            N * 2
        ))
    };
    if text.len() != N * 2 || !text.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Err(wrong());
    }
    let mut bytes = [0u8; N];
    for (byte, pair) in bytes.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).map_err(|_| wrong())?;
        *byte = u8::from_str_radix(pair, 16).map_err(|_| wrong())?;
    }
    Ok(bytes)
}

/// A byte array of any length as a hex string (serde's `with`: the length is the field's).
mod hex {
    use super::*;

    pub(super) fn serialize<const N: usize, S: Serializer>(
        bytes: &[u8; N],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(hex_in(bytes, &mut [0; 64]))
    }

    pub(super) fn deserialize<'de, const N: usize, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<[u8; N], D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        from_hex::<N, D::Error>(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_ref_is_written_as_hex_and_read_back() {
        let trace = TraceRef {
            trace_id: [0xab; 16],
            span_id: [1, 2, 3, 4, 5, 6, 7, 8],
        };
        let text = serde_json::to_string(&trace).unwrap_or_default();
        assert_eq!(
            text,
            r#"{"trace_id":"abababababababababababababababab","span_id":"0102030405060708"}"#
        );
        assert_eq!(serde_json::from_str::<TraceRef>(&text).ok(), Some(trace));
        assert_eq!(
            trace.to_string(),
            "00-abababababababababababababababab-0102030405060708-01"
        );
        assert!(serde_json::from_str::<TraceRef>(r#"{"trace_id":"ab","span_id":"01"}"#).is_err());
    }

    #[test]
    fn a_traceparent_is_read_back_from_what_it_writes_and_a_malformed_one_is_none() {
        let trace = TraceRef {
            trace_id: [0x4b; 16],
            span_id: [0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7],
        };
        assert_eq!(TraceRef::from_traceparent(&trace.to_string()), Some(trace));
        let later = format!(
            "cc-{}-{}-01-what-comes-next",
            "4b".repeat(16),
            "00f067aa0ba902b7"
        );
        assert_eq!(TraceRef::from_traceparent(&later), Some(trace));
        for malformed in [
            "",
            "00",
            "00-4b4b-00f067aa0ba902b7-01",
            &format!("00-{}-00f067aa0ba902b7-01-extra", "4b".repeat(16)),
            &format!("ff-{}-00f067aa0ba902b7-01", "4b".repeat(16)),
            &format!("00-{}-00F067AA0BA902B7-01", "4b".repeat(16)),
            &format!("00-{}-0000000000000000-01", "4b".repeat(16)),
            &format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32)),
            &format!("00-{}-00f067aa0ba902b7-1", "4b".repeat(16)),
            &format!("00-{}-00f067aa0ba902bg-01", "4b".repeat(16)),
        ] {
            assert_eq!(TraceRef::from_traceparent(malformed), None, "{malformed}");
        }
    }
}
