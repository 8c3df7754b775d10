//! Converting Hugging Face checkpoints (target, and optionally its assistant) into one
//! artifact, streamed: matrices are read, prepared and written a block of rows at a time
//! (Q4 quantises each row on its own, so a block's words are the whole matrix's words for
//! those rows), so memory stays at one block however large the checkpoint.

use super::census::{assistant_census, target_census};
use super::manifest::{
    Manifest, ModelEntry, Quant, SourceFile, ASSISTANT_PREFIX, FORMAT_NAME, FORMAT_VERSION,
    MANIFEST_KEY, TARGET_PREFIX, TOKENIZER_TENSOR,
};
use super::plan::{
    assistant_plan, target_plan, PlannedWeight, Prep, StoredTensor, Q4_PACKED, Q4_SCALES,
};
use super::writer::{TensorWriter, CHECKSUM_PLACEHOLDER};
use crate::error::{Error, Result};
use crate::model::assistant::parse_assistant_config;
use crate::model::checkpoint::Checkpoint;
use crate::model::parse_config;
use crate::model::prepared::{Matrix, MatrixData};
use crate::model::tokenizer::Tokenizer;
use crate::model::weights::WeightFormat;
use safetensors::Dtype;
use std::collections::BTreeMap;
use std::io::{Seek, Write};

const OP: &str = "convert";

/// Elements of f32 a converter holds at once (one block of rows): 32 MiB.
const BLOCK_ELEMENTS: usize = 8 << 20;

/// One checkpoint to convert, as bytes (the CLI maps the files).
pub struct ConvertInput<'a> {
    pub config_json: &'a str,
    pub checkpoint: &'a Checkpoint<'a>,
    pub generation_config: Option<serde_json::Value>,
    pub tokenizer_json: Option<&'a [u8]>,
    /// Hashes of the files read (see [`SourceFile::hash`]).
    pub sources: Vec<SourceFile>,
}

/// Reads rows of a checkpoint tensor by the name the plan gives it.
type RowReader<'a> = dyn Fn(&str, &[usize], std::ops::Range<usize>) -> Result<Vec<f32>> + 'a;
/// Reads an integer checkpoint tensor as i64.
type IntReader<'a> = dyn Fn(&str, &[usize]) -> Result<Vec<i64>> + 'a;

struct Model<'a> {
    prefix: &'static str,
    input: &'a ConvertInput<'a>,
    plan: Vec<PlannedWeight>,
    read_rows: Box<RowReader<'a>>,
    read_i64: Box<IntReader<'a>>,
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
    // A tokenizer stored unchecked would fail every later load of the artifact.
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
    let ck = target.checkpoint;
    let mut models = vec![Model {
        prefix: TARGET_PREFIX,
        input: target,
        plan: target_plan(&spec, format, &|n| ck.has(n)),
        read_rows: Box::new(move |name, shape, rows| ck.f32_rows(name, shape, rows)),
        read_i64: Box::new(move |name, _| {
            Err(Error::invalid(
                OP,
                format!("integer tensor `{name}`"),
                "none in a target",
                "asked",
            ))
        }),
    }];
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
        let ack = a.checkpoint;
        let plan = assistant_plan(&aspec, format, &|n| ack.has_full(n));
        census.extend(assistant_census(&aspec, &plan));
        models.push(Model {
            prefix: ASSISTANT_PREFIX,
            input: a,
            plan,
            read_rows: Box::new(move |name, shape, rows| ack.f32_rows_full(name, shape, rows)),
            read_i64: Box::new(move |name, shape| ack.i64_full(name, shape)),
        });
    }

    // Weights whose tensors are not whole words go last, so every other tensor starts on
    // a 4-byte boundary (a u32 view of the mapped file needs no copy); the tokenizers last.
    let whole_words =
        |w: &PlannedWeight, prefix: &str| w.stored(prefix).iter().all(|t| t.byte_len() % 4 == 0);
    let mut order: Vec<(usize, usize)> = Vec::new();
    for pass in [true, false] {
        for (m, model) in models.iter().enumerate() {
            for (i, w) in model.plan.iter().enumerate() {
                if whole_words(w, model.prefix) == pass {
                    order.push((m, i));
                }
            }
        }
    }
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
            let v = (model.read_rows)(&weight.parts[0].0, shape, 0..rows)?;
            w.write(&name, bytemuck::cast_slice(&v))?;
            progress(v.len() as u64 * 4);
        }
        Prep::U32 { len } => {
            let part = &weight.parts[0].0;
            let v = (model.read_i64)(part, &[*len])?
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
        Prep::Matrix { n, k, layout, .. } => {
            let (n, k) = (*n, *k);
            // Multiples of 64 rows: even, so a block's scale words never straddle blocks.
            let block = (BLOCK_ELEMENTS / k.max(1) / 64 * 64).max(64);
            let mut scales: Vec<u32> = Vec::new();
            let mut start = 0;
            while start < n {
                let end = (start + block).min(n);
                let rows = read_stacked(model, weight, start..end, k)?;
                let m = Matrix::prepare(rows, end - start, k, *layout)?;
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
            out.extend((model.read_rows)(part, shape, lo - first..hi - first)?);
        }
        first += part_rows;
    }
    Ok(out)
}
