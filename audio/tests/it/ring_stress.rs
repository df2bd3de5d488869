//! The SPSC ring under real threads: every sample arrives once and in order
//! whether the producer or the consumer is the faster side, with odd chunk
//! sizes that cross the wrap point at every offset.

use std::thread;
use std::time::Duration;

use tts_audio::ring;

/// Runs `total` samples through a ring of `cap` with the given chunk sizes and
/// per-chunk pauses on each side; checks order and completeness.
fn run(
    cap: usize,
    total: u32,
    push_sizes: &[usize],
    pop_sizes: &[usize],
    push_pause: Duration,
    pop_pause: Duration,
) {
    let (mut p, mut c) = ring::channel(cap);
    let push_sizes = push_sizes.to_vec();
    let producer = thread::spawn(move || {
        let mut next = 0u32;
        let mut k = 0;
        let mut full = 0u64;
        while next < total {
            let n = push_sizes[k % push_sizes.len()].min((total - next) as usize);
            k += 1;
            let chunk: Vec<f32> = (next..next + n as u32).map(|v| v as f32).collect();
            let mut sent = 0;
            while sent < n {
                let m = p.push(&chunk[sent..]);
                if m == 0 {
                    full += 1;
                    thread::yield_now();
                }
                sent += m;
            }
            next += n as u32;
            if !push_pause.is_zero() {
                thread::sleep(push_pause);
            }
        }
        full
    });
    let mut expect = 0u32;
    let mut buf = vec![0.0f32; pop_sizes.iter().copied().max().unwrap()];
    let mut k = 0;
    let mut empty = 0u64;
    while expect < total {
        let want = pop_sizes[k % pop_sizes.len()];
        k += 1;
        let got = c.pop_into(&mut buf[..want]);
        if got == 0 {
            empty += 1;
            thread::yield_now();
        }
        for &s in &buf[..got] {
            assert_eq!(s, expect as f32, "sample out of order or lost");
            expect += 1;
        }
        if !pop_pause.is_zero() {
            thread::sleep(pop_pause);
        }
    }
    let full = producer.join().unwrap();
    assert!(c.is_empty());
    eprintln!("cap {cap}: producer found the ring full {full} times, consumer found it empty {empty} times");
}

// f32 holds integers exactly up to 2^24: totals stay below that.

#[test]
fn producer_faster_than_consumer() {
    run(
        256,
        200_000,
        &[1920, 7, 389],
        &[64, 13],
        Duration::ZERO,
        Duration::from_micros(50),
    );
}

#[test]
fn consumer_faster_than_producer() {
    run(
        256,
        200_000,
        &[17, 3, 101],
        &[512, 1, 255],
        Duration::from_micros(50),
        Duration::ZERO,
    );
}

#[test]
fn both_unthrottled_with_a_tiny_ring() {
    run(
        8,
        2_000_000,
        &[1, 2, 3, 5, 7, 11],
        &[1, 4, 6, 9],
        Duration::ZERO,
        Duration::ZERO,
    );
}
