//! The JS API (wasm-bindgen): `Session.create()` on `navigator.gpu`, loading a checkpoint
//! (config + safetensors + tokenizer), a model artifact or an assistant from bytes,
//! Blobs/Files, Responses or URLs, streaming generation, abort and
//! stats. Every method that does GPU or network work returns a Promise; errors are `Error`
//! objects whose `name` says what kind they are (`WebGpuUnavailable`, `WgemmaBusy`,
//! `WgemmaError`).
//!
//! The engine is lent to one operation at a time ([`EngineLease`]): wasm-bindgen objects are
//! borrowed per call, so a long-running generation must not hold a borrow of the `Session`
//! (that would make `abort()` throw), and two operations must not interleave on one model.

mod context;
mod errors;
mod files;
mod typescript;

pub(crate) use context::open_context;
pub(crate) use errors::{js_error, js_message, wgemma_error};
pub(crate) use files::bytes;
use files::{field, optional_field, shards, text};

use js_sys::{Function, Promise};
use serde::de::DeserializeOwned;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;
use wgemma::session::{
    ArtifactOptions, CheckpointFiles, DemoOptions, DeviceInfo, GenerateRequest, LoadOptions,
    ModelInfo, Session as Engine, TokenEvent,
};

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = console, js_name = error)]
    fn console_error(message: &str);
}

/// Panics reach the console with their message (the wasm module is dead after one).
#[wasm_bindgen(start)]
pub fn start() {
    std::panic::set_hook(Box::new(|info| {
        console_error(&format!("wgemma panicked: {info}"))
    }));
}

fn busy_error() -> JsValue {
    js_error(
        "WgemmaBusy",
        "this session is busy with another load or generation: await it (or abort() it) first",
    )
}

/// A plain JS options object into a Rust struct (unknown fields are an error: a typo
/// should not be silently ignored). `undefined`/`null` give the defaults.
pub(crate) fn parse_options<T: DeserializeOwned + Default>(
    value: &JsValue,
    what: &str,
) -> Result<T, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(T::default());
    }
    let json = js_sys::JSON::stringify(value)
        .map_err(|e| js_error("WgemmaError", &format!("{what}: {}", js_message(&e))))?;
    serde_json::from_str(&String::from(json))
        .map_err(|e| js_error("WgemmaError", &format!("{what}: {e}")))
}

pub(crate) fn to_js<T: serde::Serialize>(value: &T) -> Result<JsValue, JsValue> {
    let json = serde_json::to_string(value).map_err(wgemma_error)?;
    js_sys::JSON::parse(&json)
}

struct Shared {
    engine: RefCell<Option<Engine>>,
    abort: Cell<bool>,
    device: DeviceInfo,
    model: RefCell<Option<ModelInfo>>,
}

/// The engine, taken out of the session for one operation and put back when dropped (also
/// on errors).
struct EngineLease {
    shared: Rc<Shared>,
    engine: Option<Engine>,
}

impl EngineLease {
    fn take(shared: &Rc<Shared>) -> Result<EngineLease, JsValue> {
        let engine = shared.engine.borrow_mut().take().ok_or_else(busy_error)?;
        Ok(EngineLease {
            shared: shared.clone(),
            engine: Some(engine),
        })
    }

    fn get(&mut self) -> &mut Engine {
        self.engine
            .as_mut()
            .expect("the lease holds the engine until dropped")
    }
}

impl Drop for EngineLease {
    fn drop(&mut self) {
        *self.shared.engine.borrow_mut() = self.engine.take();
    }
}

/// A WebGPU device with at most one model (and one assistant) loaded on it.
#[wasm_bindgen]
pub struct Session {
    shared: Rc<Shared>,
}

#[wasm_bindgen]
impl Session {
    /// Opens WebGPU. Rejects with an `Error` named `WebGpuUnavailable` when the browser has
    /// no `navigator.gpu` or offers no adapter.
    pub async fn create() -> Result<Session, JsValue> {
        let engine = Engine::with_context(open_context().await?);
        let device = engine.device_info();
        Ok(Session {
            shared: Rc::new(Shared {
                engine: RefCell::new(Some(engine)),
                abort: Cell::new(false),
                device,
                model: RefCell::new(None),
            }),
        })
    }

