//! Prompt construction and the per-frame generation loop (CustomVoice).
//!
//! [`Qwen3Tts::load`] opens a checkpoint directory in the hub layout;
//! [`Qwen3Tts::start`] builds the official prompt for a [`Request`] and
//! returns a [`FrameGenerator`], which yields one frame of `num_code_groups`
//! codes per [`FrameGenerator::next_frame`] call — the unit the streaming
//! runtime schedules.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checkpoint::TensorStore;
use crate::code_predictor::{CodePredictor, PredictScratch};
use crate::codec::Code2Wav;
use crate::config::{GenerationConfig, ModelKind, TtsConfig};
use crate::error::{ModelError, Result};
use crate::lm::{BatchScratch, KvCache};
use crate::quant::{Code2WavPrecision, Precision};
use crate::sampling::{pick, Rng, SamplerConfig, TalkerRules};
use crate::talker::Talker;
use crate::tokenizer::{template, TextTokenizer};

/// A loaded checkpoint: configs, tokenizer, the two LMs and code2wav.
pub struct Qwen3Tts {
    pub dir: PathBuf,
    pub config: TtsConfig,
    pub generation: GenerationConfig,
    pub tokenizer: TextTokenizer,
    pub talker: Talker,
    pub code_predictor: CodePredictor,
    pub code2wav: Code2Wav,
    /// The precision each LM was loaded at (provenance for reports).
    pub precision: LoadOptions,
    /// What the weights cache did for each converted LM stage (empty
    /// without a cache directory or when nothing was converted).
    pub weights_cache: Vec<crate::wcache::WeightsCacheEvent>,
}

/// Generation options (the official `generate` keyword arguments).
#[derive(Clone, Debug, PartialEq)]
pub struct GenOptions {
    pub talker: SamplerConfig,
    pub code_predictor: SamplerConfig,
    pub repetition_penalty: f32,
    /// Frames at most (the official `max_new_tokens` minus one).
    pub max_frames: usize,
    pub seed: u64,
    /// Never stop at the codec EOS token: generate exactly `max_frames`
    /// frames. Default off; benchmarks on random checkpoints use it for
    /// fixed-length utterances (`tts-rt bench --frames N`).
    pub ignore_eos: bool,
}

impl GenOptions {
    /// The checkpoint's `generation_config.json` defaults.
    pub fn from_config(g: &GenerationConfig) -> Self {
        GenOptions {
            talker: SamplerConfig {
                do_sample: g.do_sample,
                temperature: g.temperature,
                top_k: g.top_k,
                top_p: g.top_p,
            },
            code_predictor: SamplerConfig {
                do_sample: g.subtalker_do_sample,
                temperature: g.subtalker_temperature,
                top_k: g.subtalker_top_k,
                top_p: g.subtalker_top_p,
            },
            repetition_penalty: g.repetition_penalty,
            max_frames: g.max_new_tokens.saturating_sub(1),
            seed: 0,
            ignore_eos: false,
        }
    }

    /// Greedy for both LMs (parity tests).
    pub fn greedy(mut self) -> Self {
        self.talker.do_sample = false;
        self.code_predictor.do_sample = false;
        self
    }
}

/// One synthesis request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub text: String,
    /// Required for CustomVoice (case-insensitive).
    pub speaker: Option<String>,
    /// A `codec_language_id` key or "auto" (case-insensitive).
    pub language: String,
    /// Style instruction; ignored for 0.6B checkpoints, like the official code.
    pub instruct: Option<String>,
    /// Feed the text alongside the frames (official `non_streaming_mode=False`)
    /// instead of all up front (the `generate_custom_voice` default).
    pub text_streaming: bool,
    pub options: GenOptions,
}

/// The embeddings the talker is fed: prefill rows, per-frame trailing text
/// rows (then `tts_pad` forever).
#[derive(Clone, Debug)]
pub struct Prompt {
    pub hidden: usize,
    pub prefill: Vec<f32>,
    pub trailing: Vec<f32>,
    pub tts_pad: Vec<f32>,
    /// Token ids of the templated text and instruction (diagnostics, tests).
    pub input_ids: Vec<u32>,
    pub instruct_ids: Option<Vec<u32>>,
}

