//! `tts-rt voice add|list|show|rm|import|export`: the voice library on disk
//! (`--voices-dir`). `add` makes a voice from a reference clip with a Base
//! checkpoint; the rest read and write the stored records without loading a
//! model.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use tts_actors::{NewVoice, VoiceLibrary};
use tts_voices::interop::{self, ImportTarget};
use tts_voices::{
    talker_size_for_hidden, ModelInfo, Removed, StoreError, VoiceName, VoiceRecord, VoiceStore,
};

use tts_models::config::{ModelKind, TtsConfig};

use super::{load, ModelArg, VoicesDirArg};
use crate::model_path;

#[derive(Args)]
pub(crate) struct VoiceArgs {
    #[command(subcommand)]
    command: VoiceCommand,
}

#[derive(Subcommand)]
enum VoiceCommand {
    /// Make a voice from a reference clip with a Base checkpoint and store it
    /// (without --model: $TTS_RT_MODEL, else Qwen/Qwen3-TTS-12Hz-0.6B-Base).
    Add(AddArgs),
    /// List the stored voices.
    List(ListArgs),
    /// Show one stored voice (`--json`: with its x-vector and codes).
    Show(ShowArgs),
    /// Remove a stored voice.
    Rm(RmArgs),
    /// Bring voices made by other servers into the library: a vllm-omni
    /// `custom_voice_dir` (its manifest and safetensors), or a qwentts.cpp
    /// `.spk` (and `.rvq`) pair.
    Import(ImportArgs),
    /// Write a stored voice in another server's layout.
    Export(ExportArgs),
}

#[derive(Args)]
struct AddArgs {
    /// The voice's name (1-64 of A-Z a-z 0-9 _ . -, starting alphanumeric).
    name: String,
    #[command(flatten)]
    model: ModelArg,
    /// The reference clip: WAV, FLAC, MP3, OGG/Vorbis, OGG/Opus, WebM/Opus or M4A/AAC, any rate,
    /// mono or stereo, 0.5 to 60 s (3 to 15 s of clean speech works best).
    #[arg(long)]
    audio: PathBuf,
    /// What the clip says: makes an in-context (ICL) voice, the official
    /// default. Without it the voice is x-vector only.
    #[arg(long)]
    text: Option<String>,
    /// Keep only the x-vector even when --text is given.
    #[arg(long)]
    x_vector_only: bool,
    /// Free text kept with the voice.
    #[arg(long)]
    description: Option<String>,
    /// Replace a stored voice of the same name.
    #[arg(long)]
    replace: bool,
    #[command(flatten)]
    dir: VoicesDirArg,
}

#[derive(Args)]
struct ListArgs {
    /// One JSON object per voice, one per line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    dir: VoicesDirArg,
}

#[derive(Args)]
struct ShowArgs {
    name: String,
    /// The whole record as JSON, x-vector and reference codes included.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    dir: VoicesDirArg,
}

#[derive(Args)]
struct RmArgs {
    name: String,
    #[command(flatten)]
    dir: VoicesDirArg,
}

#[derive(Args)]
struct ImportArgs {
    /// A vllm-omni custom_voice_dir (with custom_voice_manifest.json), or a
    /// qwentts.cpp `.spk` file (its `.rvq` and `.txt` beside it are used
    /// when present: an ICL voice).
    path: PathBuf,
    /// The name for a qwentts.cpp voice (default: the file stem).
    #[arg(long)]
    name: Option<String>,
    /// Replace stored voices of the same names.
    #[arg(long)]
    replace: bool,
    #[command(flatten)]
    dir: VoicesDirArg,
}

#[derive(Clone, Copy, ValueEnum)]
enum Layout {
    /// vllm-omni's custom_voice_dir: manifest plus one safetensors per voice.
    VllmOmni,
    /// qwentts.cpp: `<name>.spk` (f32 x-vector) and `<name>.rvq` (11-bit codes).
    Qwentts,
}

#[derive(Args)]
struct ExportArgs {
    name: String,
    #[arg(long, value_enum)]
    format: Layout,
    /// Output directory (created).
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    dir: VoicesDirArg,
}

pub(crate) fn voice(a: VoiceArgs) -> Result<()> {
    match a.command {
        VoiceCommand::Add(a) => add(a),
        VoiceCommand::List(a) => list(a),
        VoiceCommand::Show(a) => show(a),
        VoiceCommand::Rm(a) => rm(a),
        VoiceCommand::Import(a) => import(a),
        VoiceCommand::Export(a) => export(a),
    }
}

/// Opens the store, reporting skipped (corrupt) voice files on stderr. No
/// model is loaded, so each voice is held to its own shape (a checkpoint's
/// codec may keep fewer than the released 16 code groups).
fn open_store(dir: &VoicesDirArg) -> Result<VoiceStore> {
    let path = dir.resolve()?;
    let (store, skipped) = VoiceStore::open(&path)
        .with_context(|| format!("opening the voice library {}", path.display()))?;
    report_skipped(&skipped);
    Ok(store)
}

