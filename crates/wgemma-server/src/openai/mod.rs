//! OpenAI's protocol, free of the transport: request bodies checked field by field
//! ([`request`], [`fields`]), the answers' JSON ([`response`]), tool calls ([`tools`]) and
//! structured output's grammars ([`structured`]).

pub mod fields;
pub mod request;
pub mod response;
pub mod structured;
pub mod tools;
