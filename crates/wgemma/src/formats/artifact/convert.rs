//! Converting Hugging Face checkpoints or llama.cpp GGUF files (target, and optionally its
//! assistant) into one artifact, streamed: matrices are read, prepared and written a block of rows at a time
//! (Q4 quantises each row on its own, so a block's words are the whole matrix's words for
//! those rows), so memory stays at one block however large the checkpoint.

use super::census::{assistant_census, target_census, CensusRoute};
use super::manifest::{
    Manifest, ModelEntry, Quant, SourceFile, ASSISTANT_PREFIX, FORMAT_NAME, FORMAT_VERSION,
    MANIFEST_KEY, TARGET_PREFIX, TOKENIZER_TENSOR,
};
use super::plan::{
    assistant_plan, ggml_suffix, target_plan_with, PlannedWeight, Prep, StoredTensor, Q4_PACKED,
    Q4_SCALES,
};
use super::writer::{TensorWriter, CHECKSUM_PLACEHOLDER};
use crate::error::{Error, Result};
use crate::formats::gguf::model::gguf_name;
use crate::formats::gguf::{GgufAssistant, GgufFile, GgufWeights};
use crate::formats::hf::Checkpoint;
use crate::model::assistant::parse_assistant_config;
use crate::model::weights::WeightFormat;
use crate::model::{parse_config, ModelSpec};
use crate::ops::ggml_linear::is_native;
use crate::text::tokenizer::Tokenizer;
use crate::weights::ggml::GgmlType;
use crate::weights::layout::{Matrix, MatrixData, MatrixLayout};
use crate::weights::raw::RawDtype;
use crate::weights::source::WeightSource;
use safetensors::Dtype;
use std::collections::BTreeMap;
use std::io::{Seek, Write};
use std::ops::Range;

const OP: &str = "convert";

/// Elements of f32 a converter holds at once (one block of rows): 32 MiB.
const BLOCK_ELEMENTS: usize = 8 << 20;

/// Where a conversion reads its weights: a Hugging Face checkpoint, or a llama.cpp GGUF
/// file (its blocks prepared as [`crate::formats::gguf::GgufWeights`] loads them: Q4_0 into Q4 group
/// 32 as it is, every other type dequantised first).
#[derive(Clone, Copy)]
pub enum ConvertWeights<'a> {
    Checkpoint(&'a Checkpoint<'a>),
    Gguf(&'a GgufFile<'a>),
    /// A GGUF file whose matrices of the ggml types wgemma runs natively are stored as they
    /// are (`<name>.ggml_<type>`, U8 `[N, row bytes]`), as its load with no `--dtype` runs
    /// them; the other tensors in the format's layout.
    GgufNative(&'a GgufFile<'a>),
}

impl<'a> From<&'a Checkpoint<'a>> for ConvertWeights<'a> {
    fn from(ck: &'a Checkpoint<'a>) -> Self {
        ConvertWeights::Checkpoint(ck)
    }
}

/// One model to convert, as bytes (the CLI maps the files).
pub struct ConvertInput<'a> {
    /// config.json (for a GGUF file: what [`crate::formats::gguf::config_json`] makes of it).
    pub config_json: &'a str,
    pub weights: ConvertWeights<'a>,
    pub generation_config: Option<serde_json::Value>,
    pub tokenizer_json: Option<&'a [u8]>,
    /// Hashes of the files read (see [`SourceFile::hash`]).
    pub sources: Vec<SourceFile>,
}

/// Where a model's tensors are read: the same [`WeightSource`] a load reads (an HF
/// assistant's checkpoint names its tensors in full by itself).
enum Source<'a> {
    Checkpoint(&'a Checkpoint<'a>),
    Gguf(GgufWeights<'a, 'a>),
    GgufAssistant(GgufAssistant<'a, 'a>),
}

impl Source<'_> {
    fn get(&self) -> &dyn WeightSource {
        match self {
            Source::Checkpoint(ck) => *ck,
            Source::Gguf(g) => g,
            Source::GgufAssistant(g) => g,
        }
    }
}