impl Prompt {
    pub fn prefill_rows(&self) -> usize {
        self.prefill.len() / self.hidden
    }
    pub fn trailing_rows(&self) -> usize {
        self.trailing.len() / self.hidden
    }
}

/// Largest request the runtime accepts: frames and text tokens. Beyond the
/// talker's position table the model is outside what it was trained on.
pub const MAX_TEXT_TOKENS: usize = 8192;

/// How [`Qwen3Tts::load_with`] prepares the weights: the precision of each
/// LM stage and of code2wav's convolutions, and where converted LM weights
/// are cached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    pub talker: Precision,
    pub code_predictor: Precision,
    pub code2wav: Code2WavPrecision,
    /// Directory of the converted-weights cache ([`crate::wcache`]): int8
    /// and q4 stages are written there once and memory-mapped on later
    /// loads. None (the default): convert in memory at every load. Set it
    /// with [`Self::with_weights_cache`].
    pub weights_cache: Option<&'static Path>,
}

impl LoadOptions {
    /// Both LMs at `p`, code2wav at f32.
    pub fn uniform(p: Precision) -> Self {
        LoadOptions {
            talker: p,
            code_predictor: p,
            code2wav: Code2WavPrecision::F32,
            weights_cache: None,
        }
    }

    /// These options with the converted-weights cache in `dir` (None: off).
    /// The path is kept for the life of the process (leaked once per call,
    /// so the options stay `Copy`): call it once per configuration, not per
    /// load in a loop.
    pub fn with_weights_cache(mut self, dir: Option<&Path>) -> Self {
        self.weights_cache = dir.map(|d| &*Box::leak(d.to_path_buf().into_boxed_path()));
        self
    }

    /// `TALKER,CODE_PREDICTOR,CODE2WAV` (the `--precision` spelling).
    pub fn name(&self) -> String {
        format!("{},{},{}", self.talker, self.code_predictor, self.code2wav)
    }
}

