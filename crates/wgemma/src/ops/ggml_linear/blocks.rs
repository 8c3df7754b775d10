//! ggml's tensor types as GGUF stores them, and their dequantisation to f32. The block
//! layouts and the arithmetic follow ggml (`ggml-quants.c`, `dequantize_row_*`) and the
//! `gguf` Python package (`gguf/quants.py`) operation for operation, so the values are
//! bit-identical to that reference (tested on random blocks: `formats/gguf/tests.rs`).
//! They live with the op that runs them; [`crate::weights::ggml`] re-exports them.
//!
//! | type | elements / block | bytes / block | value |
//! |---|---|---|---|
//! | F32, F16, BF16 | 1 | 4, 2, 2 | as stored |
//! | Q8_0 | 32 | 34 | `d * q`, f16 `d`, i8 `q` |
//! | Q4_0 | 32 | 18 | `d * (q - 8)`, f16 `d`, 4-bit `q` (element `j` low nibble of byte `j`, `j + 16` high) |
//! | Q4_1 | 32 | 20 | `d * q + m`, f16 `d`, `m`, 4-bit `q` (nibbles as Q4_0) |
//! | Q5_0 | 32 | 22 | `d * (q - 16)`, 5-bit `q`: nibbles as Q4_0, bit `j` of a u32 `qh` the fifth of element `j` |
//! | Q5_1 | 32 | 24 | `d * q + m`, 5-bit `q` as Q5_0 |
//! | Q4_K | 256 | 144 | `d * sc_j * q - dmin * m_j`, 8 sub-blocks of 32, 6-bit `sc`/`m` |
//! | Q5_K | 256 | 176 | as Q4_K with a fifth bit per weight (bit `j` of `qh[l]` for sub-block `j`) |
//! | Q6_K | 256 | 210 | `d * sc_j * (q - 32)`, 16 sub-blocks of 16, 6-bit `q`, i8 `sc` |
//! | I32, I64 | 1 | 4, 8 | integers (the assistant's token ordering) |

use crate::error::{Error, Result};
use half::f16;

const OP: &str = "gguf";

/// A ggml tensor type this build reads (named as ggml names them).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q4_K,
    Q5_K,
    Q6_K,
    I32,
    I64,
}

/// Names of the ggml type ids this build does not read, for errors.
fn unread_type_name(id: u32) -> Option<&'static str> {
    Some(match id {
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => return None,
    })
}

impl GgmlType {
    /// The type of a ggml type id; any other id (one of ggml's this build does not read,
    /// or none of ggml's) is an error naming it.
    pub fn from_id(id: u32) -> Result<GgmlType> {
        Ok(match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            12 => GgmlType::Q4_K,
            13 => GgmlType::Q5_K,
            14 => GgmlType::Q6_K,
            26 => GgmlType::I32,
            27 => GgmlType::I64,
            30 => GgmlType::BF16,
            other => return Err(Error::invalid(
                OP,
                "tensor type",
                "one of F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, I32, I64",
                match unread_type_name(other) {
                    Some(name) => format!("{name} (id {other}, not read by this build)"),
                    None => format!("id {other} (not a ggml type)"),
                },
            )),
        })
    }

    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::I32 => 26,
            GgmlType::I64 => 27,
            GgmlType::BF16 => 30,
        }
    }

    /// Elements per block.
    pub fn block_elements(self) -> usize {
        match self {
            GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 => {
                32
            }
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => 256,
            _ => 1,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::I32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::I64 => 8,
            GgmlType::Q8_0 => 34,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q4_K => 144,
            GgmlType::Q5_K => 176,
            GgmlType::Q6_K => 210,
        }
    }

    /// Bytes of `elements` values (a multiple of the block).
    pub fn bytes_of(self, elements: usize) -> usize {
        elements / self.block_elements() * self.block_bytes()
    }

    /// Whether the values are floating point (every type but I32 / I64).
    pub fn is_float(self) -> bool {
        !matches!(self, GgmlType::I32 | GgmlType::I64)
    }
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Q4_K's 6-bit scale and min of sub-block `j` (ggml's `get_scale_min_k4`).
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Dequantises whole blocks of `ty` into `out` (`out.len()` elements; `bytes` exactly their
/// blocks). Integer types are converted to f32 as well (exactly up to 2^24).
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let be = ty.block_elements();
    if out.len() % be != 0 || bytes.len() != ty.bytes_of(out.len()) {
        return Err(Error::invalid(
            OP,
            format!("{ty:?} bytes for {} values", out.len()),
            ty.bytes_of(out.len() / be * be),
            bytes.len(),
        ));
    }
    let block: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::F32 => |b, o| o[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        GgmlType::F16 => |b, o| o[0] = f16_at(b, 0),
        GgmlType::BF16 => {
            |b, o| o[0] = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16)
        }
        GgmlType::I32 => |b, o| o[0] = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
        GgmlType::I64 => |b, o| o[0] = i64::from_le_bytes(b.try_into().expect("8 bytes")) as f32,
        GgmlType::Q8_0 => q8_0_block,
        GgmlType::Q4_0 => q4_0_block,
        GgmlType::Q4_1 => q4_1_block,
        GgmlType::Q5_0 => q5_0_block,
        GgmlType::Q5_1 => q5_1_block,
        GgmlType::Q4_K => q4_k_block,
        GgmlType::Q5_K => q5_k_block,
        GgmlType::Q6_K => q6_k_block,
    };
    for (b, o) in bytes
        .chunks_exact(ty.block_bytes())
        .zip(out.chunks_exact_mut(be))
    {
        block(b, o);
    }
    Ok(())
}

