//! Hostile input round 4: a stream's token constraint that cannot go on (a grammar with no
//! allowed token, or one that errors) ends that stream alone, with
//! `FinishReason::Failed` and its reason; the streams decoding beside it in the batch go
//! on and give the tokens of their solo runs. Before, the error failed the whole batched
//! step and the server ended every neighbour with it.

use crate::common::checkpoint_files;
use wgemma::session::{
    FinishReason, GenerateRequest, LoadOptions, Session, StreamExtras, TokenConstraint,
};

/// Allows every token for `left` tokens, then errors.
struct ErrorsAfter {
    left: usize,
}

impl TokenConstraint for ErrorsAfter {
    fn mask(&mut self, _logits: &mut [f32]) -> wgemma::Result<()> {
        if self.left == 0 {
            return Err(wgemma::Error::invalid(
                "test grammar",
                "state",
                "a way on",
                "a dead end",
            ));
        }
        Ok(())
    }

    fn accept(&mut self, _token: u32) -> wgemma::Result<()> {
        self.left -= 1;
        Ok(())
    }

    fn is_finished(&self) -> bool {
        false
    }
}

/// Allows no token at all.
struct AllowsNothing;

impl TokenConstraint for AllowsNothing {
    fn mask(&mut self, logits: &mut [f32]) -> wgemma::Result<()> {
        logits.fill(f32::NEG_INFINITY);
        Ok(())
    }

    fn accept(&mut self, _token: u32) -> wgemma::Result<()> {
        Ok(())
    }

    fn is_finished(&self) -> bool {
        false
    }
}

fn extras(constraint: Box<dyn TokenConstraint>) -> StreamExtras {
    StreamExtras {
        constraint: Some(constraint),
        ..StreamExtras::default()
    }
}

#[test]
fn a_failing_constraint_ends_only_its_own_stream() {
    let options = LoadOptions {
        sequences: 3,
        ..LoadOptions::default()
    };
    let mut engine = pollster::block_on(Session::new(None)).unwrap();
    engine
        .load_checkpoint(&checkpoint_files("e2b_like", None), &options)
        .unwrap();
    let request = |ids: &[u32]| GenerateRequest {
        prompt_ids: Some(ids.to_vec()),
        max_new_tokens: 6,
        temperature: 0.0,
        ..GenerateRequest::default()
    };
    let (plain, failing) = (request(&[2, 17, 40, 9]), request(&[2, 5, 6]));
    let solo = pollster::block_on(engine.generate(&plain, &mut |_| true))
        .unwrap()
        .tokens;

    let (mut a, first) = pollster::block_on(engine.start_stream(&plain)).unwrap();
    let mut got = vec![first.id];
    let start = |engine: &mut Session, c: Box<dyn TokenConstraint>| {
        pollster::block_on(engine.start_stream_with(&failing, extras(c))).unwrap()
    };
    // One that allows nothing ends at its first token, named.
    let (none, _) = start(&mut engine, Box::new(AllowsNothing));
    assert_eq!(none.finish_reason(), Some(FinishReason::Failed));
    let why = none.failure().unwrap().to_string();
    assert!(
        why.contains("output token 0") && why.contains("none"),
        "{why}"
    );
    drop(none);
    // One that errors after two tokens ends in the batched step that reaches it.
    let (mut b, _) = start(&mut engine, Box::new(ErrorsAfter { left: 2 }));
    let mut steps = 0;
    while a.finish_reason().is_none() {
        let mut streams: Vec<&mut wgemma::session::Stream> = vec![&mut a];
        if b.finish_reason().is_none() {
            streams.push(&mut b);
        }
        let events = pollster::block_on(engine.step_streams(&mut streams)).unwrap();
        got.push(events[0].id);
        steps += 1;
        assert!(steps < 10, "the plain stream never finished");
    }
    assert_eq!(got, solo, "the neighbour of a failed stream");
    assert_eq!(b.finish_reason(), Some(FinishReason::Failed));
    let why = b.failure().unwrap().to_string();
    assert!(
        why.contains("output token 2") && why.contains("dead end"),
        "{why}"
    );
}