impl Qwen3Tts {
    /// Loads a checkpoint with its stored weights ([`LoadOptions::default`]).
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_with(dir, LoadOptions::default())
    }

    /// Loads a checkpoint, converting each LM stage to its precision.
    pub fn load_with(dir: &Path, options: LoadOptions) -> Result<Self> {
        let config = TtsConfig::load(&dir.join("config.json"))?;
        if config.kind != ModelKind::CustomVoice {
            return Err(ModelError::Config {
                path: dir.join("config.json"),
                message: format!(
                    "tts_model_type {:?} is not supported yet; use a CustomVoice checkpoint",
                    config.kind
                ),
            });
        }
        let generation = GenerationConfig::load(&dir.join("generation_config.json"))?;
        let tokenizer = TextTokenizer::load(dir)?;
        if tokenizer.vocab_size() > config.talker.text_vocab_size {
            return Err(ModelError::Config {
                path: dir.join("vocab.json"),
                message: format!(
                    "tokenizer has ids up to {} but talker_config.text_vocab_size is {}",
                    tokenizer.vocab_size() - 1,
                    config.talker.text_vocab_size
                ),
            });
        }
        let mut store = TensorStore::open_dir(dir, "model")?;
        store.set_weights_cache(options.weights_cache);
        let talker = Talker::load_with(&store, &config.talker, options.talker)?;
        let code_predictor =
            CodePredictor::load_with(&store, &config.talker, options.code_predictor)?;
        // The speaker encoder (Base checkpoints) is not used by CustomVoice.
        store.ignore_prefix("speaker_encoder.");
        store.finish()?;
        let weights_cache = store.take_weights_cache_events();
        let code2wav = Code2Wav::load_with(&dir.join("speech_tokenizer"), options.code2wav)?;
        if code2wav.num_quantizers() != config.talker.num_code_groups {
            return Err(ModelError::Config {
                path: dir.join("speech_tokenizer/config.json"),
                message: format!(
                    "decoder has {} quantizers but the talker produces {} code groups",
                    code2wav.num_quantizers(),
                    config.talker.num_code_groups
                ),
            });
        }
        Ok(Qwen3Tts {
            dir: dir.to_path_buf(),
            config,
            generation,
            tokenizer,
            talker,
            code_predictor,
            code2wav,
            precision: options,
            weights_cache,
        })
    }

    /// Speaker names (lower-case, sorted).
    pub fn speakers(&self) -> Vec<String> {
        self.config.talker.speakers.keys().cloned().collect()
    }

    /// Language names (lower-case, sorted), plus "auto".
    pub fn languages(&self) -> Vec<String> {
        let mut v: Vec<String> = vec!["auto".into()];
        v.extend(self.config.talker.languages.keys().cloned());
        v
    }

    pub fn default_options(&self) -> GenOptions {
        GenOptions::from_config(&self.generation)
    }

    /// Checks a request and builds its prompt (the official
    /// `Qwen3TTSForConditionalGeneration.generate` prefill).
    pub fn build_prompt(&self, req: &Request) -> Result<Prompt> {
        let cfg = &self.config;
        let t = &cfg.talker;
        let h = self.talker.hidden_size();
        if req.text.trim().is_empty() {
            return Err(ModelError::InvalidRequest("text is empty".into()));
        }
        req.options
            .talker
            .validate("talker")
            .map_err(ModelError::InvalidRequest)?;
        req.options
            .code_predictor
            .validate("code predictor")
            .map_err(ModelError::InvalidRequest)?;
        if !(req.options.repetition_penalty.is_finite() && req.options.repetition_penalty > 0.0) {
            return Err(ModelError::InvalidRequest(format!(
                "repetition penalty must be a positive number, got {}",
                req.options.repetition_penalty
            )));
        }
        let speaker = match &req.speaker {
            None => None,
            Some(s) if s.is_empty() => None,
            Some(s) => Some(t.speakers.get(&s.to_lowercase()).ok_or_else(|| {
                ModelError::UnknownSpeaker {
                    name: s.clone(),
                    valid: self.speakers(),
                }
            })?),
        };
        if speaker.is_none() && cfg.kind == ModelKind::CustomVoice {
            return Err(ModelError::UnknownSpeaker {
                name: String::new(),
                valid: self.speakers(),
            });
        }
        let lang = req.language.to_lowercase();
        let mut language_id = if lang == "auto" {
            None
        } else {
            Some(
                *t.languages
                    .get(&lang)
                    .ok_or_else(|| ModelError::UnknownLanguage {
                        name: req.language.clone(),
                        valid: self.languages(),
                    })?,
            )
        };
        if lang == "chinese" || lang == "auto" {
            if let Some(d) = speaker.and_then(|s| s.dialect.as_ref()) {
                language_id = t.languages.get(d).copied();
            }
        }

        let input_ids = self.tokenizer.encode(&template::assistant(&req.text))?;
        if input_ids.len() < 9 {
            return Err(ModelError::Tokenizer(format!(
                "templated text tokenized to {} ids; the chat template alone needs 8 — is tokenizer_config.json missing <|im_start|>/<|im_end|>?",
                input_ids.len()
            )));
        }
        if input_ids.len() > MAX_TEXT_TOKENS {
            return Err(ModelError::InvalidRequest(format!(
                "text is {} tokens; at most {MAX_TEXT_TOKENS} are accepted per request (split it)",
                input_ids.len()
            )));
        }
        let instruct_ids = match &req.instruct {
            Some(s) if !s.is_empty() && cfg.supports_instruct() => {
                Some(self.tokenizer.encode(&template::instruct(s))?)
            }
            _ => None,
        };
        for &id in input_ids.iter().chain(instruct_ids.iter().flatten()) {
            if id as usize >= self.talker.text_vocab_size() {
                return Err(ModelError::Tokenizer(format!(
                    "token id {id} is outside text_vocab_size"
                )));
            }
        }

        let specials = self.talker.project_text(&[
            cfg.tts_bos_token_id,
            cfg.tts_eos_token_id,
            cfg.tts_pad_token_id,
        ]);
        let (tts_bos, rest) = specials.split_at(h);
        let (tts_eos, tts_pad) = rest.split_at(h);

        // Codec prefix K: think/nothink tags, language, speaker, pad, bos.
        let c = &t.codec;
        let mut codec: Vec<u32> = match language_id {
            None => vec![c.nothink, c.think_bos, c.think_eos],
            Some(l) => vec![c.think, c.think_bos, l, c.think_eos],
        };
        if let Some(s) = speaker {
            codec.push(s.id);
        }
        codec.extend([c.pad, c.bos]);
        let kl = codec.len();

        let mut prefill = Vec::new();
        if let Some(ids) = &instruct_ids {
            prefill.extend(self.talker.project_text(ids));
        }
        prefill.extend(self.talker.project_text(&input_ids[..3]));
        // (L-2) x tts_pad + tts_bos, each plus C(K[i]) for i < L-1.
        for (i, &cid) in codec[..kl - 1].iter().enumerate() {
            let mut row = if i < kl - 2 {
                tts_pad.to_vec()
            } else {
                tts_bos.to_vec()
            };
            self.talker.add_codec_embedding(cid, &mut row);
            prefill.extend(row);
        }
        let text = &input_ids[3..input_ids.len() - 5];
        let trailing = if !req.text_streaming {
            // All text up front: P(text) ++ P(tts_eos), each + C(pad); then
            // P(tts_pad) + C(bos).
            let mut rows = self.talker.project_text(text);
            rows.extend_from_slice(tts_eos);
            for row in rows.chunks_exact_mut(h) {
                self.talker.add_codec_embedding(c.pad, row);
            }
            prefill.extend(rows);
            let mut last = tts_pad.to_vec();
            self.talker.add_codec_embedding(c.bos, &mut last);
            prefill.extend(last);
            tts_pad.to_vec()
        } else {
            // First text token with C(bos); the rest trail one per frame.
            let mut first = self.talker.project_text(&text[..1]);
            self.talker.add_codec_embedding(codec[kl - 1], &mut first);
            prefill.extend(first);
            let mut rows = self.talker.project_text(&text[1..]);
            rows.extend_from_slice(tts_eos);
            rows
        };
        Ok(Prompt {
            hidden: h,
            prefill,
            trailing,
            tts_pad: tts_pad.to_vec(),
            input_ids,
            instruct_ids,
        })
    }

    /// Starts generating a request.
    pub fn start(self: &Arc<Self>, req: &Request) -> Result<FrameGenerator> {
        let prompt = self.build_prompt(req)?;
        Ok(FrameGenerator::new(self.clone(), prompt, &req.options))
    }

    /// Checks a request and returns its two stage states, for runtimes that
    /// run the talker and the code predictor on different threads.
    pub fn sessions(&self, req: &Request) -> Result<(TalkerSession, PredictorSession)> {
        let prompt = self.build_prompt(req)?;
        Ok((
            TalkerSession::new(self, prompt, &req.options),
            PredictorSession::new(self, &req.options),
        ))
    }

    /// Teacher forcing: runs the talker over `prompt` and feeds back the given
    /// `codes` (`[frames, num_code_groups]`) instead of its own choices,
    /// returning the raw talker logits of the first `talker_steps` steps
    /// (`[talker_steps, vocab]`; step 0 is the prefill, step t+1 follows frame
    /// t) and the raw code-predictor logits of every predicted code
    /// (`[frames, G-1, cp_vocab]`). Parity and precision gates compare these.
    pub fn teacher_force(
        &self,
        prompt: &Prompt,
        codes: &[u32],
        talker_steps: usize,
    ) -> (Vec<f32>, Vec<f32>) {
        let groups = self.config.talker.num_code_groups;
        let h = self.talker.hidden_size();
        let mut cache = self.talker.new_cache();
        let (mut hidden, mut talker) =
            self.talker
                .forward(&prompt.prefill, prompt.prefill_rows(), &mut cache);
        let mut cp = Vec::new();
        let mut cp_cache = self.code_predictor.new_cache();
        for (t, frame) in codes.chunks_exact(groups).enumerate() {
            let mut x = vec![0f32; h];
            self.talker.add_codec_embedding(frame[0], &mut x);
            let mut out = vec![0u32; groups - 1];
            self.code_predictor
                .predict(&hidden, &x, &mut cp_cache, &mut out, |i, l| {
                    cp.extend_from_slice(l);
                    frame[i + 1]
                });
            if t + 1 >= talker_steps {
                continue;
            }
            for (i, &c) in frame[1..].iter().enumerate() {
                self.code_predictor.add_embedding(i, c, &mut x);
            }
            let add = if t < prompt.trailing_rows() {
                &prompt.trailing[t * h..(t + 1) * h]
            } else {
                &prompt.tts_pad[..]
            };
            x.iter_mut().zip(add).for_each(|(a, b)| *a += b);
            let (hd, logits) = self.talker.forward(&x, 1, &mut cache);
            hidden = hd;
            talker.extend(logits);
        }
        (talker, cp)
    }

    /// KV-cache bytes a request of `prompt_rows + frames` positions holds.
    pub fn session_kv_bytes(&self, positions: usize) -> usize {
        self.talker.lm.kv_bytes_per_position() * positions
    }
}

