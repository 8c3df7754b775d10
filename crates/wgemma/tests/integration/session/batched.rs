//! Streams decoding together in one batch (`wgemma::session` streams): joining and leaving
//! at different steps, plain and speculative, each equal to its solo run.

use super::{err, files, generate, load_assistant, word_tokenizer};
use wgemma::session::{ChatMessage, GenerateRequest, LoadOptions, Session as Engine};

#[test]
fn batched_streams_match_their_solo_runs_joining_and_leaving() {
    // Three KV slots beside the state's own: streams join at different steps, one leaves
    // early (its slot is reused by a late joiner), and every greedy token equals the
    // request's solo run; a sampled stream equals its solo run with the same seed.
    let options = LoadOptions {
        sequences: 4,
        ..LoadOptions::default()
    };
    let mut engine = pollster::block_on(Engine::new(None)).unwrap();
    engine
        .load_checkpoint(&files("e2b_like", Some(word_tokenizer())), &options)
        .unwrap();
    let request = |i: usize, temperature: f32| GenerateRequest {
        messages: Some(vec![ChatMessage::new(
            "user",
            &format!("w{} w{}", 3 * i, 40 + i),
        )]),
        max_new_tokens: 8 + i,
        temperature,
        seed: i as u64,
        ..GenerateRequest::default()
    };
    let requests: Vec<GenerateRequest> = (0..5)
        .map(|i| request(i, if i == 3 { 0.8 } else { 0.0 }))
        .collect();
    let solo: Vec<Vec<u32>> = requests
        .iter()
        .map(|r| {
            generate(&mut engine, r.clone(), &mut |_| true)
                .unwrap()
                .tokens
        })
        .collect();

    let mut got: Vec<Vec<u32>> = vec![Vec::new(); requests.len()];
    let mut active: Vec<(usize, wgemma::session::Stream)> = Vec::new();
    let start = |engine: &mut Engine, i: usize, got: &mut Vec<Vec<u32>>| {
        let (stream, first) = pollster::block_on(engine.start_stream(&requests[i])).unwrap();
        got[i].push(first.id);
        (i, stream)
    };
    active.push(start(&mut engine, 0, &mut got));
    active.push(start(&mut engine, 1, &mut got));
    let mut step = 0;
    let mut peak = 0;
    let mut dropped = false;
    let mut next = 2;
    while !active.is_empty() {
        // Request 2 joins after two steps; 3 and 4 when slots free up.
        if (step >= 2 && next == 2) || (next > 2 && next < requests.len() && active.len() < 3) {
            active.push(start(&mut engine, next, &mut got));
            next += 1;
        }
        peak = peak.max(active.len());
        let mut streams: Vec<&mut wgemma::session::Stream> =
            active.iter_mut().map(|(_, s)| s).collect();
        let events = pollster::block_on(engine.step_streams(&mut streams)).unwrap();
        for ((i, _), e) in active.iter().zip(&events) {
            got[*i].push(e.id);
        }
        active.retain(|(_, s)| s.finish_reason().is_none());
        // A client that goes away: stream 1 leaves after four steps, its slot freed.
        if step == 3 && !dropped {
            active.retain(|(i, _)| *i != 1);
            dropped = true;
        }
        step += 1;
        assert!(step < 100, "streams never finished");
    }
    assert!(peak >= 3, "at most {peak} streams decoded together");
    for (i, (got, want)) in got.iter().zip(&solo).enumerate() {
        if i == 1 {
            assert_eq!(got[..], want[..got.len()], "stream 1 (left early)");
            assert!(got.len() < want.len());
        } else {
            assert_eq!(got, want, "stream {i}");
        }
    }
    // Every slot came back: three new streams fit again.
    let held: Vec<_> = (0..3)
        .map(|i| pollster::block_on(engine.start_stream(&requests[i])).unwrap())
        .collect();
    assert_eq!(held.len(), 3);
    let e = err(pollster::block_on(engine.start_stream(&requests[0])).map(|_| ()));
    assert!(e.contains("free sequence slot"), "{e}");
}

/// Oracle drafts standing for `reference`: all kept, or every other one.
fn oracle_drafts(reference: Vec<u32>, all: bool) -> wgemma::session::DraftSource {
    let mut flip = false;
    let keep = move |k: usize| -> Vec<bool> {
        let mut next = || {
            flip = !flip;
            all || flip
        };
        (0..k).map(|_| next()).collect()
    };
    wgemma::session::DraftSource::Oracle(wgemma::session::OracleDrafts {
        reference,
        keep: Box::new(keep),
        drafter: true,
    })
}

