//! The model handle: [`Qwen3Tts`] opens a checkpoint directory in the hub
//! layout with the configs, tokenizer, both LMs and code2wav, each stage at
//! the precision [`LoadOptions`] asks for. Requests go in through
//! [`Qwen3Tts::build_prompt`] ([`crate::prompt`]) and come out as the two
//! stage states ([`Qwen3Tts::sessions`]) or, offline, a
//! [`crate::generator::FrameGenerator`] ([`Qwen3Tts::start`], defined
//! beside the generator).

use std::path::{Path, PathBuf};

use crate::checkpoint::TensorStore;
use crate::code_predictor::{CodePredictor, PredictorModels, PredictorState};
use crate::codec::{Code2Wav, DecoderState, PrimedDecoders};
use crate::codec_encoder::CodecEncoder;
use crate::config::{GenerationConfig, TtsConfig};
use crate::error::{ModelError, Result};
use crate::prompt::{self, Prompt, PromptParts};
use crate::quant::{Code2WavPrecision, Precision, PrecisionPlan, StagePlan};
use crate::request::{CloneReference, GenOptions, Request, VoiceClone};
use crate::speaker_encoder::SpeakerEncoder;
use crate::talker::{PrefixCache, Talker, TalkerModels, TalkerState};
use crate::tokenizer::TextTokenizer;
use crate::wcache::{WeightsCache, WeightsCacheEvent};

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
    pub weights_cache: Vec<WeightsCacheEvent>,
    /// ICL clones' decoder states primed with their reference codes.
    pub primed_decoders: PrimedDecoders,
    /// The talker KV of prompts' shared leading rows (a voice's codec
    /// prefix and reference transcript), reused by later requests.
    pub prefix_cache: PrefixCache,
    /// Base checkpoints: the two encoders that turn a reference clip into a
    /// [`VoiceClone`] ([`Self::clone_voice`]); None for the other families.
    pub encoders: Option<CloneEncoders>,
}

/// A Base checkpoint's reference-clip encoders.
pub struct CloneEncoders {
    /// The x-vector (ECAPA-TDNN over the log-mel spectrogram).
    pub speaker: SpeakerEncoder,
    /// The reference codes (the speech tokenizer's encoder).
    pub codec: CodecEncoder,
}

/// What [`Qwen3Tts::clone_voice`] spent, per encoder.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CloneTimings {
    pub x_vector: std::time::Duration,
    /// Zero for an x-vector-only clone (no codes are made).
    pub codes: std::time::Duration,
}

/// How [`Qwen3Tts::load_with`] prepares the weights: the precision plan
/// (each LM stage's precision per tensor class, [`StagePlan`], and
/// code2wav's convolutions; [`Self::plan`]) and where converted LM weights
/// are cached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    pub talker: StagePlan,
    pub code_predictor: StagePlan,
    pub code2wav: Code2WavPrecision,
    /// Directory of the converted-weights cache ([`crate::wcache`]): int8
    /// and q4 stages are written there once and memory-mapped on later
    /// loads. None (the default): convert in memory at every load. Set it
    /// with [`Self::with_weights_cache`].
    pub weights_cache: Option<&'static Path>,
}

impl LoadOptions {
    /// Both LMs' decoder linears at `p` (heads stored), code2wav at f32.
    pub fn uniform(p: Precision) -> Self {
        Self::from_plan(PrecisionPlan::uniform(p))
    }

    /// `plan`, without a weights cache.
    pub fn from_plan(plan: PrecisionPlan) -> Self {
        LoadOptions {
            talker: plan.talker,
            code_predictor: plan.code_predictor,
            code2wav: plan.code2wav,
            weights_cache: None,
        }
    }

