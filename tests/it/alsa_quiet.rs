//! alsa-lib's own diagnostics stay off the terminal (issue 15, item 11):
//! with no usable sound card, `tts-rt devices` and `speak --play` print our
//! error, which says what to do, and not the eight "ALSA lib …" lines
//! alsa-lib writes to stderr by default. The child gets an ALSA config whose
//! default PCM is a card that does not exist (what a machine without a
//! sound card has), so no sound card is needed and none is touched.

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn config() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("alsa_quiet");
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("asound.conf");
    std::fs::write(
        &conf,
        "pcm.!default {\n  type hw\n  card 31\n}\nctl.!default {\n  type hw\n  card 31\n}\n\
         pcm.quiet_missing {\n  type hw\n  card 30\n  hint { show on description \"absent card\" }\n}\n",
    )
    .unwrap();
    conf
}

fn run(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tts-rt"))
        .args(args)
        .env_remove("TTS_RT_MODEL")
        .env("ALSA_CONFIG_PATH", config())
        .stdin(Stdio::null())
        .output()
        .expect("run tts-rt");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    (o.status.code(), err)
}

fn assert_only_ours(what: &str, err: &str) {
    let noise: Vec<&str> = err.lines().filter(|l| l.starts_with("ALSA lib")).collect();
    assert!(
        noise.is_empty(),
        "{what}: alsa-lib printed {noise:#?}\nstderr:\n{err}"
    );
}

#[test]
fn alsa_noise_is_silenced_before_the_no_audio_device_error() {
    let (_, err) = run(&["devices"]);
    assert_only_ours("devices", &err);
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny-a");
    for extra in [&[][..], &["--device", "quiet_missing"][..]] {
        let mut args = vec![
            "speak",
            "Hello.",
            "--model",
            fixture,
            "--max-frames",
            "4",
            "--play",
        ];
        args.extend_from_slice(extra);
        let (code, err) = run(&args);
        assert_eq!(code, Some(1), "{extra:?}: {err}");
        assert!(
            err.contains("error: --play: cannot open"),
            "{extra:?}: {err}"
        );
        assert_only_ours(&format!("speak --play {extra:?}"), &err);
    }
}
