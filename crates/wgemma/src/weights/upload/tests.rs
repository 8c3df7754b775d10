use super::*;
use crate::gpu::read_tensor_bytes;
use crate::harness::test_context;
use crate::ops::linear::quantize_q4;

fn read_words(ctx: &GpuContext, t: &Tensor) -> Vec<u32> {
    bytemuck::pod_collect_to_vec(&pollster::block_on(read_tensor_bytes(ctx, t)).unwrap())
}

/// Q4 words and f16 scales of both destinations, chunks concatenated.
fn words_of(ctx: &GpuContext, m: &Uploaded) -> (Vec<u32>, Vec<u32>, Vec<u32>, Vec<u16>) {
    let Some(LinearWeight::Q4(w)) = &m.linear else {
        panic!("expected a Q4 linear weight")
    };
    let (mut packed, mut scales) = (Vec::new(), Vec::new());
    for c in w.chunks() {
        packed.extend(read_words(ctx, &c.packed));
        scales.extend(read_words(ctx, &c.scales));
    }
    let table = m.table.as_ref().expect("a table");
    let groups = table.format().scales_per_row(table.dim());
    let (mut t_packed, mut t_scales) = (Vec::new(), Vec::new());
    for c in table.chunks() {
        t_packed.extend(read_words(ctx, &c.data));
        let halves: Vec<u16> =
            bytemuck::pod_collect_to_vec(&read_words(ctx, c.scales.as_ref().unwrap()));
        t_scales.extend_from_slice(&halves[..c.rows.len() * groups]);
    }
    (packed, scales, t_packed, t_scales)
}

/// Two stacked bf16 parts, blocks of 64 rows, buffers of a few rows: the GPU path, the
/// CPU path and the CPU quantiser over the whole matrix give the same words, in the
/// linear weight and in the table alike. An odd group count per row with odd part
/// heights (parts meeting mid scale word) falls back to the CPU and still matches.
#[test]
fn streamed_blocks_match_the_whole_matrix_quantiser() {
    let ctx = test_context();
    for (part_rows, k, group) in [(160, 96, 32), (70, 64, 32), (75, 64, 64)] {
        let n = 2 * part_rows;
        let values: Vec<f32> = (0..n * k)
            .map(|i| ((i as f32 * 0.61).sin() * (1.0 + (i % 7) as f32)).round() / 8.0)
            .collect();
        let bf: Vec<u8> = values
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect();
        let exact: Vec<f32> = bf
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect();
        let want = quantize_q4(&exact, n, k, group).unwrap();
        let want_halves: Vec<u16> =
            bytemuck::cast_slice::<u32, u16>(&want.scales)[..n * k / group].to_vec();
        let half_bytes = bf.len() / 2;
        let released = std::cell::Cell::new(0usize);
        let release = |r: Range<usize>| released.set(released.get() + r.len());
        let parts = [
            RawTensor::bytes(RawDtype::BF16, &[part_rows, k], &bf[..half_bytes], "`w`")
                .with_release(release),
            RawTensor::bytes(RawDtype::BF16, &[part_rows, k], &bf[half_bytes..], "`w`")
                .with_release(release),
        ];
        for quantiser in [Quantiser::Gpu, Quantiser::Cpu] {
            released.set(0);
            // 96 rows of packed words per buffer: the weight's chunks round down to 64
            // rows, and the table shares them.
            let mut up = Uploader::new(ctx).with_max_chunk_bytes(96 * k as u64 / 2);
            let options = StreamOptions {
                quantiser,
                block_bytes: 1,
                ..StreamOptions::default()
            };
            let m = upload_matrix(
                &mut up,
                options,
                "w",
                &parts,
                MatrixSpec {
                    n,
                    k,
                    layout: MatrixLayout::Q4 { group },
                    use_: MatrixUse::TableAndLinear,
                },
            )
            .unwrap();
            let (packed, scales, t_packed, t_scales) = words_of(ctx, &m);
            let what = format!("{quantiser:?} part_rows {part_rows} k {k} group {group}");
            assert_eq!(packed, want.packed, "{what}: packed");
            assert_eq!(scales, want.scales, "{what}: scales");
            assert_eq!(t_packed, want.packed, "{what}: table words");
            assert_eq!(t_scales, want_halves, "{what}: table scales");
            // The tied table reads the linear weight's buffers: one copy on the GPU.
            assert!(m.table_shares_linear(), "{what}: two copies");
            assert_eq!(released.get(), bf.len(), "{what}: bytes released");
        }
    }
}

#[test]
fn bad_weights_are_named_before_anything_is_dispatched() {
    let ctx = test_context();
    let mut values = vec![0.25f32; 128 * 32];
    values[70 * 32 + 3] = f32::INFINITY;
    let part = RawTensor::bytes(
        RawDtype::F32,
        &[128, 32],
        bytemuck::cast_slice(&values),
        "`layers.0.mlp.down_proj.weight` in `m`",
    );
    for quantiser in [Quantiser::Gpu, Quantiser::Cpu] {
        let options = StreamOptions {
            quantiser,
            block_bytes: 1,
            ..StreamOptions::default()
        };
        let err = upload_matrix(
            &mut Uploader::new(ctx),
            options,
            "layers.0.mlp.down_proj.weight",
            std::slice::from_ref(&part),
            MatrixSpec {
                n: 128,
                k: 32,
                layout: MatrixLayout::Q4 { group: 32 },
                use_: MatrixUse::Linear,
            },
        )
        .err()
        .expect("an error")
        .to_string();
        assert!(
            err.contains("element 2243") && err.contains("down_proj") && err.contains("finite"),
            "{err}"
        );
    }
}