/// Speculative streams in a batch (`step_rounds`): four drafting streams (k = 1..3, one
/// sampled with a seed) and a plain one, two joining late, each equal to its solo plain
/// run; then the same with oracle drafts standing for each stream's own tokens (every draft
/// accepted, so rounds commit k + 1 tokens) or every other one rejected.
#[test]
fn batched_speculative_streams_match_their_solo_runs() {
    let options = LoadOptions {
        sequences: 6,
        ..LoadOptions::default()
    };
    let mut engine = pollster::block_on(Engine::new(None)).unwrap();
    engine
        .load_checkpoint(&files("e2b_like", Some(word_tokenizer())), &options)
        .unwrap();
    load_assistant(&mut engine, "e2b_like_assistant").unwrap();
    let requests: Vec<GenerateRequest> = (0..5)
        .map(|i| GenerateRequest {
            messages: Some(vec![ChatMessage::new(
                "user",
                &format!("w{} w{}", 7 * i, 90 + i),
            )]),
            max_new_tokens: 9 + i,
            temperature: if i == 3 { 0.8 } else { 0.0 },
            seed: 11 + i as u64,
            speculative: i != 4,
            draft_tokens: 1 + i % 3,
            ..GenerateRequest::default()
        })
        .collect();
    let solo: Vec<Vec<u32>> = requests
        .iter()
        .map(|r| {
            let plain = GenerateRequest {
                speculative: false,
                ..r.clone()
            };
            generate(&mut engine, plain, &mut |_| true).unwrap().tokens
        })
        .collect();
    // keep: None (the assistant's own drafts), all kept, every other one kept.
    for keep in [None, Some(true), Some(false)] {
        let mut got: Vec<Vec<u32>> = vec![Vec::new(); requests.len()];
        let mut counts = vec![None; requests.len()];
        let mut rounds = vec![0; requests.len()];
        let mut active: Vec<(usize, wgemma::session::Stream)> = Vec::new();
        let start = |engine: &mut Engine, i: usize, got: &mut Vec<Vec<u32>>| {
            let (mut stream, first) =
                pollster::block_on(engine.start_stream(&requests[i])).unwrap();
            assert_eq!(stream.is_speculative(), i != 4);
            got[i].push(first.id);
            if let (Some(all), true) = (keep, stream.is_speculative()) {
                let source = oracle_drafts(solo[i].clone(), all);
                stream.set_draft_source(source).unwrap();
            }
            (i, stream)
        };
        for i in 0..3 {
            active.push(start(&mut engine, i, &mut got));
        }
        let mut step = 0;
        while !active.is_empty() {
            if step == 2 {
                active.push(start(&mut engine, 3, &mut got));
                active.push(start(&mut engine, 4, &mut got));
            }
            let mut streams: Vec<&mut wgemma::session::Stream> =
                active.iter_mut().map(|(_, s)| s).collect();
            let events = pollster::block_on(engine.step_rounds(&mut streams)).unwrap();
            for ((i, s), e) in active.iter().zip(&events) {
                assert!(!e.is_empty());
                got[*i].extend(e.iter().map(|e| e.id));
                counts[*i] = s.draft_counts();
                rounds[*i] += 1;
            }
            active.retain(|(_, s)| s.finish_reason().is_none());
            step += 1;
            assert!(step < 60, "streams never finished");
        }
        for (i, (got, want)) in got.iter().zip(&solo).enumerate() {
            assert_eq!(got, want, "stream {i}, drafts kept: {keep:?}");
        }
        assert_eq!(counts[4], None, "the plain stream drafts nothing");
        for (i, c) in counts.iter().enumerate().take(4) {
            let (drafted, accepted) = c.expect("a drafting stream");
            assert!(drafted > 0, "stream {i} drafted nothing");
            if keep == Some(true) {
                assert_eq!(
                    accepted, drafted,
                    "stream {i}: every draft is its own token"
                );
            }
        }
        if keep == Some(true) {
            // Rounds committed k + 1 tokens: fewer rounds than tokens after the first.
            for (i, (r, g)) in rounds.iter().zip(&got).enumerate().take(4) {
                assert!(*r < g.len() - 1, "stream {i}: {rounds:?}");
            }
        }
    }
    // A plain batched step refuses a drafting stream.
    let (mut s, _) = pollster::block_on(engine.start_stream(&requests[0])).unwrap();
    let e = err(pollster::block_on(engine.step_streams(&mut [&mut s])).map(|_| ()));
    assert!(e.contains("step_rounds"), "{e}");
}
