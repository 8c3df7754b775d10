//! Pairs and orderings that cannot work are refused by name.

use super::*;

/// A checkpoint whose `token_ordering` is replaced.
struct Ordering<'a> {
    inner: Checkpoint<'a>,
    ordering: Vec<i64>,
}

impl WeightSource for Ordering<'_> {
    fn tensor(&self, name: &str, shape: &[usize]) -> wgemma::Result<RawTensor<'_>> {
        if name != "masked_embedding.token_ordering" {
            return self.inner.tensor(name, shape);
        }
        assert_eq!(shape, [self.ordering.len()]);
        let bytes: Vec<u8> = self.ordering.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(RawTensor {
            dtype: RawDtype::I64,
            shape: shape.to_vec(),
            data: RawData::Bytes(bytes.into()),
            what: format!("`{name}`"),
            release: None,
        })
    }
    fn has(&self, name: &str) -> bool {
        self.inner.has(name)
    }
}

fn load_with(
    source: &dyn WeightSource,
    config: &str,
    target: &KvState,
    ops: &OpSet,
) -> wgemma::Result<Assistant> {
    Assistant::load(
        test_context(),
        source,
        parse_assistant_config(config).unwrap(),
        target,
        ops,
        AssistantOptions {
            format: WeightFormat::F32,
        },
    )
}

/// The certificate: a permutation `token_ordering` takes the certified parallel scatter;
/// a non-permutation (a repeated id, an id out of range) is refused at load.
#[test]
fn token_ordering_must_be_a_permutation() {
    let pair = load_pair("e2b_like_assistant", WeightFormat::F32, 3);
    assert_eq!(
        pair.assistant.head_routes().scatter,
        Some(ScatterRoute::ParallelUnique)
    );
    // 32 centroids: not the 2048 -> 32 shape, so the generic TopK route.
    assert_eq!(pair.assistant.head_routes().topk, Some(TopKRoute::Generic));
    let af = &pair.assistant_files;
    let good: Vec<i64> = af
        .checkpoint()
        .tensor("masked_embedding.token_ordering", &[512])
        .and_then(|t| t.to_i64())
        .unwrap();
    let mut repeated = good.clone();
    repeated[7] = repeated[300];
    let mut out_of_range = good.clone();
    out_of_range[5] = 512;
    for (ordering, needle) in [(repeated, "a second"), (out_of_range, "0..512")] {
        let source = Ordering {
            inner: af.checkpoint(),
            ordering,
        };
        let err = load_with(&source, &af.config, &pair.target, &OpSet::with_mtp())
            .err()
            .expect("a non-permutation must be refused")
            .to_string();
        assert!(
            err.contains("token_ordering") && err.contains(needle),
            "{err}"
        );
    }
    let source = Ordering {
        inner: af.checkpoint(),
        ordering: good,
    };
    let ok = load_with(&source, &af.config, &pair.target, &OpSet::with_mtp()).unwrap();
    assert_eq!(ok.head_routes().scatter, Some(ScatterRoute::ParallelUnique));
}

/// Op sets are per session: a plain session cannot build the centroid head's MTP-only
/// routes; the dense head needs none.
#[test]
fn plain_op_set_cannot_build_the_centroid_head() {
    let pair = load_pair("e2b_like_assistant", WeightFormat::F32, 3);
    let af = &pair.assistant_files;
    match load_with(&af.checkpoint(), &af.config, &pair.target, &OpSet::plain()) {
        Err(Error::NoRoute { op, failed, .. }) => {
            assert_eq!(op, "topk");
            assert!(failed.iter().any(|f| f.contains("`plain`")), "{failed:?}");
        }
        Err(other) => panic!("expected NoRoute, got {other}"),
        Ok(_) => panic!("a plain op set built the centroid head"),
    }
    let dense = load_pair("dense_kv_assistant", WeightFormat::F32, 3);
    let df = &dense.assistant_files;
    let a = load_with(&df.checkpoint(), &df.config, &dense.target, &OpSet::plain()).unwrap();
    assert_eq!(a.head_routes().topk, None);
}

/// An assistant must match its target: backbone hidden size, and the assistant must be run
/// with the target it was loaded for.
#[test]
fn mismatched_pairs_are_refused() {
    let mut e2b = load_pair("e2b_like_assistant", WeightFormat::F32, 3);
    let dense = load_pair("dense_kv_assistant", WeightFormat::F32, 3);
    let af = &e2b.assistant_files;
    let err = load_with(
        &af.checkpoint(),
        &af.config,
        &dense.target,
        &OpSet::with_mtp(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("backbone_hidden_size") && err.contains("128") && err.contains("64"),
        "{err}"
    );
    // The e2b_like assistant, loaded for another instance of its target.
    let other = load_pair("e2b_like_assistant", WeightFormat::F32, 3);
    let err = pollster::block_on(generate_speculative(
        &mut e2b.target,
        &mut { other }.assistant,
        test_context(),
        &[2, 5, 9],
        &greedy_options(4),
        &SpeculativeOptions::default(),
        &mut |_| true,
    ))
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("another model instance"), "{err}");
    // k beyond the verify plans.
    let err = pollster::block_on(generate_speculative(
        &mut e2b.target,
        &mut e2b.assistant,
        test_context(),
        &[2, 5, 9],
        &greedy_options(4),
        &SpeculativeOptions {
            draft_tokens: 3,
            ..Default::default()
        },
        &mut |_| true,
    ))
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("max_verify_rows"), "{err}");
}
