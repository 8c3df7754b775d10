//! Continuous batching: several requests decoding together, each in its own KV slot
//! ([`crate::model::target::Sequence`]). A request joins with [`Session::start_stream`]
//! (its prompt prefilled alone into a free slot, giving its first token) and then advances
//! one token per [`Session::step_streams`], which runs ONE forward of as many rows as there
//! are streams (`Model::forward_batch`). Streams join and leave between steps; dropping a
//! [`Stream`] gives its KV slot back at once.
//!
//! Greedy tokens come from the GPU argmax; sampled ones from each stream's own seeded
//! sampler over its row's logits. Stop ids, stop strings, the token budget and streaming
//! detokenisation are per stream, as in [`Session::generate`].

use super::{FinishReason, GenerateRequest, Session, StopStrings, TokenEvent, OP};
use crate::error::{Error, Result};
use crate::model::sampling::{Sampler, SamplingParams};
use crate::model::target::{Sequence, Want};
use crate::model::tokenizer::{TextStream, Tokenizer};

/// One request in a batch: its KV slot, sampler, text state and tokens so far.
pub struct Stream {
    seq: Sequence,
    sampler: Sampler,
    text: TextStream,
    stops: StopStrings,
    stop_ids: Vec<u32>,
    tokens: Vec<u32>,
    prompt_tokens: usize,
    max_new_tokens: usize,
    finish: Option<FinishReason>,
}

impl Stream {
    /// Why it ended (None while it still decodes).
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish
    }

    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn prompt_tokens(&self) -> usize {
        self.prompt_tokens
    }

    /// The KV slot it holds.
    pub fn slot(&self) -> usize {
        self.seq.slot()
    }

    /// The text shown so far (cut before a stop string).
    pub fn text(&self) -> &str {
        self.stops.text()
    }

    /// Ends the stream's text: releases what was held back as a possible start of a stop
    /// string that never completed (the caller sends it last).
    pub fn finish_text(&mut self) -> String {
        self.stops.finish()
    }

    /// Takes token `id`: its text piece, and whether the stream ends with it.
    fn accept(&mut self, tokenizer: Option<&Tokenizer>, id: u32) -> Result<TokenEvent> {
        let index = self.tokens.len();
        self.tokens.push(id);
        self.sampler.accept(id);
        let text = match tokenizer {
            Some(t) => self.text.push(t, id)?.map(|piece| self.stops.push(&piece)),
            None => None,
        };
        if self.stop_ids.contains(&id) || self.stops.stopped() {
            self.finish = Some(FinishReason::Stop);
        } else if self.tokens.len() >= self.max_new_tokens {
            self.finish = Some(FinishReason::Length);
        }
        Ok(TokenEvent { index, id, text })
    }
}

impl Session {
    /// Rows one batched step may hold (the model's largest plan).
    pub fn max_batch(&self) -> Result<usize> {
        let o = &self.model()?.options;
        Ok(o.prefill_chunk.max(o.max_verify_rows))
    }

    /// Starts `request` in a free KV slot: checks its budget, prefills its prompt (alone)
    /// and takes the first token. Fails when every slot is held. Speculative requests are
    /// refused here (drafting runs through [`Session::generate`], one request at a time).
    pub async fn start_stream(
        &mut self,
        request: &GenerateRequest,
    ) -> Result<(Stream, TokenEvent)> {
        self.check_gpu_errors()?;
        if request.speculative {
            return Err(Error::invalid(
                OP,
                "a batched stream",
                "plain decoding (speculative requests run through generate)",
                "speculative: true",
            ));
        }
        let prompt = self.prompt_ids(request)?;
        let sampling = SamplingParams {
            temperature: request.temperature,
            top_k: request.top_k,
            top_p: request.top_p,
            seed: request.seed,
            repeat_penalty: request.repeat_penalty,
        };
        let mut sampler = Sampler::new(sampling)?;
        let target = self.target.as_mut().ok_or_else(super::no_model)?;
        super::check_budget(
            prompt.len(),
            request.max_new_tokens,
            target.model.options.max_context,
        )?;
        if request.max_new_tokens == 0 {
            return Err(Error::invalid(
                OP,
                "max new tokens of a stream",
                "at least 1",
                0,
            ));
        }
        let mut seq = target.model.new_sequence()?;
        let want = if sampling.is_greedy() {
            Want::NextToken
        } else {
            Want::LastLogits
        };
        // The model prefills its active sequence: lend it this one, and take it back
        // whatever the forward did.
        target.model.swap_sequence(&mut seq)?;
        let out = target.model.forward(&self.ctx, &prompt, want).await;
        target.model.swap_sequence(&mut seq)?;
        let out = out?;
        let first = if sampling.is_greedy() {
            out.next[0]
        } else {
            sampler.sample(&out.logits)
        };
        let mut stream = Stream {
            seq,
            sampler,
            text: TextStream::new(),
            stops: StopStrings::new(&request.stop),
            stop_ids: target.stop_ids.clone(),
            tokens: Vec::new(),
            prompt_tokens: prompt.len(),
            max_new_tokens: request.max_new_tokens,
            finish: None,
        };
        let event = stream.accept(target.text.tokenizer.as_deref(), first)?;
        self.check_gpu_errors()?;
        Ok((stream, event))
    }

    /// Advances every stream of `streams` (none finished) by one token in ONE forward of
    /// `streams.len()` rows; returns each one's event, in order.
    pub async fn step_streams(&mut self, streams: &mut [&mut Stream]) -> Result<Vec<TokenEvent>> {
        self.check_gpu_errors()?;
        if let Some(i) = streams.iter().position(|s| s.finish.is_some()) {
            return Err(Error::invalid(
                OP,
                format!("stream {i} of a batched step"),
                "one still decoding",
                "a finished stream",
            ));
        }
        let target = self.target.as_mut().ok_or_else(super::no_model)?;
        let vocab = target.model.spec.config.vocab_size;
        let greedy = streams.iter().all(|s| s.sampler.params().is_greedy());
        let want = if greedy {
            Want::AllNext
        } else {
            Want::AllLogits
        };
        let out = {
            let mut rows: Vec<(&mut Sequence, u32)> = streams
                .iter_mut()
                .map(|s| {
                    let last = *s
                        .tokens
                        .last()
                        .expect("a started stream has its first token");
                    (&mut s.seq, last)
                })
                .collect();
            target
                .model
                .forward_batch(&self.ctx, &mut rows, want)
                .await?
        };
        let tokenizer = target.text.tokenizer.as_deref();
        let events = streams
            .iter_mut()
            .enumerate()
            .map(|(i, s)| {
                let id = if s.sampler.params().is_greedy() {
                    out.next[i]
                } else {
                    s.sampler.sample(&out.logits[i * vocab..(i + 1) * vocab])
                };
                s.accept(tokenizer, id)
            })
            .collect::<Result<Vec<_>>>()?;
        self.check_gpu_errors()?;
        Ok(events)
    }
}
