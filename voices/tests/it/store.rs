//! The voice store: persistence, corrupt entries, atomic writes, limits,
//! concurrent writers and cache invalidation.

use crate::common;

use std::fs;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, SystemTime};

use tts_voices::{
    format, CodecShape, RecordError, RefCodes, Removed, StoreError, StoreOptions, VoiceStore,
    VoiceWatcher,
};

use common::{codes_of_groups, icl, xvec};

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn open_creates_the_directory_and_voices_survive_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nested").join("voices");
    let (store, skipped) = VoiceStore::open(&dir).unwrap();
    assert!(dir.is_dir() && store.is_empty() && skipped.is_empty());
    let alice = icl("Alice", 1024, 9);
    let bob = xvec("bob", 1024, 2);
    store.insert(alice.clone(), false).unwrap();
    store.insert(bob.clone(), false).unwrap();
    // Atomic writes leave exactly the voice files: no temp or lock files.
    assert_eq!(names(&dir), ["alice.safetensors", "bob.safetensors"]);
    drop(store);

    let (store, skipped) = VoiceStore::open(&dir).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    let listed: Vec<_> = store.list().iter().map(|r| r.name.to_string()).collect();
    assert_eq!(listed, ["Alice", "bob"]);
    assert_eq!(*store.get("alice").unwrap(), alice);
    assert_eq!(*store.get("ALICE").unwrap(), alice);
    assert_eq!(*store.get("Bob").unwrap(), bob);
    assert!(store.get("carol").is_none());
    assert!(store.get("../alice").is_none());
}

#[test]
fn corrupt_entries_are_named_and_skipped_and_the_rest_load() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (store, _) = VoiceStore::open(dir).unwrap();
    for name in ["good", "truncated", "flipped"] {
        store.insert(xvec(name, 64, 1), false).unwrap();
    }
    drop(store);
    let truncated = dir.join("truncated.safetensors");
    let len = fs::metadata(&truncated).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&truncated)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let flipped = dir.join("flipped.safetensors");
    let mut bytes = fs::read(&flipped).unwrap();
    bytes[8] ^= 0xFF;
    fs::write(&flipped, bytes).unwrap();
    fs::write(dir.join("garbage.safetensors"), [0xAB; 300]).unwrap();
    fs::write(dir.join("empty.safetensors"), []).unwrap();
    fs::copy(
        dir.join("good.safetensors"),
        dir.join("renamed.safetensors"),
    )
    .unwrap();
    fs::copy(dir.join("good.safetensors"), dir.join("Upper.safetensors")).unwrap();
    fs::write(dir.join("bad..name.safetensors"), [0; 10]).unwrap();
    // Not voices at all: passed over silently.
    fs::write(dir.join("notes.txt"), "hello").unwrap();
    fs::write(dir.join("good.lock"), "pid 1").unwrap();
    fs::write(dir.join(".tmp-good.safetensors-1-0"), [1, 2, 3]).unwrap();
    fs::create_dir(dir.join("sub.safetensors")).unwrap();

    let (store, skipped) = VoiceStore::open(dir).unwrap();
    assert_eq!(store.list().len(), 1);
    assert!(store.get("good").is_some());
    let reason = |file: &str| {
        skipped
            .iter()
            .find(|s| s.path == dir.join(file))
            .unwrap_or_else(|| panic!("{file} not reported: {skipped:?}"))
            .reason
            .clone()
    };
    assert!(reason("truncated.safetensors").contains("truncated"));
    assert!(reason("flipped.safetensors").contains("not a safetensors"));
    assert!(reason("garbage.safetensors").contains("not a safetensors"));
    assert!(reason("empty.safetensors").contains("truncated"));
    assert!(reason("renamed.safetensors").contains("belongs in good.safetensors"));
    assert!(reason("Upper.safetensors").contains("rename it to upper.safetensors"));
    assert!(reason("bad..name.safetensors").contains("not a voice name"));
    assert_eq!(skipped.len(), 7, "{skipped:?}");
    // Skipped files are left for the user to inspect.
    assert!(truncated.exists() && flipped.exists());
}

