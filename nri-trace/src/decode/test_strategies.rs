//! What the decoders' property tests (proptest) share: their settings and
//! the strategies for random bytes, chunk splits and garbage.

use proptest::prelude::*;

/// `cases` cases and no failure persistence: a failing case is reported
/// (shrunk) by the test's panic, and a test run writes no
/// `proptest-regressions` files into the source tree.
///
/// `cases` keeps `cargo test` quick; `PROPTEST_CASES=N` in the environment
/// runs every property N times instead, for a deeper search
/// (`PROPTEST_RNG_SEED` fixes the seed, as in proptest's own config).
/// XorShift rather than proptest's default ChaCha: the bytes strategies
/// below draw megabytes from the RNG, and ChaCha unoptimized (the test
/// profile) costs a multiple of the decoding under test.
pub(crate) fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        failure_persistence: None,
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    }
}

/// Random bytes, as many as `len` picks.
///
/// The bytes are drawn from the case's RNG in one go rather than as a
/// vector of `any::<u8>()`: the properties here push megabytes per run,
/// and per-byte value trees cost several times the decoding. A failing
/// case still shrinks its length (keeping a prefix of the same bytes), just
/// not each byte's value.
pub(crate) fn bytes(len: impl Strategy<Value = usize>) -> impl Strategy<Value = Vec<u8>> {
    len.prop_perturb(|len, mut rng| {
        let mut v = vec![0u8; len];
        rng.fill_bytes(&mut v);
        v
    })
}

/// Random bytes, fewer than `n` of them.
pub(crate) fn bytes_below(n: usize) -> impl Strategy<Value = Vec<u8>> {
    bytes(0..n.max(1))
}

/// Fewer than `max` cut points in `0..=len`, sorted: where a stream of
/// `len` bytes is split into pushes (a cut may repeat, making an empty
/// push, or sit at either end).
pub(crate) fn cuts(len: usize, max: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..=len, 0..max.max(1)).prop_map(|mut c| {
        c.sort_unstable();
        c
    })
}

/// Random bytes of one of `lens` (the lengths worth hitting every run)
/// or of any length in `1..=max`, to put before the stream whose first
/// byte is `next`, with no offset in them where a header of the NRI
/// multiplexer, ttrpc or HTTP/2 can start.
///
/// Each of those headers starts with a big-endian field whose top byte is
/// 0 and whose second byte is at most 0x40 in any header the hunting
/// accepts: the mux conn_id (1 or 2), the ttrpc length (at most 4 MiB,
/// `0x0040_0000`), the HTTP/2 length (at most 16384, `0x00_4000`, the
/// default maximum frame size). So every 0x00 followed by a byte <= 0x40
/// (the stream's first byte included) is replaced with 0xff; the bytes are
/// otherwise arbitrary (zeros too). Such garbage holds no candidate
/// boundary, and a decoder must skip exactly all of it: without this, rare
/// garbage could hold a plausible header chain that the heuristic rightly
/// accepts.
pub(crate) fn headerless_garbage(
    lens: &'static [usize],
    max: usize,
    next: u8,
) -> impl Strategy<Value = Vec<u8>> {
    bytes(prop_oneof![prop::sample::select(lens), 1..=max.max(1)]).prop_map(move |mut g| {
        for i in 0..g.len() {
            let following = g.get(i + 1).copied().unwrap_or(next);
            if g[i] == 0 && following <= 0x40 {
                g[i] = 0xff;
            }
        }
        g
    })
}

/// [`headerless_garbage`] to put before `stream`, and up to 8 cuts of the
/// two together: the input of each decoder's resync-after-garbage test.
pub(crate) fn garbage_before(
    stream: &[u8],
    lens: &'static [usize],
    max: usize,
) -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    let stream_len = stream.len();
    headerless_garbage(lens, max, stream[0]).prop_flat_map(move |g| {
        let len = g.len() + stream_len;
        (Just(g), cuts(len, 8))
    })
}