struct Model<'a> {
    prefix: &'static str,
    input: &'a ConvertInput<'a>,
    plan: Vec<PlannedWeight>,
    source: Source<'a>,
}

impl Model<'_> {
    /// Rows `rows` of the stored tensor `name` of `shape`, as f32.
    fn read_rows(&self, name: &str, shape: &[usize], rows: Range<usize>) -> Result<Vec<f32>> {
        self.source.get().tensor(name, shape)?.rows_f32(rows)
    }

    /// Rows `rows` of one part prepared in `layout` as a load prepares them (a GGUF
    /// file's Q4_0 blocks into Q4 group 32 unchanged), so an artifact holds the weights a
    /// load of its source would.
    fn read_block(
        &self,
        name: &str,
        shape: &[usize],
        rows: Range<usize>,
        layout: MatrixLayout,
    ) -> Result<Matrix<'static>> {
        self.source
            .get()
            .tensor(name, shape)?
            .prepared_rows(rows, layout)
    }
}

/// The target's source (tensors by their names without `model.`).
fn target_model<'a>(
    input: &'a ConvertInput<'a>,
    spec: &crate::model::ModelSpec,
    format: WeightFormat,
) -> Model<'a> {
    let (source, native) = match input.weights {
        ConvertWeights::Checkpoint(ck) => (Source::Checkpoint(ck), None),
        ConvertWeights::Gguf(file) => (Source::Gguf(GgufWeights::new(file)), None),
        ConvertWeights::GgufNative(file) => (Source::Gguf(GgufWeights::new(file)), Some(file)),
    };
    // The parts' common ggml type, when the file stores them in one that runs natively.
    let stored_type = |_: &str, parts: &[String]| {
        let file = native?;
        let types: Vec<GgmlType> = parts
            .iter()
            .map(|p| gguf_name(p).and_then(|g| file.tensor(&g)).map(|t| t.ty))
            .collect::<Option<_>>()?;
        let ty = *types.first()?;
        (is_native(ty) && types.iter().all(|&t| t == ty)).then_some(ty)
    };
    Model {
        prefix: TARGET_PREFIX,
        input,
        plan: target_plan_with(spec, format, &|n| source.get().has(n), &stored_type),
        source,
    }
}

/// The assistant's source (tensors by their full names).
fn assistant_model<'a>(
    input: &'a ConvertInput<'a>,
    aspec: &crate::model::assistant::AssistantSpec,
    format: WeightFormat,
) -> Model<'a> {
    let source = match input.weights {
        ConvertWeights::Checkpoint(ck) => Source::Checkpoint(ck),
        ConvertWeights::Gguf(file) | ConvertWeights::GgufNative(file) => {
            Source::GgufAssistant(GgufAssistant { file })
        }
    };
    Model {
        prefix: ASSISTANT_PREFIX,
        input,
        plan: assistant_plan(aspec, format, &|n| source.get().has(n)),
        source,
    }
}