fn q8_0_block(b: &[u8], o: &mut [f32]) {
    let d = f16_at(b, 0);
    for (j, v) in o.iter_mut().enumerate() {
        *v = (b[2 + j] as i8) as f32 * d;
    }
}

fn q4_0_block(b: &[u8], o: &mut [f32]) {
    let d = f16_at(b, 0);
    for j in 0..16 {
        let q = b[2 + j];
        o[j] = d * ((q & 0xF) as i32 - 8) as f32;
        o[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
    }
}

fn q4_1_block(b: &[u8], o: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for j in 0..16 {
        let q = b[4 + j];
        o[j] = d * (q & 0xF) as f32 + m;
        o[j + 16] = d * (q >> 4) as f32 + m;
    }
}

/// The 5-bit values of a Q5_0 / Q5_1 block: nibbles from `qs`, fifth bits from `qh`.
fn q5_values(qh: &[u8], qs: &[u8]) -> [u8; 32] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut q = [0u8; 32];
    for j in 0..16 {
        q[j] = (qs[j] & 0xF) | ((((qh >> j) & 1) as u8) << 4);
        q[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
    }
    q
}

fn q5_0_block(b: &[u8], o: &mut [f32]) {
    let d = f16_at(b, 0);
    for (v, q) in o.iter_mut().zip(q5_values(&b[2..6], &b[6..22])) {
        *v = d * (q as i32 - 16) as f32;
    }
}

fn q5_1_block(b: &[u8], o: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for (v, q) in o.iter_mut().zip(q5_values(&b[4..8], &b[8..24])) {
        *v = d * q as f32 + m;
    }
}

fn q4_k_block(b: &[u8], o: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (scales, qs) = (&b[4..16], &b[16..144]);
    for c in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * c, scales);
        let (sc2, m2) = scale_min_k4(2 * c + 1, scales);
        let (d1, min1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, min2) = (d * sc2 as f32, dmin * m2 as f32);
        let q = &qs[32 * c..32 * c + 32];
        for l in 0..32 {
            o[64 * c + l] = d1 * (q[l] & 0xF) as f32 - min1;
            o[64 * c + 32 + l] = d2 * (q[l] >> 4) as f32 - min2;
        }
    }
}

fn q5_k_block(b: &[u8], o: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    for s in 0..8 {
        let (sc, m) = scale_min_k4(s, scales);
        let (ds, ms) = (d * sc as f32, dmin * m as f32);
        let (q, shift) = (&qs[32 * (s / 2)..], 4 * (s % 2));
        for l in 0..32 {
            let v = ((q[l] >> shift) & 0xF) | (((qh[l] >> s) & 1) << 4);
            o[32 * s + l] = ds * v as f32 - ms;
        }
    }
}

fn q6_k_block(b: &[u8], o: &mut [f32]) {
    let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = f16_at(b, 208);
    for h in 0..2 {
        let (ql, qh, sc) = (&ql[64 * h..], &qh[32 * h..], &sc[8 * h..]);
        let o = &mut o[128 * h..128 * h + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            o[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            o[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            o[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            o[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

/// Dequantises whole blocks into a new vector.
pub fn dequantize_to_vec(ty: GgmlType, bytes: &[u8]) -> Result<Vec<f32>> {
    let blocks = bytes.len() / ty.block_bytes();
    let mut out = vec![0.0; blocks * ty.block_elements()];
    dequantize(ty, bytes, &mut out)?;
    Ok(out)
}

/// Rewrites Q4_0 rows (`rows` x `k`, `k % 32 == 0`) into wgemma's Q4 layout with group 32
/// ([`crate::ops::linear::quant`]): both store `(q - 8) * f16 scale` per 32 weights, so
/// this moves bits and changes no value. Q4_0 keeps element `j` of a block in the low
/// nibble of byte `j` and `j + 16` in its high nibble; wgemma packs 8 consecutive elements
/// per u32, element `8w + i` in bits `4i..4i+3`. Returns (packed words, scale words).
pub fn q4_0_to_wgemma_q4(bytes: &[u8], rows: usize, k: usize) -> Result<(Vec<u32>, Vec<u32>)> {
    let blocks = rows * k / 32;
    if k % 32 != 0 || bytes.len() != blocks * 18 {
        return Err(Error::invalid(
            OP,
            format!("Q4_0 bytes of {rows} rows of {k}"),
            format!("{} (K a multiple of 32)", blocks * 18),
            bytes.len(),
        ));
    }
    let mut packed = Vec::with_capacity(rows * k / 8);
    let mut halves = Vec::with_capacity(blocks);
    for b in bytes.chunks_exact(18) {
        halves.push(u16::from_le_bytes([b[0], b[1]]));
        let mut nib = [0u8; 32];
        for j in 0..16 {
            nib[j] = b[2 + j] & 0xF;
            nib[j + 16] = b[2 + j] >> 4;
        }
        for w in 0..4 {
            let mut word = 0u32;
            for i in 0..8 {
                word |= (nib[8 * w + i] as u32) << (4 * i);
            }
            packed.push(word);
        }
    }
    Ok((packed, crate::ops::linear::pack_scale_halves(&halves)))
}
