//! The AFL++ entry point: runs the target named by `SHOAL_FUZZ_TARGET` (one of
//! `shoal_fuzz_targets::TARGETS`) on each input AFL++ feeds it. `fuzz/run.sh` starts campaigns.

fn main() {
    let name = std::env::var("SHOAL_FUZZ_TARGET").unwrap_or_default();
    let Some((_, target)) = shoal_fuzz_targets::TARGETS.iter().find(|(n, _)| *n == name) else {
        eprintln!("SHOAL_FUZZ_TARGET must name one of: {:?}", shoal_fuzz_targets::TARGETS.iter().map(|(n, _)| n).collect::<Vec<_>>());
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| target(data));
}