/// Writes the artifact of `target` (and `assistant`) in `format` to `sink`; `progress`
/// gets (bytes written, bytes total). On error the sink holds a partial file whose header
/// carries placeholder checksums: the caller must discard it (the CLI writes to a
/// temporary file and renames it only after this returns).
pub fn convert<W: Write + Seek>(
    sink: W,
    target: &ConvertInput<'_>,
    assistant: Option<&ConvertInput<'_>>,
    format: WeightFormat,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<W> {
    if let WeightFormat::Q4 { group } = format {
        if ![32, 64, 128].contains(&group) {
            return Err(Error::invalid(OP, "Q4 group size", "32, 64 or 128", group));
        }
    }
    let spec = parse_config(target.config_json)?;
    check_tokenizers(target, assistant)?;
    let (models, census) = planned_models(target, assistant, &spec, format)?;
    let order = write_order(&models);
    let mut tensors: Vec<StoredTensor> = order
        .iter()
        .flat_map(|&(m, i)| models[m].plan[i].stored(models[m].prefix))
        .collect();
    for model in &models {
        if let Some(t) = model.input.tokenizer_json {
            tensors.push(StoredTensor {
                name: format!("{}{TOKENIZER_TENSOR}", model.prefix),
                dtype: Dtype::U8,
                shape: vec![t.len()],
            });
        }
    }
    let total: u64 = tensors.iter().map(|t| t.byte_len() as u64).sum();

    let entry = |input: &ConvertInput<'_>| -> Result<ModelEntry> {
        Ok(ModelEntry {
            config: serde_json::from_str(input.config_json)
                .map_err(|e| Error::invalid(OP, "config.json", "a JSON object", e.to_string()))?,
            generation_config: input.generation_config.clone(),
            tokenizer: input.tokenizer_json.is_some(),
        })
    };
    let mut manifest = Manifest {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        producer: format!("wgemma {}", env!("CARGO_PKG_VERSION")),
        quant: Quant::of(format),
        target: entry(target)?,
        assistant: assistant.map(entry).transpose()?,
        checksums: tensors
            .iter()
            .map(|t| (t.name.clone(), CHECKSUM_PLACEHOLDER.to_string()))
            .collect(),
        sources: models
            .iter()
            .flat_map(|m| m.input.sources.iter().cloned())
            .collect(),
        census,
    };
    let metadata = |m: &Manifest| {
        BTreeMap::from([(
            MANIFEST_KEY.to_string(),
            serde_json::to_string(m).expect("the manifest serialises"),
        )])
    };
    let mut w = TensorWriter::begin(sink, tensors, &metadata(&manifest))?;
    let mut done = 0u64;
    for &(m, i) in &order {
        let model = &models[m];
        write_weight(&mut w, model, &model.plan[i], &mut |bytes| {
            done += bytes;
            progress(done, total);
        })?;
    }
    for model in &models {
        if let Some(t) = model.input.tokenizer_json {
            w.write(&format!("{}{TOKENIZER_TENSOR}", model.prefix), t)?;
        }
    }
    progress(total, total);
    w.finish(|sums| {
        manifest.checksums = sums.clone();
        metadata(&manifest)
    })
}

/// Checks the tokenizers before anything is written: a tokenizer stored unchecked would
/// fail every later load of the artifact.
fn check_tokenizers(target: &ConvertInput<'_>, assistant: Option<&ConvertInput<'_>>) -> Result<()> {
    for (which, input) in [("target", Some(target)), ("assistant", assistant)] {
        if let Some(json) = input.and_then(|i| i.tokenizer_json) {
            Tokenizer::from_bytes(json).map_err(|e| {
                Error::invalid(
                    OP,
                    format!("the {which}'s tokenizer.json"),
                    "a readable tokenizer",
                    e,
                )
            })?;
        }
    }
    Ok(())
}

/// The target's weight plan, and the assistant's when given (checked to fit the target),
/// with the census of routes their weights take.
fn planned_models<'a>(
    target: &'a ConvertInput<'a>,
    assistant: Option<&'a ConvertInput<'a>>,
    spec: &ModelSpec,
    format: WeightFormat,
) -> Result<(Vec<Model<'a>>, Vec<CensusRoute>)> {
    let mut models = vec![target_model(target, spec, format)];
    let mut census = target_census(&models[0].plan);
    if let Some(a) = assistant {
        let aspec = parse_assistant_config(a.config_json)?;
        let c = &spec.config;
        if aspec.backbone_hidden_size != c.hidden_size
            || aspec.text.config.vocab_size != c.vocab_size
        {
            return Err(Error::invalid(
                OP,
                "assistant backbone_hidden_size / vocab_size (must be the target's)",
                format!("{} / {}", c.hidden_size, c.vocab_size),
                format!(
                    "{} / {}",
                    aspec.backbone_hidden_size, aspec.text.config.vocab_size
                ),
            ));
        }
        let model = assistant_model(a, &aspec, format);
        census.extend(assistant_census(&aspec, &model.plan));
        models.push(model);
    }
    Ok((models, census))
}

