//! The files a page hands over (strings, bytes, Blobs/Files, Responses or URLs) as bytes and
//! text, with the field names of the JS objects in every message.

use super::errors::{js_error, js_message};
use js_sys::{Function, Promise, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = fetch)]
    fn fetch_url(url: &str) -> Promise;

    type FetchResponse;
    #[wasm_bindgen(method, getter)]
    fn ok(this: &FetchResponse) -> bool;
    #[wasm_bindgen(method, getter)]
    fn status(this: &FetchResponse) -> u16;
}

pub(super) fn optional_field(obj: &JsValue, name: &str) -> Result<Option<JsValue>, JsValue> {
    if !obj.is_object() {
        return Err(js_error(
            "WgemmaError",
            &format!("expected an object with `config` and `weights`, found {obj:?}"),
        ));
    }
    let v = Reflect::get(obj, &name.into())?;
    Ok((!v.is_undefined() && !v.is_null()).then_some(v))
}

pub(super) fn field(obj: &JsValue, name: &str) -> Result<JsValue, JsValue> {
    optional_field(obj, name)?.ok_or_else(|| js_error("WgemmaError", &format!("missing `{name}`")))
}

/// Every weight shard, named `weights[i]` in messages.
pub(super) async fn shards(files: &JsValue, urls: bool) -> Result<Vec<(String, Vec<u8>)>, JsValue> {
    let weights = field(files, "weights")?;
    let items: Vec<JsValue> = if js_sys::Array::is_array(&weights) {
        js_sys::Array::from(&weights).iter().collect()
    } else {
        vec![weights]
    };
    if items.is_empty() {
        return Err(js_error(
            "WgemmaError",
            "`weights`: expected at least one safetensors file",
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let name = match item.as_string().filter(|_| urls) {
            Some(url) => url,
            None => Reflect::get(item, &"name".into())
                .ok()
                .and_then(|n| n.as_string())
                .unwrap_or_else(|| format!("weights[{i}]")),
        };
        out.push((name, bytes(item, &format!("weights[{i}]"), urls).await?));
    }
    Ok(out)
}

pub(super) async fn text(value: &JsValue, what: &str, urls: bool) -> Result<String, JsValue> {
    if !urls {
        if let Some(s) = value.as_string() {
            return Ok(s);
        }
    }
    String::from_utf8(bytes(value, what, urls).await?)
        .map_err(|e| js_error("WgemmaError", &format!("{what}: expected UTF-8 text: {e}")))
}

/// The bytes of a [`FileSource`]: a URL (when `urls`), a string, a Uint8Array, an
/// ArrayBuffer, or anything with `arrayBuffer()` (Blob, File, Response).
pub(crate) async fn bytes(value: &JsValue, what: &str, urls: bool) -> Result<Vec<u8>, JsValue> {
    if urls {
        let url = value.as_string().ok_or_else(|| {
            js_error(
                "WgemmaError",
                &format!("{what}: expected a URL string, found {value:?}"),
            )
        })?;
        let response = JsFuture::from(fetch_url(&url)).await.map_err(|e| {
            js_error(
                "WgemmaError",
                &format!("fetching {url}: {}", js_message(&e)),
            )
        })?;
        let status = response.unchecked_ref::<FetchResponse>();
        if !status.ok() {
            return Err(js_error(
                "WgemmaError",
                &format!("fetching {url}: HTTP {}", status.status()),
            ));
        }
        return Box::pin(bytes(&response, &url, false)).await;
    }
    if let Some(s) = value.as_string() {
        return Ok(s.into_bytes());
    }
    if let Some(a) = value.dyn_ref::<Uint8Array>() {
        return Ok(a.to_vec());
    }
    if let Some(b) = value.dyn_ref::<js_sys::ArrayBuffer>() {
        return Ok(Uint8Array::new(b).to_vec());
    }
    let read = Reflect::get(value, &"arrayBuffer".into()).unwrap_or(JsValue::UNDEFINED);
    if let Some(read) = read.dyn_ref::<Function>() {
        let promise: Promise = read.call0(value)?.unchecked_into();
        let buffer = JsFuture::from(promise).await.map_err(|e| {
            js_error(
                "WgemmaError",
                &format!("reading {what}: {}", js_message(&e)),
            )
        })?;
        return Ok(Uint8Array::new(&buffer).to_vec());
    }
    Err(js_error(
        "WgemmaError",
        &format!(
            "{what}: expected a string, Uint8Array, ArrayBuffer, Blob/File or Response, found {}",
            value.js_typeof().as_string().unwrap_or_default()
        ),
    ))
}