#[test]
fn names_are_unique_regardless_of_case_and_replace_is_explicit() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = VoiceStore::open(tmp.path()).unwrap();
    store.insert(xvec("Alice", 32, 1), false).unwrap();
    let err = store.insert(xvec("ALICE", 32, 2), false).unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists { ref name } if name == "ALICE"),
        "{err}"
    );
    assert_eq!(
        store.get("alice").unwrap().x_vector,
        common::x_vector(32, 1)
    );
    let replaced = store.insert(xvec("ALICE", 32, 2), true).unwrap();
    assert_eq!(replaced.name.as_str(), "ALICE");
    assert_eq!(
        store.get("alice").unwrap().x_vector,
        common::x_vector(32, 2)
    );
    assert_eq!(names(tmp.path()), ["alice.safetensors"]);
    drop(store);
    let (store, _) = VoiceStore::open(tmp.path()).unwrap();
    assert_eq!(store.get("Alice").unwrap().name.as_str(), "ALICE");
}

#[test]
fn remove_deletes_the_file_and_readers_keep_their_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = VoiceStore::open(tmp.path()).unwrap();
    store.insert(icl("Alice", 32, 3), false).unwrap();
    let held = store.get("alice").unwrap();
    let removed = store.remove("ALICE").unwrap();
    assert_eq!(removed.record(), Some(&held));
    assert_eq!(held.ref_frames(), 3);
    assert!(store.get("alice").is_none());
    assert!(names(tmp.path()).is_empty());
    assert!(matches!(
        store.remove("alice"),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(store.remove("../alice"), Err(StoreError::Name(_))));
    drop(store);
    let (store, _) = VoiceStore::open(tmp.path()).unwrap();
    assert!(store.is_empty());
}

#[test]
fn max_voices_bounds_new_voices_not_replacements() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        max_voices: 2,
        ..StoreOptions::default()
    };
    let (store, _) = VoiceStore::open_with(tmp.path(), opts.clone()).unwrap();
    store.insert(xvec("a", 8, 1), false).unwrap();
    store.insert(xvec("b", 8, 1), false).unwrap();
    let err = store.insert(xvec("c", 8, 1), false).unwrap_err();
    assert!(matches!(err, StoreError::Full { max: 2 }), "{err}");
    store.insert(xvec("b", 8, 2), true).unwrap();
    store.remove("a").unwrap();
    store.insert(xvec("c", 8, 1), false).unwrap();
    // A directory holding more than the bound (written by a store with a
    // larger one) loads the first voices by name and names the rest.
    drop(store);
    let (wide, _) = VoiceStore::open(tmp.path()).unwrap();
    wide.insert(xvec("d", 8, 1), false).unwrap();
    drop(wide);
    fs::copy(
        tmp.path().join("b.safetensors"),
        tmp.path().join("a.safetensors"),
    )
    .unwrap();
    let (store, skipped) = VoiceStore::open_with(tmp.path(), opts).unwrap();
    let loaded: Vec<_> = store.list().iter().map(|r| r.name.to_string()).collect();
    assert_eq!(loaded, ["b", "c"]);
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped[0].reason.contains("belongs in b.safetensors"));
    assert!(skipped[1].path.ends_with("d.safetensors"));
    assert!(skipped[1].reason.contains("maximum of 2"));
}