/// `(model, weight)` in the order the file stores them: weights whose tensors are not whole
/// words go last, so every other tensor starts on a 4-byte boundary (a u32 view of the
/// mapped file needs no copy); the tokenizers follow them.
fn write_order(models: &[Model<'_>]) -> Vec<(usize, usize)> {
    let whole_words =
        |w: &PlannedWeight, prefix: &str| w.stored(prefix).iter().all(|t| t.byte_len() % 4 == 0);
    let mut order = Vec::new();
    for pass in [true, false] {
        for (m, model) in models.iter().enumerate() {
            for (i, w) in model.plan.iter().enumerate() {
                if whole_words(w, model.prefix) == pass {
                    order.push((m, i));
                }
            }
        }
    }
    order
}

/// Prepares one planned weight and writes its tensor(s).
fn write_weight<W: Write + Seek>(
    w: &mut TensorWriter<W>,
    model: &Model<'_>,
    weight: &PlannedWeight,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    let name = format!("{}{}", model.prefix, weight.name);
    match &weight.prep {
        Prep::F32 { shape } => {
            let rows = shape[..shape.len() - 1].iter().product();
            let v = model.read_rows(&weight.parts[0].0, shape, 0..rows)?;
            w.write(&name, bytemuck::cast_slice(&v))?;
            progress(v.len() as u64 * 4);
        }
        Prep::U32 { len } => {
            let part = &weight.parts[0].0;
            let v = model
                .source
                .get()
                .tensor(part, &[*len])?
                .to_i64()?
                .into_iter()
                .enumerate()
                .map(|(i, v)| {
                    u32::try_from(v)
                        .map_err(|_| Error::invalid(OP, format!("`{part}`[{i}]"), "0..2^32", v))
                })
                .collect::<Result<Vec<u32>>>()?;
            w.write(&name, bytemuck::cast_slice(&v))?;
            progress(v.len() as u64 * 4);
        }
        Prep::Ggml { ty, .. } => write_ggml(w, model, weight, *ty, &name, progress)?,
        Prep::Matrix { n, k, layout, .. } => {
            let (n, k) = (*n, *k);
            // Multiples of 64 rows: even, so a block's scale words never straddle blocks.
            let block = (BLOCK_ELEMENTS / k.max(1) / 64 * 64).max(64);
            let mut scales: Vec<u32> = Vec::new();
            let mut start = 0;
            while start < n {
                let end = (start + block).min(n);
                let m = match stacked_blocks(model, weight, start..end, k, *layout)? {
                    Some(m) => m,
                    None => {
                        let rows = read_stacked(model, weight, start..end, k)?;
                        Matrix::prepare(rows, end - start, k, *layout)?
                    }
                };
                match &m.data {
                    MatrixData::F32(v) => w.write(&name, bytemuck::cast_slice(v))?,
                    MatrixData::F16(v) => w.write(&name, bytemuck::cast_slice(v))?,
                    MatrixData::Q4 {
                        packed, scales: s, ..
                    } => {
                        w.write(&format!("{name}{Q4_PACKED}"), bytemuck::cast_slice(packed))?;
                        scales.extend_from_slice(s);
                    }
                }
                progress(match &m.data {
                    MatrixData::F32(v) => v.len() as u64 * 4,
                    MatrixData::F16(v) => v.len() as u64 * 2,
                    MatrixData::Q4 { packed, .. } => packed.len() as u64 * 4,
                });
                start = end;
            }
            if !scales.is_empty() {
                w.write(&format!("{name}{Q4_SCALES}"), bytemuck::cast_slice(&scales))?;
                progress(scales.len() as u64 * 4);
            }
        }
    }
    Ok(())
}

/// Writes a matrix stored in ggml blocks: its parts' bytes as the source stores them, a
/// block at a time.
fn write_ggml<W: Write + Seek>(
    w: &mut TensorWriter<W>,
    model: &Model<'_>,
    weight: &PlannedWeight,
    ty: GgmlType,
    name: &str,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    let name = format!("{name}{}", ggml_suffix(ty));
    for (part, shape) in &weight.parts {
        let raw = model.source.get().tensor(part, shape)?;
        if raw.dtype != RawDtype::Ggml(ty) {
            return Err(Error::invalid(
                OP,
                format!("type of `{part}` (planned as {ty:?} blocks)"),
                format!("{ty:?}"),
                format!("{:?}", raw.dtype),
            ));
        }
        for piece in raw.stored_bytes()?.chunks(4 * BLOCK_ELEMENTS) {
            w.write(&name, piece)?;
            progress(piece.len() as u64);
        }
    }
    Ok(())
}

/// Rows `rows` of the matrix stacked from the weight's parts (equal row blocks).
fn read_stacked(
    model: &Model<'_>,
    weight: &PlannedWeight,
    rows: std::ops::Range<usize>,
    k: usize,
) -> Result<Vec<f32>> {
    let mut out = Vec::with_capacity(rows.len() * k);
    let mut first = 0;
    for (part, shape) in &weight.parts {
        let part_rows = shape.iter().product::<usize>() / k.max(1);
        let (lo, hi) = (rows.start.max(first), rows.end.min(first + part_rows));
        if lo < hi {
            out.extend(model.read_rows(part, shape, lo - first..hi - first)?);
        }
        first += part_rows;
    }
    Ok(out)
}

/// Rows `rows` of the stacked matrix from the source's own blocks ([`Model::read_block`]),
/// or `None` where the source has none or the parts' Q4 scale words would not join whole
/// (an odd number of scales in a part: tiny test shapes only).
fn stacked_blocks(
    model: &Model<'_>,
    weight: &PlannedWeight,
    rows: std::ops::Range<usize>,
    k: usize,
    layout: MatrixLayout,
) -> Result<Option<Matrix<'static>>> {
    let mut pieces = Vec::new();
    let mut first = 0;
    for (part, shape) in &weight.parts {
        let part_rows = shape.iter().product::<usize>() / k.max(1);
        let (lo, hi) = (rows.start.max(first), rows.end.min(first + part_rows));
        if lo < hi {
            if let MatrixLayout::Q4 { group } = layout {
                if weight.parts.len() > 1 && ((hi - lo) * (k / group)) % 2 == 1 {
                    return Ok(None);
                }
            }
            pieces.push(model.read_block(part, shape, lo - first..hi - first, layout)?);
        }
        first += part_rows;
    }
    let mut joined: Option<MatrixData<'static>> = None;
    for piece in pieces {
        joined = Some(match (joined, piece.data) {
            (None, data) => data,
            (Some(MatrixData::F32(mut a)), MatrixData::F32(b)) => {
                a.to_mut().extend_from_slice(&b);
                MatrixData::F32(a)
            }
            (Some(MatrixData::F16(mut a)), MatrixData::F16(b)) => {
                a.to_mut().extend_from_slice(&b);
                MatrixData::F16(a)
            }
            (
                Some(MatrixData::Q4 {
                    group,
                    mut packed,
                    mut scales,
                }),
                MatrixData::Q4 {
                    packed: p,
                    scales: s,
                    ..
                },
            ) => {
                packed.to_mut().extend_from_slice(&p);
                scales.to_mut().extend_from_slice(&s);
                MatrixData::Q4 {
                    group,
                    packed,
                    scales,
                }
            }
            _ => {
                return Err(Error::invalid(
                    OP,
                    format!("layouts of the parts of `{}`", weight.name),
                    "one layout",
                    "several",
                ))
            }
        });
    }
    let Some(data) = joined else {
        return Ok(None);
    };
    Ok(Some(Matrix {
        n: rows.len(),
        k,
        data,
    }))
}