pub(crate) fn report_skipped(skipped: &[tts_voices::SkippedVoice]) {
    for s in skipped {
        eprintln!("skipped voice file {}: {}", s.path.display(), s.reason);
    }
}

/// The checkpoint `voice add` makes the voice with: `--model`, else
/// `$TTS_RT_MODEL`, else the 0.6B Base (only Base checkpoints make voices;
/// the general default, a CustomVoice checkpoint, cannot). One of another
/// family is refused here, before its weights load, and a hub repo id that
/// names another family before it is downloaded, saying what to use.
fn base_checkpoint(explicit: Option<&Path>) -> Result<PathBuf> {
    let advice = format!(
        "only Base checkpoints make voices: give --model {} (or --model 1.7B-Base, or a Base directory)",
        model_path::DEFAULT_BASE_REPO
    );
    if let Some((from, p)) = model_path::model_source(explicit) {
        let id = p
            .to_str()
            .filter(|s| !p.exists() && model_path::is_repo_id(s));
        if let Some(id) = id {
            if let Some(family) = ["CustomVoice", "VoiceDesign"]
                .into_iter()
                .find(|f| id.ends_with(&format!("-{f}")))
            {
                bail!("{from} = {id} is a {family} checkpoint, which cannot make voices; {advice}");
            }
        }
    }
    let dir = model_path::resolve_or(explicit, model_path::DEFAULT_BASE_REPO)?;
    let config = TtsConfig::load(&dir.join("config.json"))
        .with_context(|| format!("loading checkpoint {}", dir.display()))?;
    if config.kind != ModelKind::Base {
        bail!(
            "{} is a {} checkpoint, which cannot make voices (it {}); {advice}",
            dir.display(),
            config.kind.name(),
            config.kind.capability()
        );
    }
    Ok(dir)
}

fn add(mut a: AddArgs) -> Result<()> {
    let dir = base_checkpoint(a.model.model.as_deref())?;
    a.model.model = Some(dir);
    // The encoders only: the LMs' precision does not matter here.
    let model = load(&a.model, super::realtime::Use::File, false)?;
    let dir = a.dir.resolve()?;
    let (library, skipped) = VoiceLibrary::open(model, &dir, None)
        .with_context(|| format!("opening the voice library {}", dir.display()))?;
    report_skipped(&skipped);
    let bytes = std::fs::read(&a.audio)
        .with_context(|| format!("reading the reference clip {}", a.audio.display()))?;
    let source = a
        .audio
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "clip".into());
    // On a terminal, while the encoders run (the checkpoint's download, if
    // any, drew its own line of bytes).
    let progress = super::progress::Progress::stderr("voice add");
    progress.show(&format!("encoding {source} (x-vector, then codes)"));
    let made = library
        .add(
            &NewVoice {
                name: a.name,
                ref_text: a.text,
                x_vector_only: a.x_vector_only,
                description: a.description,
                replace: a.replace,
            },
            &bytes,
            &source,
        )
        .with_context(|| format!("making a voice from {}", a.audio.display()))?;
    progress.finish();
    let r = &made.record;
    let codes = match made.record.ref_frames() {
        0 => String::new(),
        n => format!(", {n} reference frames"),
    };
    println!(
        "voice {:?}: {}{codes}, talker {}; made from {:.2} s in {:.0} ms (x-vector) + {:.0} ms (codes); stored in {}",
        r.name.as_str(),
        r.mode.as_str(),
        r.talker_size,
        made.reference_secs,
        made.timings.x_vector.as_secs_f64() * 1e3,
        made.timings.codes.as_secs_f64() * 1e3,
        library.store().path_of(&r.name).display()
    );
    Ok(())
}

fn list(a: ListArgs) -> Result<()> {
    let path = a.dir.resolve()?;
    let (store, skipped) = VoiceStore::open(&path)
        .with_context(|| format!("opening the voice library {}", path.display()))?;
    report_skipped(&skipped);
    // A voice file that did not load, under a voice's name: listed as
    // corrupt (its reason is on stderr), with how to remove it.
    let corrupt: Vec<String> = skipped
        .iter()
        .filter_map(|s| {
            let stem = s.path.file_stem()?.to_str()?;
            let name = VoiceName::new(stem).ok()?;
            (name.key() == stem && store.get(stem).is_none()).then(|| stem.to_owned())
        })
        .collect();
    let mut voices = store.list();
    voices.sort_by(|x, y| x.name.key().cmp(y.name.key()));
    let mut out = std::io::stdout().lock();
    if a.json {
        for v in &voices {
            writeln!(out, "{}", v.summary_json())?;
        }
        return Ok(());
    }
    if voices.is_empty() && corrupt.is_empty() {
        writeln!(out, "no voices in {}", store.dir().display())?;
        return Ok(());
    }
    for v in &voices {
        writeln!(out, "{}", summary_line(v))?;
    }
    for name in &corrupt {
        writeln!(
            out,
            "{name}  corrupt (its file does not load); remove it with `tts-rt voice rm {name}`"
        )?;
    }
    Ok(())
}