/// Threads released together insert one name: exactly one wins; the others
/// are refused with `Busy` (while the winner writes) or `AlreadyExists`
/// (after it finished); the file holds the winner's voice, whole. Repeated
/// over fresh names until `Busy` has been seen, since a fast file system can
/// finish a write before another thread starts.
#[test]
fn concurrent_inserts_of_one_name_one_wins_the_rest_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = VoiceStore::open(tmp.path()).unwrap();
    let store = Arc::new(store);
    let n = 8;
    let mut saw_busy = false;
    for round in 0..50 {
        let name = format!("same{round}");
        let barrier = Arc::new(Barrier::new(n));
        let handles: Vec<_> = (0..n as u32)
            .map(|i| {
                let (store, barrier, name) =
                    (Arc::clone(&store), Arc::clone(&barrier), name.clone());
                std::thread::spawn(move || {
                    let mut record = icl(&name, 2048, 200);
                    record.x_vector = common::x_vector(2048, i);
                    barrier.wait();
                    (i, store.insert(record, false))
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let winners: Vec<u32> = results
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(winners.len(), 1, "{results:?}");
        for (_, r) in &results {
            match r {
                Ok(_) => {}
                Err(StoreError::Busy { .. }) => saw_busy = true,
                Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => panic!("unexpected refusal: {e}"),
            }
        }
        let (reopened, skipped) = VoiceStore::open(tmp.path()).unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(
            reopened.get(&name).unwrap().x_vector,
            common::x_vector(2048, winners[0])
        );
        if saw_busy && round >= 2 {
            break;
        }
    }
    assert!(saw_busy, "no concurrent writer was ever refused as Busy");
    assert!(names(tmp.path())
        .iter()
        .all(|f| f.ends_with(".safetensors")));
}

#[test]
fn concurrent_new_voices_never_exceed_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        max_voices: 5,
        ..StoreOptions::default()
    };
    let (store, _) = VoiceStore::open_with(tmp.path(), opts).unwrap();
    let store = Arc::new(store);
    let barrier = Arc::new(Barrier::new(12));
    let handles: Vec<_> = (0..12)
        .map(|i| {
            let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                store.insert(xvec(&format!("v{i}"), 256, i), false)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok, 5);
    assert!(results
        .iter()
        .all(|r| r.is_ok() || matches!(r, Err(StoreError::Full { max: 5 }))));
    assert_eq!(store.len(), 5);
    assert_eq!(names(tmp.path()).len(), 5);
}

/// A name's lock across processes is an advisory lock on `<key>.lock`
/// (here held through another open file, which conflicts as another
/// process's would): while it is held the name is busy; once its holder is
/// gone (the kernel drops the lock of a killed process) the file left
/// behind blocks nothing, and the next writer removes it.
#[test]
fn a_name_locked_by_another_writer_is_busy_and_a_dead_writers_lock_is_not() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = VoiceStore::open(tmp.path()).unwrap();
    let lock = tmp.path().join("alice.lock");
    let held = fs::File::create(&lock).unwrap();
    held.try_lock().unwrap();
    let err = store.insert(xvec("Alice", 8, 1), false).unwrap_err();
    assert!(matches!(err, StoreError::Busy { .. }), "{err}");
    assert!(
        err.to_string().contains("\"Alice\" is being written"),
        "{err}"
    );
    assert!(matches!(
        store.remove("alice"),
        Err(StoreError::Busy { .. })
    ));
    // Other names are unaffected.
    store.insert(xvec("bob", 8, 1), false).unwrap();
    // The holder dies: its lock goes, its file stays.
    drop(held);
    assert!(lock.exists());
    store.insert(xvec("Alice", 8, 1), false).unwrap();
    assert!(!lock.exists());
    assert_eq!(names(tmp.path()), ["alice.safetensors", "bob.safetensors"]);

    // An old lock file no writer holds is removed by a rescan; a held
    // one, however old, is not.
    let (free, busy) = (tmp.path().join("carol.lock"), tmp.path().join("dave.lock"));
    fs::write(&free, "pid 1").unwrap();
    let held = fs::File::create(&busy).unwrap();
    held.try_lock().unwrap();
    let old = SystemTime::now() - Duration::from_secs(3600);
    for f in [&free, &busy] {
        fs::File::options()
            .write(true)
            .open(f)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    assert!(store.reload().unwrap().is_empty());
    assert!(!free.exists() && busy.exists());
    assert!(matches!(
        store.insert(xvec("dave", 8, 1), false),
        Err(StoreError::Busy { .. })
    ));
}

#[test]
fn interrupted_writes_leave_temp_files_that_open_ignores_then_cleans() {
    let tmp = tempfile::tempdir().unwrap();
    let fresh = tmp.path().join(".tmp-alice.safetensors-7-0");
    let stale = tmp.path().join(".tmp-bob.safetensors-7-1");
    fs::write(&fresh, [1; 10]).unwrap();
    fs::write(&stale, [1; 10]).unwrap();
    let old = SystemTime::now() - Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let (store, skipped) = VoiceStore::open(tmp.path()).unwrap();
    assert!(store.is_empty() && skipped.is_empty());
    assert!(fresh.exists(), "a temp file may belong to a live writer");
    assert!(!stale.exists());
    // A crash between writing the new bytes and the rename: the old voice
    // is what the directory holds, whole.
    let old_alice = xvec("alice", 16, 1);
    store.insert(old_alice.clone(), false).unwrap();
    let torn = format::to_bytes(&xvec("alice", 16, 2)).unwrap();
    fs::write(&fresh, &torn[..torn.len() / 2]).unwrap();
    drop(store);
    let (store, skipped) = VoiceStore::open(tmp.path()).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(*store.get("alice").unwrap(), old_alice);
}

/// Records the voices a store reports as replaced or removed.
#[derive(Default)]
struct Changes(std::sync::Mutex<Vec<String>>);

impl VoiceWatcher for Changes {
    fn voice_changed(&self, key: &str) {
        self.0.lock().unwrap().push(key.to_string());
    }
}

#[test]
fn replacing_or_removing_a_voice_tells_its_watchers() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = VoiceStore::open(tmp.path()).unwrap();
    let changes = Arc::new(Changes::default());
    store.watch(&changes);
    store.insert(icl("Alice", 32, 2), false).unwrap();
    store.insert(icl("bob", 32, 2), false).unwrap();
    // (A new name is reported too: a watcher may hold state from a voice
    // of that name removed earlier.)
    changes.0.lock().unwrap().clear();
    store.insert(icl("ALICE", 32, 4), true).unwrap();
    store.remove("bob").unwrap();
    assert_eq!(*changes.0.lock().unwrap(), ["alice", "bob"]);
    // A dropped watcher is simply no longer told.
    drop(changes);
    store.remove("alice").unwrap();
}

/// Sets `path`'s modification time (a file's or a directory's).
fn set_mtime(path: &Path, t: SystemTime) {
    fs::File::open(path).unwrap().set_modified(t).unwrap();
}

/// Two stores on one directory stand for two processes: what one writes,
/// replaces or removes is what the other's next read answers, with no
/// reload, and the other's watchers hear of it. An unchanged directory is
/// not listed again: a file changed in place (no store writes so) is seen
/// only when the directory changes or on `reload`.
#[test]
fn a_voice_another_store_writes_is_seen_by_the_next_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (a, _) = VoiceStore::open(dir).unwrap();
    let (b, _) = VoiceStore::open(dir).unwrap();
    let changes = Arc::new(Changes::default());
    b.watch(&changes);
    a.insert(xvec("alice", 8, 1), false).unwrap();
    assert_eq!(b.get("ALICE").unwrap().x_vector, common::x_vector(8, 1));
    assert_eq!(b.len(), 1);
    // The file exists, so b refuses to overwrite it without replace.
    assert!(matches!(
        b.insert(xvec("alice", 8, 2), false),
        Err(StoreError::AlreadyExists { .. })
    ));
    a.insert(xvec("alice", 8, 2), true).unwrap();
    assert_eq!(b.get("alice").unwrap().x_vector, common::x_vector(8, 2));
    a.remove("alice").unwrap();
    assert!(b.get("alice").is_none() && b.list().is_empty());
    assert!(matches!(
        b.remove("alice"),
        Err(StoreError::NotFound { .. })
    ));
    b.insert(xvec("alice", 8, 3), false).unwrap();
    assert_eq!(a.get("alice").unwrap().x_vector, common::x_vector(8, 3));
    assert!(changes.0.lock().unwrap().iter().all(|k| k == "alice"));
    assert!(changes.0.lock().unwrap().len() >= 3);

    // A settled directory (its time well in the past) is trusted: a file
    // changed in place under the same directory time is not read again...
    let old = SystemTime::now() - Duration::from_secs(3600);
    set_mtime(dir, old);
    a.refresh().unwrap();
    b.refresh().unwrap();
    let path = dir.join("alice.safetensors");
    let len = fs::metadata(&path).unwrap().len();
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    set_mtime(dir, old);
    assert_eq!(b.get("alice").unwrap().x_vector, common::x_vector(8, 3));
    // ...until a reload, or any change to the directory.
    let skipped = b.reload().unwrap();
    assert!(b.get("alice").is_none());
    assert!(skipped[0].reason.contains("truncated"), "{skipped:?}");
    assert!(a.get("alice").is_some(), "a has not looked since");
    b.insert(xvec("bob", 8, 1), false).unwrap();
    assert!(a.get("bob").is_some() && a.get("alice").is_none());
    assert_eq!(a.skipped().len(), 1, "{:?}", a.skipped());
}

