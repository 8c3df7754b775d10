//! OpenAI's protocol, free of the transport: request bodies checked field by field
//! ([`body`], [`request`], [`sampling`], [`fields`]), the answers' JSON ([`response`]), tool calls ([`tools`]
//! in the request, [`tool_messages`] in the history, [`tool_reply`] out, streamed:
//! [`tool_stream`]), structured output's format ([`response_format`]), grammars
//! ([`structured`]) and the checks on its schemas ([`schema`]), and the Responses API as chat completions
//! ([`responses_request`] in, [`responses`] out).

pub mod body;
pub mod fields;
pub mod request;
pub mod response;
pub mod response_format;
pub mod responses;
pub mod responses_request;
pub mod sampling;
pub mod schema;
pub mod structured;
pub mod tool_messages;
pub mod tool_reply;
pub mod tool_stream;
pub mod tools;