fn summary_line(v: &VoiceRecord) -> String {
    let secs = v
        .provenance
        .source
        .duration_s
        .map_or(String::new(), |d| format!(", {d:.1} s"));
    format!(
        "{}  {}  talker {}{secs}  created {}  from {}",
        v.name.as_str(),
        v.mode.as_str(),
        v.talker_size,
        v.provenance.created,
        v.provenance.source.name
    )
}

fn find(store: &VoiceStore, name: &str) -> Result<std::sync::Arc<VoiceRecord>> {
    match store.get(name) {
        Some(v) => Ok(v),
        None => {
            let known: Vec<String> = store
                .list()
                .iter()
                .map(|v| v.name.as_str().to_string())
                .collect();
            bail!(
                "no voice named {name:?} in {}; stored voices: {}",
                store.dir().display(),
                if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                }
            )
        }
    }
}

fn show(a: ShowArgs) -> Result<()> {
    let store = open_store(&a.dir)?;
    let v = find(&store, &a.name)?;
    if a.json {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", serde_json::to_string_pretty(&v.to_json())?)?;
    } else {
        println!("{}", summary_line(&v));
        if let Some(t) = &v.ref_text {
            println!("  reference text: {t}");
        }
        println!(
            "  x-vector: {} values; reference frames: {}",
            v.x_vector.len(),
            v.ref_frames()
        );
        if let Some(d) = &v.description {
            println!("  description: {d}");
        }
    }
    Ok(())
}

fn rm(a: RmArgs) -> Result<()> {
    let store = open_store(&a.dir)?;
    // A voice whose file does not load is removed all the same.
    match store.remove(&a.name) {
        Ok(Removed::Corrupt { name, path, reason }) => println!(
            "removed voice {:?}: its file {} was corrupt ({reason})",
            name.as_str(),
            path.display()
        ),
        Ok(r) => println!("removed voice {:?}", r.name()),
        Err(StoreError::NotFound { .. }) => {
            find(&store, &a.name)?;
            bail!("no voice named {:?}", a.name);
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

fn target_for(hidden: usize, origin: &Path) -> Result<ImportTarget> {
    let size = talker_size_for_hidden(hidden).with_context(|| {
        format!(
            "{}: an x-vector of {hidden} values fits no released talker (1024: 0.6B, 2048: 1.7B)",
            origin.display()
        )
    })?;
    Ok(ImportTarget {
        talker_size: size.to_string(),
        hidden_size: hidden,
        model: ModelInfo {
            checkpoint: format!("imported from {}", origin.display()),
            fingerprint: String::new(),
        },
    })
}

fn import(a: ImportArgs) -> Result<()> {
    let store = open_store(&a.dir)?;
    let records = if a.path.is_dir() {
        // The manifest names the hidden size of the whole directory.
        let manifest = a.path.join("custom_voice_manifest.json");
        let text = std::fs::read_to_string(&manifest)
            .with_context(|| format!("reading {}", manifest.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{}: not JSON", manifest.display()))?;
        let hidden = v["hidden_size"]
            .as_u64()
            .with_context(|| format!("{}: no hidden_size", manifest.display()))?
            as usize;
        let (records, skipped) = interop::import_vllm_omni(&a.path, &target_for(hidden, &a.path)?)?;
        report_skipped(&skipped);
        records
    } else {
        let spk_len = std::fs::metadata(&a.path)
            .with_context(|| format!("reading {}", a.path.display()))?
            .len() as usize;
        let rvq = Some(a.path.with_extension("rvq")).filter(|p| p.is_file());
        let text = std::fs::read_to_string(a.path.with_extension("txt")).ok();
        let name = match &a.name {
            Some(n) => n.clone(),
            None => a
                .path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .context("the .spk path has no file name")?,
        };
        let target = target_for(spk_len / 4, &a.path)?;
        vec![interop::import_qwentts(
            VoiceName::new(&name)?,
            &a.path,
            rvq.as_deref(),
            text.as_deref().map(str::trim),
            &target,
        )?]
    };
    for r in records {
        let r = store.insert(r, a.replace)?;
        println!("imported {}", summary_line(&r));
    }
    Ok(())
}

fn export(a: ExportArgs) -> Result<()> {
    let store = open_store(&a.dir)?;
    let v = find(&store, &a.name)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    match a.format {
        Layout::VllmOmni => {
            interop::export_vllm_omni(&a.out, &[&v], &v.provenance.model.checkpoint)?;
        }
        Layout::Qwentts => {
            interop::export_qwentts(&a.out, &v)?;
        }
    }
    println!(
        "exported voice {:?} to {}",
        v.name.as_str(),
        a.out.display()
    );
    Ok(())
}