    /// The precision plan these options load.
    pub fn plan(&self) -> PrecisionPlan {
        PrecisionPlan {
            talker: self.talker,
            code_predictor: self.code_predictor,
            code2wav: self.code2wav,
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

    /// The `--precision` spelling ([`PrecisionPlan::name`]):
    /// `TALKER,CODE_PREDICTOR,CODE2WAV` when both stages are uniform.
    pub fn name(&self) -> String {
        self.plan().name()
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
        let store = TensorStore::open_dir(dir, "model")?;
        let cache = WeightsCache::new(options.weights_cache);
        let talker = Talker::load_with(&store, &config.talker, options.talker, &cache)?;
        let code_predictor =
            CodePredictor::load_with(&store, &config.talker, options.code_predictor, &cache)?;
        let speaker_encoder = match &config.speaker_encoder {
            Some(cfg) => Some(SpeakerEncoder::load(&store, cfg)?),
            None => {
                // Only Base uses a speaker encoder (upstream builds none for
                // the other families); fine-tunes may keep its tensors.
                store.ignore_prefix("speaker_encoder.");
                None
            }
        };
        store.finish()?;
        let weights_cache = cache.take_events();
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
        let encoders = match speaker_encoder {
            Some(speaker) => {
                let codec = CodecEncoder::load(&dir.join("speech_tokenizer"))?;
                if codec.num_quantizers() != config.talker.num_code_groups {
                    return Err(ModelError::Config {
                        path: dir.join("speech_tokenizer/config.json"),
                        message: format!(
                            "the encoder keeps {} quantizers (encoder_valid_num_quantizers) but the talker reads {} code groups",
                            codec.num_quantizers(),
                            config.talker.num_code_groups
                        ),
                    });
                }
                Some(CloneEncoders { speaker, codec })
            }
            None => None,
        };
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
            primed_decoders: PrimedDecoders::default(),
            prefix_cache: PrefixCache::default(),
            encoders,
        })
    }

    /// Makes a cloned voice from a reference clip (24 kHz mono samples), as
    /// the official `create_voice_clone_prompt`: the x-vector always and,
    /// unless `x_vector_only`, the reference codes with `ref_text` (the
    /// clip's transcript, required then). Base checkpoints only.
    pub fn clone_voice(
        &self,
        samples_24k: &[f32],
        ref_text: Option<&str>,
        x_vector_only: bool,
    ) -> Result<(VoiceClone, CloneTimings)> {
        let Some(enc) = &self.encoders else {
            return Err(ModelError::WrongFamily {
                family: self.config.kind,
                problem: "a voice was to be cloned from a reference clip".into(),
            });
        };
        let text = ref_text.map(str::trim).filter(|t| !t.is_empty());
        if !x_vector_only && text.is_none() {
            return Err(ModelError::InvalidVoice(
                "in-context cloning needs the transcript of the reference clip (ref_text); give it, or clone from the x-vector only".into(),
            ));
        }
        let mut timings = CloneTimings::default();
        let t = std::time::Instant::now();
        let x_vector = tts_kernels::on_pool(|| enc.speaker.embed(samples_24k))?;
        timings.x_vector = t.elapsed();
        let reference = match (x_vector_only, ref_text) {
            (false, Some(text)) => {
                let t = std::time::Instant::now();
                let codes = tts_kernels::on_pool(|| enc.codec.encode(samples_24k))?;
                timings.codes = t.elapsed();
                Some(CloneReference {
                    text: text.to_string(),
                    frames: codes.frames,
                    codes: codes.codes,
                })
            }
            _ => None,
        };
        Ok((
            VoiceClone {
                x_vector,
                reference,
            },
            timings,
        ))
    }

    /// Codes per frame of the reference codes [`Self::clone_voice`] makes:
    /// what the codec encoder keeps (`encoder_valid_num_quantizers`; the
    /// load checked it equals the talker's code groups). None where the
    /// checkpoint makes no voices (not Base).
    pub fn reference_code_groups(&self) -> Option<usize> {
        self.encoders.as_ref().map(|e| e.codec.num_quantizers())
    }

    /// Speaker names (lower-case, sorted).
    pub fn speakers(&self) -> Vec<String> {
        self.config.talker.speaker_names()
    }

    /// Language names (lower-case, sorted), plus "auto".
    pub fn languages(&self) -> Vec<String> {
        self.config.talker.language_names()
    }

    pub fn default_options(&self) -> GenOptions {
        GenOptions::from_config(&self.generation)
    }

    /// Checks a request and builds its prompt (the official
    /// `Qwen3TTSForConditionalGeneration.generate` prefill; see
    /// [`crate::prompt`]).
    pub fn build_prompt(&self, req: &Request) -> Result<Prompt> {
        prompt::build(
            &PromptParts {
                config: &self.config,
                tokenizer: &self.tokenizer,
                talker: &self.talker,
                code_predictor: &self.code_predictor,
            },
            req,
        )
    }

    /// Checks a request and returns its two stage states, for runtimes that
    /// run the talker and the code predictor on different threads.
    pub fn sessions(&self, req: &Request) -> Result<(TalkerState, PredictorState)> {
        let prompt = self.build_prompt(req)?;
        let decoder_start = self.decoder_start(req)?;
        Ok((
            TalkerState::new(&self.talker, &self.config.talker, prompt, &req.options),
            PredictorState::new(&self.code_predictor, &req.options)
                .with_decoder_start(decoder_start),
        ))
    }

