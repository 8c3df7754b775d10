use super::*;
use crate::gpu::{read_tensor_f32, run_kernels, ContextOptions};
use crate::harness::{assert_cases_pass, check, test_context, OpCase};
use half::f16;

fn invalid<T: std::fmt::Debug>(r: Result<T>, what: &str) {
    match r {
        Err(Error::Invalid { what: w, .. }) => assert!(w.contains(what), "{w} !~ {what}"),
        other => panic!("expected Invalid({what}), got {other:?}"),
    }
}

fn chunked(
    vocab: usize,
    dim: usize,
    m: usize,
    format: TableFormat,
    rows_per_chunk: Option<usize>,
) -> EmbeddingCase {
    let mut case = EmbeddingCase::new(vocab, dim, m, format);
    let row_bytes = format
        .row_bytes(dim)
        .max(2 * format.scales_per_row(dim) as u64);
    case.max_chunk_bytes = rows_per_chunk.map(|r| r as u64 * row_bytes);
    case.out_of_range = true;
    case
}

/// Every format, whole and split into 2 and many chunks, with rows longer than one
/// workgroup (2 workgroups per token), ids on chunk boundaries and out of range.
#[test]
fn all_formats_and_chunkings_match_reference() {
    let mut cases: Vec<Box<dyn OpCase>> = Vec::new();
    for (format, dim) in [
        (TableFormat::F32, 300),
        (TableFormat::F16, 514),
        (TableFormat::Q4 { group: 32 }, 2080),
        (TableFormat::Q4 { group: 8 }, 2056), // 257 scales per row: odd
    ] {
        for rows_per_chunk in [None, Some(40), Some(6)] {
            cases.push(Box::new(chunked(70, dim, 12, format, rows_per_chunk)));
        }
    }
    assert_cases_pass(&cases, 0..1);
}

#[test]
fn small_edge_shapes() {
    let cases: Vec<Box<dyn OpCase>> = vec![
        Box::new(chunked(1, 1, 1, TableFormat::F32, None)),
        Box::new(chunked(2, 2, 3, TableFormat::F16, Some(1))),
        Box::new(chunked(5, 8, 4, TableFormat::Q4 { group: 8 }, Some(2))), // 1 scale per row
        Box::new(chunked(3, 24, 6, TableFormat::Q4 { group: 8 }, Some(2))), // odd table end
    ];
    assert_cases_pass(&cases, 0..2);
}

#[test]
fn chunks_cover_the_table_and_start_on_scale_words() {
    let ctx = test_context();
    let format = TableFormat::Q4 { group: 8 };
    // 3 scales per row (odd): chunk starts must be even rows.
    let t = EmbeddingTable::new(ctx, "t", 11, 24, format, Some(3 * 12)).unwrap();
    let ranges: Vec<_> = t.chunks().iter().map(|c| c.rows.clone()).collect();
    assert_eq!(ranges, vec![0..2, 2..4, 4..6, 6..8, 8..10, 10..11]);
    let t = EmbeddingTable::new(ctx, "t", 10, 6, TableFormat::F32, Some(24 * 4)).unwrap();
    assert_eq!(t.chunks().len(), 3);
    assert_eq!(t.chunks()[2].rows, 8..10);
    // No limit: one chunk.
    let t = EmbeddingTable::new(ctx, "t", 10, 6, TableFormat::F16, None).unwrap();
    assert_eq!(t.chunks().len(), 1);
}