#[test]
fn the_store_is_shareable_across_threads() {
    fn check<T: Send + Sync>() {}
    check::<VoiceStore>();
    check::<StoreError>();
}

/// Issue 31: a voice whose file does not load (truncated, not safetensors,
/// bad JSON, a version this build does not read, another voice's file) was
/// skipped at open and then could not be removed by its name: `remove`
/// said there was no such voice. It removes the file, saying it was
/// corrupt and why; a name with no file is still `NotFound`.
#[test]
fn voice_rm_removes_a_corrupt_voice_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (store, _) = VoiceStore::open(dir).unwrap();
    for name in ["good", "truncated", "version", "other"] {
        store.insert(xvec(name, 64, 1), false).unwrap();
    }
    drop(store);
    let truncated = dir.join("truncated.safetensors");
    let len = fs::metadata(&truncated).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&truncated)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let mut bytes = fs::read(dir.join("version.safetensors")).unwrap();
    let at = bytes
        .windows(b"\"version\":\"".len())
        .position(|w| w == b"\"version\":\"")
        .expect("a version in the metadata")
        + b"\"version\":\"".len();
    bytes[at] = b'9';
    fs::write(dir.join("version.safetensors"), bytes).unwrap();
    let mut json = 20u64.to_le_bytes().to_vec();
    json.extend_from_slice(b"{\"not\": json at all}");
    fs::write(dir.join("badjson.safetensors"), json).unwrap();
    fs::write(dir.join("garbage.safetensors"), [0xAB; 300]).unwrap();
    fs::copy(dir.join("good.safetensors"), dir.join("copied.safetensors")).unwrap();
    fs::remove_file(dir.join("other.safetensors")).unwrap();

    let (store, skipped) = VoiceStore::open(dir).unwrap();
    assert_eq!(skipped.len(), 5, "{skipped:?}");
    for (name, says) in [
        ("Truncated", "truncated"),
        ("version", "version"),
        ("badjson", "not a safetensors"),
        ("garbage", "not a safetensors"),
        ("copied", "belongs in good.safetensors"),
    ] {
        let removed = store
            .remove(name)
            .unwrap_or_else(|e| panic!("removing {name}: {e}"));
        assert_eq!(removed.name(), name);
        assert!(removed.record().is_none(), "{name}: {removed:?}");
        let reason = removed.corrupt_reason().unwrap_or_default();
        assert!(reason.contains(says), "{name}: {reason}");
        assert!(!dir
            .join(format!("{}.safetensors", name.to_lowercase()))
            .exists());
    }
    assert!(matches!(
        store.remove("other"),
        Err(StoreError::NotFound { .. })
    ));
    assert!(store.remove("good").unwrap().record().is_some());
    assert!(names(dir).is_empty(), "{:?}", names(dir));
}