    /// The adapter and the limits wgemma plans its kernels and tensor splits with.
    #[wasm_bindgen(unchecked_return_type = "DeviceInfo")]
    pub fn info(&self) -> Result<JsValue, JsValue> {
        to_js(&self.shared.device)
    }

    /// The loaded model, or null.
    #[wasm_bindgen(js_name = modelInfo, unchecked_return_type = "ModelInfo | null")]
    pub fn model_info(&self) -> Result<JsValue, JsValue> {
        match &*self.shared.model.borrow() {
            Some(info) => to_js(info),
            None => Ok(JsValue::NULL),
        }
    }

    /// True while a load or generation runs.
    #[wasm_bindgen(getter)]
    pub fn busy(&self) -> bool {
        self.shared.engine.borrow().is_none()
    }

    /// Stops the running generation after its current step; its Promise resolves with what
    /// was generated (`stoppedEarly: true`).
    pub fn abort(&self) {
        self.shared.abort.set(true);
    }

    /// Loads a Hugging Face checkpoint from bytes, Blobs/Files or Responses.
    #[wasm_bindgen(js_name = loadModel, unchecked_return_type = "Promise<ModelInfo>")]
    pub fn load_model(
        &self,
        #[wasm_bindgen(unchecked_param_type = "ModelFiles")] files: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "LoadOptions")] options: JsValue,
    ) -> Promise {
        self.load_checkpoint(files, options, false)
    }

    /// Loads a Hugging Face checkpoint from URLs.
    #[wasm_bindgen(js_name = loadModelFromUrls, unchecked_return_type = "Promise<ModelInfo>")]
    pub fn load_model_from_urls(
        &self,
        #[wasm_bindgen(unchecked_param_type = "ModelUrls")] urls: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "LoadOptions")] options: JsValue,
    ) -> Promise {
        self.load_checkpoint(urls, options, true)
    }

    /// Loads a model artifact (`wgemma convert`: one file, weights in GPU layout, with its
    /// assistant when converted with one) from bytes, a Blob/File or a Response.
    #[wasm_bindgen(js_name = loadArtifact, unchecked_return_type = "Promise<ModelInfo>")]
    pub fn load_artifact(
        &self,
        #[wasm_bindgen(unchecked_param_type = "FileSource")] file: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "ArtifactOptions")] options: JsValue,
    ) -> Promise {
        self.load_artifact_file(file, options, false)
    }

    /// Loads a llama.cpp GGUF file (Gemma 4, `gemma4`) from bytes, a Blob/File or a Response:
    /// config and tokenizer come from its metadata.
    #[wasm_bindgen(js_name = loadGguf, unchecked_return_type = "Promise<ModelInfo>")]
    pub fn load_gguf(
        &self,
        #[wasm_bindgen(unchecked_param_type = "FileSource")] file: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "LoadOptions")] options: JsValue,
    ) -> Promise {
        self.load_gguf_file(file, options, false)
    }

    /// Loads a llama.cpp GGUF file from a URL.
    #[wasm_bindgen(js_name = loadGgufFromUrl, unchecked_return_type = "Promise<ModelInfo>")]
    pub fn load_gguf_from_url(
        &self,
        url: String,
        #[wasm_bindgen(unchecked_optional_param_type = "LoadOptions")] options: JsValue,
    ) -> Promise {
        self.load_gguf_file(url.into(), options, true)
    }

    /// Loads a model artifact from a URL.
    #[wasm_bindgen(js_name = loadArtifactFromUrl, unchecked_return_type = "Promise<ModelInfo>")]
    pub fn load_artifact_from_url(
        &self,
        url: String,
        #[wasm_bindgen(unchecked_optional_param_type = "ArtifactOptions")] options: JsValue,
    ) -> Promise {
        self.load_artifact_file(url.into(), options, true)
    }