/// The GPU rule for ids >= vocab: the row is zeros (the output starts non-zero).
#[test]
fn out_of_range_ids_give_zero_rows() {
    let ctx = test_context();
    let rows: Vec<f32> = (0..6 * 4).map(|v| v as f32 + 1.0).collect();
    let table = EmbeddingTable::from_rows(
        ctx,
        "t",
        4,
        TableFormat::F32,
        TableRows::F32(&rows),
        Some(32),
    )
    .unwrap();
    assert_eq!(table.chunks().len(), 3);
    let ids = Tensor::from_u32(ctx, "ids", &[4], &[6, 5, u32::MAX, 0]).unwrap();
    let out = Tensor::from_f32(ctx, "out", &[4, 4], &[7.0; 16]).unwrap();
    run_kernels(ctx, &embedding(ctx, &table, &ids, &out, 2.0).unwrap());
    let got = pollster::block_on(read_tensor_f32(ctx, &out)).unwrap();
    let want: Vec<f32> = [0.0; 4]
        .into_iter()
        .chain([21.0, 22.0, 23.0, 24.0].map(|v| v * 2.0))
        .chain([0.0; 4])
        .chain([1.0, 2.0, 3.0, 4.0].map(|v| v * 2.0))
        .collect();
    assert_eq!(got, want);
    // Negative i32 ids are out of range too.
    let ids = Tensor::from_i32(ctx, "ids", &[2], &[-1, 1]).unwrap();
    let out = Tensor::from_f32(ctx, "out", &[2, 4], &[7.0; 8]).unwrap();
    run_kernels(ctx, &embedding(ctx, &table, &ids, &out, 1.0).unwrap());
    let got = pollster::block_on(read_tensor_f32(ctx, &out)).unwrap();
    assert_eq!(got, vec![0.0, 0.0, 0.0, 0.0, 5.0, 6.0, 7.0, 8.0]);
}

#[test]
fn host_ids_are_validated() {
    let ctx = test_context();
    let ids = Tensor::zeros(ctx, "ids", &[3], DType::U32).unwrap();
    write_token_ids(ctx, &ids, &[0, 9, 4], 10).unwrap();
    assert_eq!(
        pollster::block_on(crate::gpu::read_tensor_u32(ctx, &ids)).unwrap(),
        vec![0, 9, 4]
    );
    invalid(write_token_ids(ctx, &ids, &[0, 10, 4], 10), "position 1");
    invalid(write_token_ids(ctx, &ids, &[0, 1], 10), "token count");
    let fids = Tensor::zeros(ctx, "f", &[3], DType::F32).unwrap();
    invalid(write_token_ids(ctx, &fids, &[0, 1, 2], 10), "dtype of ids");
}

#[test]
fn rejects_bad_tables_and_shapes() {
    let ctx = test_context();
    let q4 = |group| TableFormat::Q4 { group };
    invalid(
        EmbeddingTable::new(ctx, "t", 4, 7, TableFormat::F16, None),
        "f16 table dim",
    );
    invalid(EmbeddingTable::new(ctx, "t", 4, 24, q4(12), None), "group");
    invalid(
        EmbeddingTable::new(ctx, "t", 4, 24, q4(16), None),
        "q4 table dim",
    );
    invalid(
        EmbeddingTable::new(ctx, "t", 4, 0, TableFormat::F32, None),
        "dim",
    );
    invalid(
        EmbeddingTable::new(ctx, "t", 0, 4, TableFormat::F32, None),
        "rows",
    );
    // A chunk limit below one row cannot be planned.
    assert!(EmbeddingTable::new(ctx, "t", 4, 8, TableFormat::F32, Some(16)).is_err());

    let t = EmbeddingTable::new(ctx, "t", 4, 8, TableFormat::F32, None).unwrap();
    invalid(
        t.write_rows(ctx, 0, TableRows::F16(&[f16::ZERO; 8])),
        "rows format",
    );
    invalid(
        t.write_rows(ctx, 0, TableRows::F32(&[0.0; 7])),
        "f32 elements",
    );
    invalid(
        t.write_rows(ctx, 3, TableRows::F32(&[0.0; 16])),
        "rows written",
    );
    let t = EmbeddingTable::new(ctx, "t", 5, 24, q4(8), None).unwrap();
    let (w, s) = ([0u32; 3], [f16::ZERO; 3]);
    invalid(
        t.write_rows(
            ctx,
            1,
            TableRows::Q4 {
                words: &w,
                scales: &s,
            },
        ),
        "two rows share",
    );
    invalid(
        t.write_rows(
            ctx,
            0,
            TableRows::Q4 {
                words: &w,
                scales: &s[..2],
            },
        ),
        "q4 scales",
    );
    t.write_rows(
        ctx,
        4,
        TableRows::Q4 {
            words: &w,
            scales: &s,
        },
    )
    .unwrap(); // the table end

    let ids = Tensor::zeros(ctx, "ids", &[2], DType::U32).unwrap();
    let out = Tensor::zeros(ctx, "out", &[2, 24], DType::F32).unwrap();
    invalid(
        embedding(
            ctx,
            &t,
            &ids,
            &Tensor::zeros(ctx, "o", &[2, 23], DType::F32).unwrap(),
            1.0,
        ),
        "element count of out",
    );
    invalid(
        embedding(
            ctx,
            &t,
            &Tensor::zeros(ctx, "i", &[2], DType::F32).unwrap(),
            &out,
            1.0,
        ),
        "dtype of ids",
    );
    invalid(embedding(ctx, &t, &ids, &out, f32::NAN), "scale");
    invalid(
        per_layer_embedding(ctx, &t, &ids, &out, 5, 4),
        "per-layer table dim",
    );
}