/// A Base checkpoint whose encoder keeps 8 code groups (not the released 16)
/// stores voices with `ref_code` `[T, 8]`; a store opened without a model
/// (the CLI's `voice list|show|rm|export`) checked them against the
/// released 16 and skipped them as corrupt. Without a model each voice is
/// held to its own shape; a store opened for a model still holds every
/// voice to that model's codec, and a shape no codec makes is still refused
/// with its reason.
#[test]
fn voices_of_8_code_groups_are_not_corrupt_without_a_model() {
    let tmp = tempfile::tempdir().unwrap();
    let with_groups = |name: &str, groups: usize| {
        let mut r = icl(name, 16, 3);
        r.ref_codes = Some(codes_of_groups(groups, 3));
        r
    };
    let eight = with_groups("eight", 8);
    let sixteen = with_groups("sixteen", 16);
    let (store, skipped) = VoiceStore::open(tmp.path()).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    store.insert(eight.clone(), false).unwrap();
    store.insert(sixteen.clone(), false).unwrap();
    // Shapes no Qwen3-TTS codec makes: written as files (the record
    // constructors leave the codec to the holder), refused on insert.
    let mut past = with_groups("past", 8);
    past.ref_codes = Some(RefCodes::new(8, vec![2048; 8]).unwrap());
    let wide = with_groups("wide", 33);
    for bad in [&past, &wide] {
        let path = tmp.path().join(format!("{}.safetensors", bad.name.key()));
        fs::write(path, format::to_bytes(bad).unwrap()).unwrap();
    }
    assert!(matches!(
        store.insert(past.clone(), true),
        Err(StoreError::Record(RecordError::CodeOutOfRange {
            code: 2048,
            ..
        }))
    ));
    assert!(matches!(
        store.insert(wide.clone(), true),
        Err(StoreError::Record(RecordError::TooManyGroups {
            groups: 33
        }))
    ));
    drop(store);

    let (store, skipped) = VoiceStore::open(tmp.path()).unwrap();
    assert_eq!(*store.get("eight").unwrap(), eight);
    assert_eq!(*store.get("sixteen").unwrap(), sixteen);
    let reasons: Vec<(String, &str)> = skipped
        .iter()
        .map(|s| {
            let file = s.path.file_name().unwrap().to_string_lossy().into_owned();
            (file, s.reason.as_str())
        })
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert_eq!(reasons[0].0, "past.safetensors");
    assert!(reasons[0].1.contains("2048") && reasons[0].1.contains("codebook"));
    assert_eq!(reasons[1].0, "wide.safetensors");
    assert!(reasons[1].1.contains("[3, 33]") && reasons[1].1.contains("1..=32"));
    assert!(matches!(store.remove("eight").unwrap(), Removed::Voice(r) if *r == eight));
    assert!(store.remove("wide").unwrap().corrupt_reason().is_some());
    store.insert(eight.clone(), false).unwrap();
    drop(store);

    // Opened for a model, the store checks its codec exactly: the released
    // one skips the 8-group voice, naming both widths; an 8-group one loads
    // it and skips the 16-group voice.
    let for_codec = |groups: usize| StoreOptions {
        codec: Some(CodecShape {
            groups,
            ..CodecShape::default()
        }),
        ..StoreOptions::default()
    };
    let (released, skipped) = VoiceStore::open_with(tmp.path(), for_codec(16)).unwrap();
    assert!(released.get("eight").is_none() && released.get("sixteen").is_some());
    let eight_skipped = skipped
        .iter()
        .find(|s| s.path.ends_with("eight.safetensors"))
        .unwrap();
    assert!(
        eight_skipped.reason.contains("[3, 8]") && eight_skipped.reason.contains("[T, 16]"),
        "{}",
        eight_skipped.reason
    );
    let (trimmed, _) = VoiceStore::open_with(tmp.path(), for_codec(8)).unwrap();
    assert_eq!(*trimmed.get("eight").unwrap(), eight);
    assert!(trimmed.get("sixteen").is_none());
}