    /// Loads the built-in demo: a small synthetic Gemma 4 with random weights (no tokenizer:
    /// prompts are token ids) and its MTP assistant; nothing is downloaded.
    #[wasm_bindgen(js_name = loadDemo, unchecked_return_type = "Promise<ModelInfo>")]
    pub fn load_demo(
        &self,
        #[wasm_bindgen(unchecked_optional_param_type = "DemoOptions")] options: JsValue,
    ) -> Promise {
        let shared = self.shared.clone();
        future_to_promise(async move {
            let options: DemoOptions = parse_options(&options, "loadDemo options")?;
            let mut lease = EngineLease::take(&shared)?;
            *shared.model.borrow_mut() = None;
            let info = lease.get().load_demo(&options).map_err(wgemma_error)?;
            *shared.model.borrow_mut() = Some(info.clone());
            to_js(&info)
        })
    }

    /// Loads a `gemma4_assistant` checkpoint for the loaded model.
    #[wasm_bindgen(js_name = loadAssistant, unchecked_return_type = "Promise<ModelInfo>")]
    pub fn load_assistant(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AssistantFiles")] files: JsValue,
    ) -> Promise {
        self.load_assistant_files(files, false)
    }

    /// Loads a llama.cpp `gemma4-assistant` GGUF file for the loaded model (from bytes, a
    /// Blob/File or a Response; its weights take the target's dtype).
    #[wasm_bindgen(js_name = loadAssistantGguf, unchecked_return_type = "Promise<ModelInfo>")]
    pub fn load_assistant_gguf(
        &self,
        #[wasm_bindgen(unchecked_param_type = "FileSource")] file: JsValue,
    ) -> Promise {
        self.load_assistant_gguf_file(file, false)
    }

    /// Loads a `gemma4-assistant` GGUF file from a URL.
    #[wasm_bindgen(
        js_name = loadAssistantGgufFromUrl,
        unchecked_return_type = "Promise<ModelInfo>"
    )]
    pub fn load_assistant_gguf_from_url(&self, url: String) -> Promise {
        self.load_assistant_gguf_file(url.into(), true)
    }

    #[wasm_bindgen(
        js_name = loadAssistantFromUrls,
        unchecked_return_type = "Promise<ModelInfo>"
    )]
    pub fn load_assistant_from_urls(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AssistantUrls")] urls: JsValue,
    ) -> Promise {
        self.load_assistant_files(urls, true)
    }

    /// Generates; `onToken` is called with each committed token ([`TokenEvent`]) and may
    /// return `false` to stop. Greedy output is the native build's, token for token.
    #[wasm_bindgen(unchecked_return_type = "Promise<GenerateResult>")]
    pub fn generate(
        &self,
        #[wasm_bindgen(unchecked_param_type = "GenerateRequest")] request: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "(token: TokenEvent) => boolean | void")]
        on_token: Option<Function>,
    ) -> Promise {
        let shared = self.shared.clone();
        future_to_promise(async move {
            let request: GenerateRequest = parse_options(&request, "generate request")?;
            let mut lease = EngineLease::take(&shared)?;
            shared.abort.set(false);
            // A throwing callback stops the generation and rejects with its error.
            let mut callback_error = None;
            let mut on_event = |event: &TokenEvent| {
                if shared.abort.get() {
                    return false;
                }
                let Some(f) = &on_token else { return true };
                let value = match to_js(event) {
                    Ok(v) => v,
                    Err(e) => {
                        callback_error = Some(e);
                        return false;
                    }
                };
                match f.call1(&JsValue::NULL, &value) {
                    // abort() called from inside the callback stops right here.
                    Ok(ret) => ret != JsValue::FALSE && !shared.abort.get(),
                    Err(e) => {
                        callback_error = Some(e);
                        false
                    }
                }
            };
            let result = lease.get().generate(&request, &mut on_event).await;
            if let Some(e) = callback_error {
                return Err(e);
            }
            to_js(&result.map_err(wgemma_error)?)
        })
    }
}

