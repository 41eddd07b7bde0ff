//! Issue 11, item 3 (`docs/security.md#memory`): a hostile 8 MiB reply of `[{},{},...]` is
//! decoded in bounded memory. A counting global allocator measures the peak growth over the
//! decode; before the streamed decoder the reply was materialised as JSON values (hundreds of
//! MiB).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test: a failed expectation fails it

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to the system allocator and only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(now, Ordering::SeqCst);
        }
        ptr
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::SeqCst);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            if new_size >= layout.size() {
                let now = CURRENT.fetch_add(new_size - layout.size(), Ordering::SeqCst) + new_size
                    - layout.size();
                PEAK.fetch_max(now, Ordering::SeqCst);
            } else {
                CURRENT.fetch_sub(layout.size() - new_size, Ordering::SeqCst);
            }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const LIMIT: usize = 32 * 1024 * 1024;
const BODY: usize = 8 * 1024 * 1024;

/// `{prefix}[{},{},...]{suffix}`, `BODY` bytes of array.
fn hostile(prefix: &str, suffix: &str) -> Vec<u8> {
    let mut body = Vec::with_capacity(BODY + prefix.len() + suffix.len() + 8);
    body.extend_from_slice(prefix.as_bytes());
    body.push(b'[');
    while body.len() < BODY {
        body.extend_from_slice(b"{},");
    }
    body.extend_from_slice(b"{}]");
    body.extend_from_slice(suffix.as_bytes());
    body
}

/// Runs `decode` and returns the peak growth of live heap bytes over what was live before.
fn peak_growth(decode: impl FnOnce()) -> usize {
    // One measurement at a time: the counters are process-wide and tests run in parallel.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let before = CURRENT.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    decode();
    PEAK.load(Ordering::SeqCst).saturating_sub(before)
}

#[test]
fn eight_mib_of_empty_objects_stay_under_32_mib() {
    let vector = hostile(
        r#"{"status":"success","data":{"resultType":"vector","result":"#,
        "}}",
    );
    let growth = peak_growth(|| {
        let err = llmscaler::metrics::decode_instant_body("q", &vector).expect_err("many series");
        assert_eq!(err.kind(), "multiple_series", "{err}");
    });
    eprintln!(
        "instant query: peak growth {growth} bytes for a {} byte reply",
        vector.len()
    );
    assert!(growth < LIMIT, "instant query: {growth} bytes");

    let growth = peak_growth(|| {
        let err = llmscaler::metrics::decode_per_pod_body("q", &vector).expect_err("no pod");
        assert_eq!(err.kind(), "bad_reply", "{err}");
    });
    eprintln!("per-pod query: peak growth {growth} bytes");
    assert!(growth < LIMIT, "per-pod query: {growth} bytes");

    let decisions = hostile(
        r#"{"apiVersion":"llmscaling.inference.x-k8s.io/v1alpha1","decisions":"#,
        "}",
    );
    let growth = peak_growth(|| {
        let err = llmscaler::metrics::decode_decision_body("svc", None, &decisions)
            .expect_err("no match");
        assert_eq!(err.kind(), "no_decision", "{err}");
    });
    eprintln!("decision reply: peak growth {growth} bytes");
    assert!(growth < LIMIT, "decision reply: {growth} bytes");

    // The bare array, as the issue states it: not an envelope, refused in bounded memory.
    let bare = hostile("", "");
    let growth = peak_growth(|| {
        let err = llmscaler::metrics::decode_instant_body("q", &bare).expect_err("bare");
        assert_eq!(err.kind(), "decode", "{err}");
    });
    eprintln!("bare array: peak growth {growth} bytes");
    assert!(growth < LIMIT, "bare array: {growth} bytes");
}

#[test]
fn many_series_keep_the_count() {
    let mut body = String::from(r#"{"status":"success","data":{"resultType":"vector","result":["#);
    for i in 0..50_000 {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&format!(r#"{{"metric":{{"pod":"p{i}"}},"value":[1,"1"]}}"#));
    }
    body.push_str("]}}");
    let growth = peak_growth(|| {
        let err = llmscaler::metrics::decode_instant_body("q", body.as_bytes()).expect_err("many");
        assert_eq!(
            err.to_string(),
            "Prometheus query `q` returned 50000 series, expected exactly one; they differ in \
             `pod`: aggregate over it, e.g. sum without (pod) (...) or avg(...)"
        );
    });
    assert!(growth < 4 * body.len() + 1024 * 1024, "{growth} bytes");
}
