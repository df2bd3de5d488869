//! The synthetic text tokenizer: a byte-level BPE in the Qwen2 file format
//! (vocab.json, merges.txt, tokenizer_config.json).

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// GPT-2 byte-to-unicode table (printable stand-ins for every byte).
fn byte_to_unicode() -> Vec<char> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    let mut table = vec![' '; 256];
    for (b, c) in bs.iter().zip(cs) {
        table[*b as usize] = char::from_u32(c).expect("valid code point");
    }
    table
}

const WORDS: &str = "the of and to in is you that it he was for on are as with his they at be this have from or one had by word but not what all were we when your can said there use an each which she do how their if will up other about out many then them these so some her would make like him into time has look two more write go see number no way could people my than first water been call who oil its now find long down day did get come made may part assistant user system hello world speech voice real time today weather good morning thank please sound audio text model quick brown fox jumps over lazy dog";

/// Synthetic byte-level BPE: ids 0..256 are bytes, then merges spelling WORDS
/// (with and without a leading space).
pub(crate) fn tokenizer_files() -> (String, String, String) {
    let table = byte_to_unicode();
    let mut vocab: BTreeMap<String, u32> = BTreeMap::new();
    for (b, c) in table.iter().enumerate() {
        vocab.insert(c.to_string(), b as u32);
    }
    let mut merges: Vec<(String, String)> = Vec::new();
    for word in WORDS.split(' ') {
        for prefix in ["", " "] {
            let bytes: Vec<String> = format!("{prefix}{word}")
                .bytes()
                .map(|b| table[b as usize].to_string())
                .collect();
            let mut cur = bytes[0].clone();
            for piece in &bytes[1..] {
                let merged = format!("{cur}{piece}");
                if !vocab.contains_key(&merged) {
                    let id = vocab.len() as u32;
                    vocab.insert(merged.clone(), id);
                    merges.push((cur.clone(), piece.clone()));
                }
                cur = merged;
            }
        }
    }
    let vocab_json = serde_json::to_string(&vocab).expect("vocab serializes");
    let mut merges_txt = String::from("#version: 0.2\n");
    for (a, b) in &merges {
        merges_txt.push_str(&format!("{a} {b}\n"));
    }
    let specials: [(u32, &str, bool); 11] = [
        (151643, "<|endoftext|>", true),
        (151644, "<|im_start|>", true),
        (151645, "<|im_end|>", true),
        (151646, "<|object_ref_start|>", true),
        (151647, "<|object_ref_end|>", true),
        (151648, "<|box_start|>", true),
        (151649, "<|box_end|>", true),
        (151671, "<tts_pad>", true),
        (151672, "<tts_text_bos>", true),
        (151673, "<tts_text_eod>", true),
        (151674, "<tts_text_bos_single>", true),
    ];
    let added: BTreeMap<String, Value> = specials
        .iter()
        .map(|(id, c, sp)| {
            (
                id.to_string(),
                json!({"content": c, "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": sp}),
            )
        })
        .collect();
    let tok_cfg = json!({
        "add_prefix_space": false,
        "added_tokens_decoder": added,
        "bos_token": null,
        "clean_up_tokenization_spaces": false,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": false,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": null
    });
    (
        vocab_json,
        merges_txt,
        serde_json::to_string_pretty(&tok_cfg).expect("config serializes"),
    )
}