#[test]
fn per_layer_embedding_uses_sqrt_ple_dim() {
    let ctx = test_context();
    let (layers, ple_dim, vocab) = (3, 16, 5);
    let rows: Vec<f16> = (0..vocab * layers * ple_dim)
        .map(|v| f16::from_f32(v as f32 / 64.0))
        .collect();
    let table = EmbeddingTable::from_rows(
        ctx,
        "ple",
        layers * ple_dim,
        TableFormat::F16,
        TableRows::F16(&rows),
        None,
    )
    .unwrap();
    let ids = Tensor::zeros(ctx, "ids", &[2], DType::U32).unwrap();
    write_token_ids(ctx, &ids, &[4, 1], vocab).unwrap();
    let out = Tensor::zeros(ctx, "out", &[2, layers * ple_dim], DType::F32).unwrap();
    run_kernels(
        ctx,
        &per_layer_embedding(ctx, &table, &ids, &out, layers, ple_dim).unwrap(),
    );
    let got = pollster::block_on(read_tensor_f32(ctx, &out)).unwrap();
    let d = layers * ple_dim;
    let want: Vec<f32> = [4, 1]
        .iter()
        .flat_map(|&r| rows[r * d..(r + 1) * d].iter().map(|h| h.to_f32() * 4.0))
        .collect();
    assert_eq!(got, want);
}

/// HF casts `hidden ** 0.5` to the bf16 weight dtype (its comment: sqrt(3072) -> 55.5).
#[test]
fn bf16_embed_scale_matches_hf() {
    for (dim, want) in [
        (1536, 39.25),
        (2560, 50.5),
        (2816, 53.0),
        (5376, 73.5),
        (3072, 55.5),
        (256, 16.0),
    ] {
        assert_eq!(bf16_embed_scale(dim), want, "dim {dim}");
    }
}

#[test]
fn folded_grid_covers_every_token() {
    let ctx = GpuContext::new_blocking(ContextOptions {
        max_workgroups_per_dimension: Some(4),
        ..Default::default()
    })
    .unwrap();
    // 5 tokens x 2 workgroups per row = 10 workgroups -> a 4 x 3 grid.
    for (format, dim) in [
        (TableFormat::F32, 300),
        (TableFormat::Q4 { group: 32 }, 2080),
    ] {
        let case = chunked(30, dim, 5, format, Some(11));
        let report = pollster::block_on(check(&ctx, &case, 1)).unwrap();
        assert!(report.pass(), "{report}");
    }
}