    /// True when `voice` needs no decoder priming: x-vector only, or its
    /// reference is already in [`Self::primed_decoders`].
    pub fn is_primed(&self, voice: &VoiceClone) -> bool {
        voice
            .reference
            .as_ref()
            .is_none_or(|r| self.primed_decoders.contains(&r.codes))
    }

    /// Primes (and keeps) the decoder state of an ICL voice, so its requests
    /// start decoding at once; nothing to do for x-vector-only voices.
    pub fn prime_decoder(&self, voice: &VoiceClone) -> Result<()> {
        if let Some(r) = &voice.reference {
            self.primed_decoders
                .get_or_prime(&self.code2wav, &r.codes, r.frames)?;
        }
        Ok(())
    }

    /// The state a request's decoder starts from: for an ICL clone, primed
    /// with its reference codes ([`Self::primed_decoders`]); otherwise None
    /// (a fresh decoder).
    pub fn decoder_start(&self, req: &Request) -> Result<Option<DecoderState>> {
        match req.voice_clone.as_ref().and_then(|v| v.reference.as_ref()) {
            Some(r) => Ok(Some(self.primed_decoders.get_or_prime(
                &self.code2wav,
                &r.codes,
                r.frames,
            )?)),
            None => Ok(None),
        }
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

    /// The waveform of a finished utterance of `frames` generated frames, as
    /// the official API returns it.
    ///
    /// - Without `streaming`: the official 300/25-frame chunked decode; for
    ///   an ICL clone, of the reference codes followed by the generated ones,
    ///   then cut where the reference ends ([`icl_cut`], upstream's float
    ///   formula, which sometimes keeps one reference sample).
    /// - With `streaming`: one streaming decoder over the generated frames;
    ///   for an ICL clone, primed with the reference codes. Equal to the
    ///   official output while reference + generated frames stay within one
    ///   300-frame chunk, except that the cut is always at the frame
    ///   boundary.
    pub fn decode_utterance(
        &self,
        req: &Request,
        codes: &[u32],
        frames: usize,
        streaming: bool,
    ) -> Result<Vec<f32>> {
        let reference = req.voice_clone.as_ref().and_then(|v| v.reference.as_ref());
        let Some(r) = reference else {
            return self.code2wav.decode_on_pool(codes, frames, streaming);
        };
        if streaming {
            let mut state =
                self.primed_decoders
                    .get_or_prime(&self.code2wav, &r.codes, r.frames)?;
            return tts_kernels::on_pool(|| {
                let mut out = Vec::new();
                self.code2wav
                    .decode_step(&mut state, codes, frames, &mut out)?;
                Ok(out)
            });
        }
        let all = [&r.codes[..], codes].concat();
        let total = r.frames + frames;
        let wav = self.code2wav.decode_on_pool(&all, total, false)?;
        let cut = icl_cut(r.frames, total, wav.len());
        Ok(wav[cut..].to_vec())
    }

    /// KV-cache bytes a request of `prompt_rows + frames` positions holds.
    pub fn session_kv_bytes(&self, positions: usize) -> usize {
        self.talker.lm.kv_bytes_per_position() * positions
    }
}

/// Where upstream's `generate_voice_clone` cuts the reference out of the
/// decode of `ref ++ gen`: `int(ref_len / max(total_len, 1) * wav_len)` in
/// f64, which lands one sample before the frame boundary for some length
/// pairs (e.g. 1 reference frame and 48 generated).
pub fn icl_cut(ref_frames: usize, total_frames: usize, wav_len: usize) -> usize {
    ((ref_frames as f64 / total_frames.max(1) as f64) * wav_len as f64) as usize
}

impl TalkerModels for Qwen3Tts {
    fn talker(&self) -> &Talker {
        &self.talker
    }
    fn add_predicted_embeddings(&self, codes: &[u32], out: &mut [f32]) {
        for (i, &code) in codes.iter().enumerate() {
            self.code_predictor.add_embedding(i, code, out);
        }
    }
    fn prefix_cache(&self) -> Option<&PrefixCache> {
        Some(&self.prefix_cache)
    }
}

impl PredictorModels for Qwen3Tts {
    fn code_predictor(&self) -> &CodePredictor {
        &self.code_predictor
    }
}

#[cfg(test)]
mod tests {
    use super::icl_cut;

    #[test]
    fn icl_cut_reproduces_upstreams_float_formula() {
        // Exact at most boundaries ...
        assert_eq!(icl_cut(10, 50, 50 * 1920), 10 * 1920);
        assert_eq!(icl_cut(0, 5, 5 * 1920), 0);
        // ... one sample early where the f64 quotient rounds down.
        assert_eq!(icl_cut(1, 49, 49 * 1920), 1919);
        assert_eq!(icl_cut(3, 0, 0), 0);
    }
}