impl Session {
    fn load_checkpoint(&self, files: JsValue, options: JsValue, urls: bool) -> Promise {
        let shared = self.shared.clone();
        future_to_promise(async move {
            let options: LoadOptions = parse_options(&options, "load options")?;
            if shared.engine.borrow().is_none() {
                // Refuse before fetching: the files may be large.
                return Err(busy_error());
            }
            let files = CheckpointFiles {
                config_json: text(&field(&files, "config")?, "config", urls).await?,
                shards: shards(&files, urls).await?,
                tokenizer_json: match optional_field(&files, "tokenizer")? {
                    Some(v) => Some(bytes(&v, "tokenizer", urls).await?),
                    None => None,
                },
                generation_config_json: match optional_field(&files, "generationConfig")? {
                    Some(v) => Some(text(&v, "generationConfig", urls).await?),
                    None => None,
                },
                tokenizer_config_json: match optional_field(&files, "tokenizerConfig")? {
                    Some(v) => Some(text(&v, "tokenizerConfig", urls).await?),
                    None => None,
                },
                chat_template: match optional_field(&files, "chatTemplate")? {
                    Some(v) => Some(text(&v, "chatTemplate", urls).await?),
                    None => None,
                },
            };
            let mut lease = EngineLease::take(&shared)?;
            *shared.model.borrow_mut() = None;
            let info = lease
                .get()
                .load_checkpoint(&files, &options)
                .map_err(wgemma_error)?;
            *shared.model.borrow_mut() = Some(info.clone());
            to_js(&info)
        })
    }

    fn load_gguf_file(&self, file: JsValue, options: JsValue, urls: bool) -> Promise {
        let shared = self.shared.clone();
        future_to_promise(async move {
            let options: LoadOptions = parse_options(&options, "load options")?;
            if shared.engine.borrow().is_none() {
                return Err(busy_error());
            }
            let bytes = bytes(&file, "GGUF file", urls).await?;
            let mut lease = EngineLease::take(&shared)?;
            *shared.model.borrow_mut() = None;
            let info = lease
                .get()
                .load_gguf(&bytes, &options)
                .map_err(wgemma_error)?;
            *shared.model.borrow_mut() = Some(info.clone());
            to_js(&info)
        })
    }

    fn load_artifact_file(&self, file: JsValue, options: JsValue, urls: bool) -> Promise {
        let shared = self.shared.clone();
        future_to_promise(async move {
            let options: ArtifactOptions = parse_options(&options, "artifact options")?;
            if shared.engine.borrow().is_none() {
                return Err(busy_error());
            }
            let bytes = bytes(&file, "artifact", urls).await?;
            let mut lease = EngineLease::take(&shared)?;
            *shared.model.borrow_mut() = None;
            let info = lease
                .get()
                .load_artifact(&bytes, &options)
                .map_err(wgemma_error)?;
            *shared.model.borrow_mut() = Some(info.clone());
            to_js(&info)
        })
    }

    fn load_assistant_gguf_file(&self, file: JsValue, urls: bool) -> Promise {
        let shared = self.shared.clone();
        future_to_promise(async move {
            let bytes = bytes(&file, "assistant GGUF file", urls).await?;
            let mut lease = EngineLease::take(&shared)?;
            let engine = lease.get();
            engine.load_assistant_gguf(&bytes).map_err(wgemma_error)?;
            let info = engine.model_info().map_err(wgemma_error)?;
            *shared.model.borrow_mut() = Some(info.clone());
            to_js(&info)
        })
    }

    fn load_assistant_files(&self, files: JsValue, urls: bool) -> Promise {
        let shared = self.shared.clone();
        future_to_promise(async move {
            let config = text(&field(&files, "config")?, "config", urls).await?;
            let shards = shards(&files, urls).await?;
            let mut lease = EngineLease::take(&shared)?;
            let engine = lease.get();
            engine
                .load_assistant(&config, &shards)
                .map_err(wgemma_error)?;
            let info = engine.model_info().map_err(wgemma_error)?;
            *shared.model.borrow_mut() = Some(info.clone());
            to_js(&info)
        })
    }
}