/// Talker-side state of one request: prompt, KV cache, codebook-0 history
/// and sampler. Stage-separable from [`PredictorSession`], so the runtime can
/// run the two LMs on different threads and batch each across sessions
/// ([`TalkerSession::step_batch`], [`PredictorSession::predict_batch`]);
/// [`FrameGenerator`] composes them for single-threaded use.
pub struct TalkerSession {
    prompt: Prompt,
    sampler: SamplerConfig,
    rules: TalkerRules,
    rng: Rng,
    cache: KvCache,
    history: Vec<u32>,
    /// Frames fed back so far (the index of the next trailing text row).
    fed: usize,
    seen: Vec<bool>,
    scratch: Vec<f32>,
}

/// A chosen codebook-0 token with the talker hidden state that produced it:
/// the hand-off from the talker to the code predictor.
#[derive(Clone, Debug)]
pub struct TalkerOutput {
    pub hidden: Vec<f32>,
    pub c0: u32,
}

/// Code-predictor-side state of one request (its scratch KV cache is reset
/// every frame; the RNG stream persists).
pub struct PredictorSession {
    sampler: SamplerConfig,
    rng: Rng,
    cache: KvCache,
    scratch: Vec<f32>,
    work: PredictScratch,
}

/// Frames of talker KV reserved up front (~20 s of audio at 12.5 Hz); longer
/// requests grow the cache as they go.
const TALKER_KV_RESERVE_FRAMES: usize = 256;

