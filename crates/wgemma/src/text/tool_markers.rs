//! The markers of Gemma 4's tool syntax ([`super::tools`] renders and parses it). Their own
//! file, below both the tokenizer (which keeps the ones that are tokens when decoding a
//! reply) and the tools module (which uses the tokenizer's JSON helpers).

pub const TOOL_START: &str = "<|tool>";
pub const TOOL_END: &str = "<tool|>";
pub const TOOL_CALL_START: &str = "<|tool_call>";
pub const TOOL_CALL_END: &str = "<tool_call|>";
pub const TOOL_RESPONSE_START: &str = "<|tool_response>";
pub const TOOL_RESPONSE_END: &str = "<tool_response|>";
/// Opens and closes a string value.
pub const STRING_MARK: &str = "<|\"|>";

/// Names that the call syntax carries unquoted.
pub(crate) fn is_bare_key(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}
