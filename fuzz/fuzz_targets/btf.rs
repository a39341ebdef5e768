//! The BTF reader (capture/btf.rs; the kernel's btf.rst format): a blob
//! parsed, then member offsets looked up, by the names the capture asks
//! for and by names taken from the blob's own NUL-separated strings (so
//! that lookups find the structs a mutated blob declares).
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_trace::testing::capture::btf::BtfIndex;

fuzz_target!(|data: &[u8]| {
    let Ok(index) = BtfIndex::parse(data) else {
        return;
    };
    let _ = index.type_count();
    let _ = index.member_offset("task_struct", "exit_code");
    let names: Vec<&str> = data
        .split(|&b| b == 0)
        .filter_map(|s| std::str::from_utf8(s).ok())
        .filter(|s| !s.is_empty() && s.len() < 64)
        .take(6)
        .collect();
    for s in &names {
        let _ = index.struct_size(s);
        for m in &names {
            let _ = index.member_offset(s, m);
        }
    }
});