/// Seed offset of the code predictor's RNG stream (independent of the
/// talker's, so the two stages can run apart and stay reproducible).
const PREDICTOR_STREAM: u64 = 0x5EED_C0DE_0000_0001;

/// What a [`FrameGenerator`] observer sees.
pub enum Observed<'a> {
    /// Raw talker logits of one step (before any processor).
    Talker(&'a [f32]),
    /// Raw code-predictor logits for predicted codebook `i` of the current frame.
    CodePredictor(usize, &'a [f32]),
}

type Observer = Option<Box<dyn FnMut(Observed<'_>) + Send>>;

impl TalkerSession {
    pub fn new(model: &Qwen3Tts, prompt: Prompt, options: &GenOptions) -> Self {
        let t = &model.config.talker;
        let mut rules =
            TalkerRules::official(t.lm.vocab_size, t.codec.eos, options.repetition_penalty);
        if options.ignore_eos {
            // The min-new-tokens rule bans EOS; banning it forever leaves
            // `max_frames` as the only stop.
            rules.min_new_tokens = usize::MAX;
        }
        TalkerSession {
            rules,
            sampler: options.talker,
            rng: Rng::new(options.seed),
            // Room for the prompt and the first frames: growing a cache of
            // ~230 KB per position (0.6B) by doubling copies the history.
            cache: model.talker.new_cache_with_capacity(
                prompt.prefill_rows() + options.max_frames.min(TALKER_KV_RESERVE_FRAMES) + 1,
            ),
            prompt,
            history: Vec::new(),
            fed: 0,
            seen: Vec::new(),
            scratch: Vec::new(),
        }
    }

    pub fn prompt(&self) -> &Prompt {
        &self.prompt
    }

    /// KV positions held.
    pub fn positions(&self) -> usize {
        self.cache.len()
    }

    /// Bytes of KV cache held (capacity).
    pub fn cache_bytes(&self) -> usize {
        self.cache.bytes()
    }

    fn choose(
        &mut self,
        hidden: Vec<f32>,
        mut logits: Vec<f32>,
        observer: &mut Observer,
    ) -> TalkerOutput {
        if let Some(obs) = observer.as_mut() {
            obs(Observed::Talker(&logits));
        }
        self.rules.apply(&mut logits, &self.history, &mut self.seen);
        let c0 = pick(&mut logits, &self.sampler, &mut self.rng, &mut self.scratch);
        self.history.push(c0);
        TalkerOutput { hidden, c0 }
    }

    /// Runs the prompt and picks the first codebook-0 token.
    pub fn prefill(&mut self, model: &Qwen3Tts) -> TalkerOutput {
        self.prefill_observed(model, &mut None)
    }

    fn prefill_observed(&mut self, model: &Qwen3Tts, observer: &mut Observer) -> TalkerOutput {
        assert!(self.cache.is_empty(), "prefill runs once per request");
        let rows = self.prompt.prefill_rows();
        let (h, logits) = model
            .talker
            .forward(&self.prompt.prefill, rows, &mut self.cache);
        self.choose(h, logits, observer)
    }

    /// Feeds back a finished frame (`num_code_groups` codes) and picks the
    /// next codebook-0 token.
    pub fn step(&mut self, model: &Qwen3Tts, frame: &[u32]) -> TalkerOutput {
        self.step_observed(model, frame, &mut None)
    }

    fn step_observed(
        &mut self,
        model: &Qwen3Tts,
        frame: &[u32],
        observer: &mut Observer,
    ) -> TalkerOutput {
        let mut x = Vec::new();
        self.feedback_row(model, frame, &mut x);
        let (hidden, logits) = model.talker.forward(&x, 1, &mut self.cache);
        self.choose(hidden, logits, observer)
    }

    /// Appends the talker input row of a fed-back frame to `x` and counts
    /// the frame as fed: `C(c0) + sum_i E_i(c_i)` plus the next trailing
    /// text row (or `tts_pad`).
    fn feedback_row(&mut self, model: &Qwen3Tts, frame: &[u32], x: &mut Vec<f32>) {
        let (talker, cp) = (&model.talker, &model.code_predictor);
        let h = talker.hidden_size();
        let at = x.len();
        x.resize(at + h, 0.0);
        let row = &mut x[at..];
        talker.add_codec_embedding(frame[0], row);
        for (i, &code) in frame[1..].iter().enumerate() {
            cp.add_embedding(i, code, row);
        }
        let t = self.fed;
        let add = if t < self.prompt.trailing_rows() {
            &self.prompt.trailing[t * h..(t + 1) * h]
        } else {
            &self.prompt.tts_pad[..]
        };
        row.iter_mut().zip(add).for_each(|(a, b)| *a += b);
        self.fed += 1;
    }

    /// One talker step for several sessions in one decoder pass
    /// ([`Talker::forward_batch`]): each session runs its prompt
    /// ([`TalkerWork::Prefill`], a session joining) or feeds back its last
    /// frame ([`TalkerWork::Feedback`]), with its own KV cache and
    /// positions. Each session then picks its codebook-0 token with its own
    /// rules, sampler and RNG, so every output equals what
    /// [`Self::prefill`] / [`Self::step`] give that session alone. Outputs
    /// are in `batch` order.
    ///
    /// Panics if a session is prefilled twice.
    pub fn step_batch(
        model: &Qwen3Tts,
        batch: &mut [(&mut TalkerSession, TalkerWork<'_>)],
        scratch: &mut BatchScratch,
    ) -> Vec<TalkerOutput> {
        let h = model.talker.hidden_size();
        let mut x = Vec::new();
        let mut lens = Vec::with_capacity(batch.len());
        for (s, work) in batch.iter_mut() {
            match work {
                TalkerWork::Prefill => {
                    assert!(s.cache.is_empty(), "prefill runs once per request");
                    x.extend_from_slice(&s.prompt.prefill);
                    lens.push(s.prompt.prefill_rows());
                }
                TalkerWork::Feedback(frame) => {
                    s.feedback_row(model, frame, &mut x);
                    lens.push(1);
                }
            }
        }
        let (hidden, logits) = {
            let mut caches: Vec<&mut KvCache> =
                batch.iter_mut().map(|(s, _)| &mut s.cache).collect();
            model.talker.forward_batch(&x, &lens, &mut caches, scratch)
        };
        let vocab = model.talker.vocab_size();
        batch
            .iter_mut()
            .enumerate()
            .map(|(i, (s, _))| {
                s.choose(
                    hidden[i * h..(i + 1) * h].to_vec(),
                    logits[i * vocab..(i + 1) * vocab].to_vec(),
                    &mut None,
                )
            })
            .collect()
    }
}

/// A session's part in [`TalkerSession::step_batch`].
#[derive(Clone, Copy, Debug)]
pub enum TalkerWork<'a> {
    /// Run the prompt and pick the first codebook-0 token.
    Prefill,
    /// Feed back this finished frame (`num_code_groups` codes) and pick the
    /// next codebook-0 token.
    Feedback(&'a [u32]),
}

impl PredictorSession {
    pub fn new(model: &Qwen3Tts, options: &GenOptions) -> Self {
        PredictorSession {
            sampler: options.code_predictor,
            rng: Rng::new(options.seed ^ PREDICTOR_STREAM),
            cache: model.code_predictor.new_cache(),
            scratch: Vec::new(),
            work: PredictScratch::default(),
        }
    }

    /// Fills codebooks 1..G-1 for a talker output; returns the whole frame.
    pub fn predict(&mut self, model: &Qwen3Tts, t: &TalkerOutput) -> Vec<u32> {
        self.predict_observed(model, t, &mut None)
    }

    fn predict_observed(
        &mut self,
        model: &Qwen3Tts,
        t: &TalkerOutput,
        observer: &mut Observer,
    ) -> Vec<u32> {
        let (talker, cp) = (&model.talker, &model.code_predictor);
        let mut c0_emb = vec![0f32; talker.hidden_size()];
        talker.add_codec_embedding(t.c0, &mut c0_emb);
        let mut frame = vec![0u32; cp.num_predicted() + 1];
        frame[0] = t.c0;
        let (rng, scratch, sampler) = (&mut self.rng, &mut self.scratch, &self.sampler);
        cp.predict_with(
            &t.hidden,
            &c0_emb,
            &mut self.cache,
            &mut self.work,
            &mut frame[1..],
            |i, l| {
                if let Some(obs) = observer.as_mut() {
                    obs(Observed::CodePredictor(i, l));
                }
                pick(l, sampler, rng, scratch)
            },
        );
        frame
    }

    /// Fills codebooks 1..G-1 for several sessions' talker outputs in one
    /// batched code-predictor frame ([`CodePredictor::predict_batch`]);
    /// returns each whole frame, in `batch` order. Each session samples with
    /// its own options and RNG stream, so its frame equals what
    /// [`Self::predict`] gives it alone.
    pub fn predict_batch(
        model: &Qwen3Tts,
        batch: &mut [(&mut PredictorSession, &TalkerOutput)],
        scratch: &mut PredictScratch,
    ) -> Vec<Vec<u32>> {
        let (talker, cp) = (&model.talker, &model.code_predictor);
        let (h, steps) = (talker.hidden_size(), cp.num_predicted());
        let b = batch.len();
        let mut hidden = Vec::with_capacity(b * h);
        let mut c0_emb = vec![0f32; b * h];
        for ((_, t), e) in batch.iter().zip(c0_emb.chunks_exact_mut(h)) {
            hidden.extend_from_slice(&t.hidden);
            talker.add_codec_embedding(t.c0, e);
        }
        let mut codes = vec![0u32; b * steps];
        let mut caches = Vec::with_capacity(b);
        let mut pickers = Vec::with_capacity(b);
        for (s, _) in batch.iter_mut() {
            let PredictorSession {
                sampler,
                rng,
                cache,
                scratch,
                ..
            } = &mut **s;
            caches.push(cache);
            pickers.push((&*sampler, rng, scratch));
        }
        cp.predict_batch(
            &hidden,
            &c0_emb,
            &mut caches,
            scratch,
            &mut codes,
            |i, _, l| {
                let (sampler, rng, scratch) = &mut pickers[i];
                pick(l, sampler, rng, scratch)
            },
        );
        batch
            .iter()
            .zip(codes.chunks_exact(steps))
            .map(|((_, t), c)| {
                let mut frame = Vec::with_capacity(steps + 1);
                frame.push(t.c0);
                frame.extend_from_slice(c);
                frame
            })
            .collect()
    }
}

/// Time spent in each LM stage of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GenStats {
    /// Talker prefill over the prompt (including the first codebook-0 pick).
    pub prefill: Duration,
    /// Talker decode steps (one per frame after the first).
    pub talker: Duration,
    /// Code predictor (G-1 steps per frame).
    pub code_predictor: Duration,
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The talker produced the codec EOS token.
    Eos,
    /// `max_frames` frames were produced.
    MaxFrames,
}

/// Both stages of one request on the calling thread: one frame per
/// [`FrameGenerator::next_frame`].
pub struct FrameGenerator {
    model: Arc<Qwen3Tts>,
    talker: TalkerSession,
    predictor: PredictorSession,
    max_frames: usize,
    eos: u32,
    /// The talker output awaiting the code predictor.
    pending: Option<TalkerOutput>,
    started: bool,
    frames: usize,
    finished: Option<StopReason>,
    /// Wall time spent per stage so far.
    pub stats: GenStats,
    /// Raw logits observer (tests): talker step logits and predictor logits.
    pub observer: Observer,
}

impl FrameGenerator {
    fn new(model: Arc<Qwen3Tts>, prompt: Prompt, options: &GenOptions) -> Self {
        FrameGenerator {
            talker: TalkerSession::new(&model, prompt, options),
            predictor: PredictorSession::new(&model, options),
            max_frames: options.max_frames,
            eos: model.config.talker.codec.eos,
            model,
            pending: None,
            started: false,
            frames: 0,
            finished: None,
            stats: GenStats::default(),
            observer: None,
        }
    }

    pub fn prompt(&self) -> &Prompt {
        self.talker.prompt()
    }

    pub fn frames(&self) -> usize {
        self.frames
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        self.finished
    }

    pub fn num_code_groups(&self) -> usize {
        self.model.config.talker.num_code_groups
    }

    /// Talker KV positions held.
    pub fn positions(&self) -> usize {
        self.talker.positions()
    }

    /// Produces the next frame (`num_code_groups` codes), or `None` once the
    /// talker emitted EOS or `max_frames` is reached.
    /// The step runs on a thread of the current rayon pool
    /// ([`tts_kernels::on_pool`]).
    pub fn next_frame(&mut self) -> Option<Vec<u32>> {
        tts_kernels::on_pool(|| self.next_frame_here())
    }

    fn next_frame_here(&mut self) -> Option<Vec<u32>> {
        if self.finished.is_some() {
            return None;
        }
        if self.frames >= self.max_frames {
            self.finished = Some(StopReason::MaxFrames);
            return None;
        }
        let model = self.model.clone();
        if !self.started {
            self.started = true;
            let t = Instant::now();
            self.pending = Some(self.talker.prefill_observed(&model, &mut self.observer));
            self.stats.prefill += t.elapsed();
        }
        let out = self.pending.take().expect("a pending codebook-0 token");
        if out.c0 == self.eos {
            self.finished = Some(StopReason::Eos);
            return None;
        }
        let t = Instant::now();
        let frame = self
            .predictor
            .predict_observed(&model, &out, &mut self.observer);
        self.stats.code_predictor += t.elapsed();
        self.frames += 1;
        // The official loop samples one more codebook-0 token after the last
        // frame it keeps; skip that talker step when the cap is reached.
        if self.frames < self.max_frames {
            let t = Instant::now();
            self.pending = Some(
                self.talker
                    .step_observed(&model, &frame, &mut self.observer),
            );
            self.stats.talker += t.elapsed();
        }
        Some(frame)
    }

    /// Runs to the end, returning all frames flattened `[frames, groups]`.
    pub fn run_to_end(&mut self) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some(f) = self.next_frame() {
            out.extend(f);
        }
        out
    }
}
