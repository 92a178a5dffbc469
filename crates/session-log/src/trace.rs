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

fn write_hex(f: &mut impl fmt::Write, bytes: &[u8]) -> fmt::Result {
    // Digit by digit rather than `{:02x}`: every traced call writes 48 of them into the
    // log, and the formatting machinery cost a call about half a microsecond.
    let digit = |nibble: u8| char::from_digit(u32::from(nibble), 16).unwrap_or('0');
    bytes.iter().try_for_each(|byte| {
        f.write_char(digit(byte >> 4))?;
        f.write_char(digit(byte & 0x0f))
    })
}

/// Bytes written as lowercase hex wherever a formatter goes, with no string of their own.
struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, self.0)
    }
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
        serializer.collect_str(&Hex(bytes))
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
}