/// Real processes on one directory: this test binary run again as a
/// writer ([`child_writer`], selected with `--exact` and told what to do
/// through [`CHILD_JOB`]).
mod processes {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Command, Stdio};
    use std::time::Instant;

    /// Set in a child: `<job> <dir> <start file> <rounds> <seed>`.
    const CHILD_JOB: &str = "TTS_VOICES_STORE_CHILD_JOB";
    /// How many processes race in each test.
    const WRITERS: u32 = 3;

    /// A voice of `seed` big enough that writing it takes a while (a
    /// ~0.5 MB file), so that writers overlap.
    fn big(name: &str, seed: u32) -> tts_voices::VoiceRecord {
        let mut r = icl(name, 1024, 8000);
        r.x_vector = common::x_vector(1024, seed);
        r
    }

    /// The seed a stored x-vector was made from.
    fn seed_of(x: &[f32]) -> Option<u32> {
        (0..=WRITERS + 1).find(|s| common::x_vector(1024, *s) == x)
    }

    fn outcome<T>(r: &Result<T, StoreError>) -> String {
        match r {
            Ok(_) => "ok".into(),
            Err(StoreError::AlreadyExists { .. }) => "exists".into(),
            Err(StoreError::Busy { .. }) => "busy".into(),
            Err(StoreError::NotFound { .. }) => "notfound".into(),
            Err(e) => format!("error: {e}"),
        }
    }

    /// The writer: does nothing unless run by [`spawn`]. Prints one
    /// `CHILD <name> <outcome>` line per operation.
    #[test]
    fn child_writer() {
        let Ok(job) = std::env::var(CHILD_JOB) else {
            return;
        };
        let args: Vec<&str> = job.split('\t').collect();
        let (what, dir, start) = (args[0], Path::new(args[1]), Path::new(args[2]));
        let rounds: u32 = args[3].parse().unwrap();
        let seed: u32 = args[4].parse().unwrap();
        let (store, _) = VoiceStore::open(dir).unwrap();
        while !start.exists() {
            std::thread::sleep(Duration::from_millis(1));
        }
        for round in 0..rounds {
            match what {
                // Each writer adds same0, same1, ... without replace.
                "add" => {
                    let name = format!("same{round}");
                    let r = store.insert(big(&name, seed), false);
                    println!("CHILD {name} {}", outcome(&r));
                }
                // Each writer replaces, and now and then removes, one voice.
                "churn" => {
                    let r = if round % 4 == 3 {
                        outcome(&store.remove("shared"))
                    } else {
                        outcome(&store.insert(big("shared", seed), true))
                    };
                    println!("CHILD shared {r}");
                }
                // Each writer removes gone0, gone1, ...
                "rm" => {
                    let name = format!("gone{round}");
                    println!("CHILD {name} {}", outcome(&store.remove(&name)));
                }
                // Replaces one voice until killed (or, should the test
                // that was to kill it have failed, for a minute).
                "forever" => {
                    let t0 = Instant::now();
                    while t0.elapsed() < Duration::from_secs(60) {
                        for s in [seed, seed + 1] {
                            store.insert(big("victim", s), true).unwrap();
                            println!("CHILD victim ok");
                        }
                    }
                }
                other => panic!("no job {other}"),
            }
        }
    }

    /// What a writer printed on `line` (libtest may have begun the line
    /// with the test's name).
    fn child_line(line: &str) -> Option<&str> {
        line.split_once("CHILD ").map(|(_, l)| l)
    }

    fn spawn(job: &str, dir: &Path, start: &Path, rounds: u32, seed: u32) -> Child {
        Command::new(std::env::current_exe().unwrap())
            .args(["store::processes::child_writer", "--exact", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(
                CHILD_JOB,
                format!(
                    "{job}\t{}\t{}\t{rounds}\t{seed}",
                    dir.display(),
                    start.display()
                ),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the test binary as a writer")
    }

    /// Runs `WRITERS` writers of `job` (seeds 1, 2, ...) released together;
    /// calls `meanwhile` until they are done; answers each name's outcomes.
    fn race(
        job: &str,
        dir: &Path,
        rounds: u32,
        mut meanwhile: impl FnMut(),
    ) -> BTreeMap<String, Vec<(u32, String)>> {
        let start = dir.parent().unwrap().join(format!("start-{job}"));
        let children: Vec<(u32, Child)> = (1..=WRITERS)
            .map(|seed| (seed, spawn(job, dir, &start, rounds, seed)))
            .collect();
        // Let them open the store and wait at the start line.
        std::thread::sleep(Duration::from_millis(300));
        fs::write(&start, "go").unwrap();
        let t0 = Instant::now();
        let mut outcomes: BTreeMap<String, Vec<(u32, String)>> = BTreeMap::new();
        for (seed, mut child) in children {
            while child.try_wait().unwrap().is_none() {
                meanwhile();
                assert!(t0.elapsed() < Duration::from_secs(120), "writer stuck");
            }
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "writer {seed} failed: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            for line in stdout.lines().filter_map(child_line) {
                let (name, what) = line.split_once(' ').unwrap();
                assert!(!what.starts_with("error"), "writer {seed}: {line}");
                outcomes
                    .entry(name.to_string())
                    .or_default()
                    .push((seed, what.to_string()));
            }
        }
        outcomes
    }

    /// Only voice files are left: no temp file, no lock file.
    fn only_voices(dir: &Path) {
        let left = names(dir);
        assert!(
            left.iter()
                .all(|f| f.ends_with(".safetensors") && !f.starts_with('.')),
            "{left:?}"
        );
    }

    #[test]
    fn two_processes_adding_one_name_leave_one_whole_voice() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("voices");
        let rounds = 40;
        let outcomes = race("add", &dir, rounds, || {
            std::thread::sleep(Duration::from_millis(5))
        });
        assert_eq!(outcomes.len(), rounds as usize);
        let (store, skipped) = VoiceStore::open(&dir).unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        let mut refused = BTreeSet::new();
        for (name, results) in &outcomes {
            assert_eq!(results.len(), WRITERS as usize, "{name}: {results:?}");
            let winners: Vec<u32> = results
                .iter()
                .filter(|(_, r)| r == "ok")
                .map(|(s, _)| *s)
                .collect();
            assert_eq!(winners.len(), 1, "{name}: {results:?}");
            for (_, r) in results {
                assert!(["ok", "exists", "busy"].contains(&r.as_str()), "{r}");
                refused.insert(r.clone());
            }
            // The file is the winner's voice, whole.
            let stored = store.get(name).unwrap();
            assert_eq!(seed_of(&stored.x_vector), Some(winners[0]), "{name}");
            assert_eq!(*stored, big(name, winners[0]));
        }
        assert!(refused.contains("exists") || refused.contains("busy"));
        only_voices(&dir);
    }

    /// Writers replace and remove one voice over and over while this
    /// process reads it, through a store and straight from the file: every
    /// read is one writer's voice, whole, or no voice; never a torn file.
    #[test]
    fn processes_racing_on_one_voice_never_leave_a_torn_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("voices");
        let (store, _) = VoiceStore::open(&dir).unwrap();
        store.insert(big("shared", WRITERS + 1), false).unwrap();
        let path = dir.join("shared.safetensors");
        let (mut reads, mut seen) = (0, BTreeSet::new());
        let outcomes = race("churn", &dir, 60, || {
            match format::read_file(&path, None) {
                Ok(r) => {
                    seen.insert(seed_of(&r.x_vector).expect("a writer's voice"));
                    reads += 1;
                }
                Err(e) => assert!(
                    matches!(&e.problem, format::FormatProblem::Io(io) if io.kind() == std::io::ErrorKind::NotFound),
                    "{e}"
                ),
            }
            if let Some(r) = store.get("shared") {
                assert!(seed_of(&r.x_vector).is_some());
            }
            assert!(store.skipped().is_empty(), "{:?}", store.skipped());
        });
        assert!(reads > 0 && !seen.is_empty());
        let ops = &outcomes["shared"];
        assert!(ops.iter().any(|(_, r)| r == "ok"), "{ops:?}");
        for (_, r) in ops {
            assert!(["ok", "busy", "notfound"].contains(&r.as_str()), "{r}");
        }
        let (reopened, skipped) = VoiceStore::open(&dir).unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        if let Some(r) = reopened.get("shared") {
            assert_eq!(*r, big("shared", seed_of(&r.x_vector).unwrap()));
        }
        only_voices(&dir);
    }

    /// Writers remove the same voices at once: each is removed once (the
    /// others are told it is not there, or busy); nothing else is touched.
    #[test]
    fn processes_removing_one_voice_remove_it_once() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("voices");
        let (store, _) = VoiceStore::open(&dir).unwrap();
        let rounds = 30;
        for i in 0..rounds {
            store
                .insert(xvec(&format!("gone{i}"), 8, i), false)
                .unwrap();
        }
        store.insert(xvec("kept", 8, 1), false).unwrap();
        let outcomes = race("rm", &dir, rounds, || {
            std::thread::sleep(Duration::from_millis(5))
        });
        for (name, results) in &outcomes {
            let ok = results.iter().filter(|(_, r)| r == "ok").count();
            assert_eq!(ok, 1, "{name}: {results:?}");
            assert!(results
                .iter()
                .all(|(_, r)| ["ok", "notfound", "busy"].contains(&r.as_str())));
        }
        let listed: Vec<_> = store.list().iter().map(|r| r.name.to_string()).collect();
        assert_eq!(listed, ["kept"]);
        assert_eq!(names(&dir), ["kept.safetensors"]);
    }

    /// A child killed (SIGKILL) and reaped when dropped.
    struct Killed(Child);

    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A writer killed (SIGKILL) at any point of replacing a voice leaves
    /// the old voice or the new one, whole; its temp file is no voice and
    /// its lock holds nothing: the name is writable at once.
    #[test]
    fn a_killed_writer_leaves_no_torn_voice() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("voices");
        let start = tmp.path().join("start-forever");
        fs::create_dir_all(&dir).unwrap();
        fs::write(&start, "go").unwrap();
        for round in 0..6u64 {
            let mut child = Killed(spawn("forever", &dir, &start, 1, 1));
            let mut lines = BufReader::new(child.0.stdout.take().unwrap())
                .lines()
                .map(Result::unwrap)
                .filter(|l| child_line(l).is_some());
            // Some writes done, then killed somewhere in a later one.
            for _ in 0..=round % 3 {
                assert_eq!(child_line(&lines.next().unwrap()), Some("victim ok"));
            }
            std::thread::sleep(Duration::from_millis(1 + 3 * round));
            drop(child);

            let (store, skipped) = VoiceStore::open(&dir).unwrap();
            assert!(skipped.is_empty(), "round {round}: {skipped:?}");
            let listed: Vec<_> = store.list().iter().map(|r| r.name.to_string()).collect();
            assert_eq!(listed, ["victim"], "round {round}");
            let r = store.get("victim").unwrap();
            let seed = seed_of(&r.x_vector).unwrap();
            assert_eq!(*r, big("victim", seed));
            // Not busy: the dead writer's lock went with it.
            store.insert(big("victim", 3), true).unwrap();
            assert!(matches!(
                store.insert(big("victim", 3), false),
                Err(StoreError::AlreadyExists { .. })
            ));
        }
        // What the killed writers left (temp files) is removed once stale.
        let old = SystemTime::now() - Duration::from_secs(3600);
        for f in names(&dir).iter().filter(|f| f.starts_with(".tmp-")) {
            set_mtime(&dir.join(f), old);
        }
        VoiceStore::open(&dir).unwrap();
        only_voices(&dir);
    }
}
