//! `cargo xtask bench` (filled in below).
use anyhow::Result;
#[derive(clap::Args)]
pub struct BenchArgs {}
pub fn run(_a: BenchArgs) -> Result<()> {
    anyhow::bail!("benchmarks are not wired yet")
}
