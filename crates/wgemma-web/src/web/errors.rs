//! JS `Error`s whose `name` says what kind they are, and the message of a thrown JS value.

use wasm_bindgen::prelude::*;

/// An `Error` whose `name` is `name`.
pub(crate) fn js_error(name: &str, message: &str) -> JsValue {
    let e = js_sys::Error::new(message);
    e.set_name(name);
    e.into()
}

pub(crate) fn wgemma_error(e: impl std::fmt::Display) -> JsValue {
    js_error("WgemmaError", &e.to_string())
}

/// A JS error message, or the value's string form.
pub(crate) fn js_message(v: &JsValue) -> String {
    v.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| v.as_string())
        .unwrap_or_else(|| format!("{v:?}"))
}
