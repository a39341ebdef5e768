//! The helper probe: a program never attached, loaded to learn which
//! helpers the kernel has.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::generated::{bpf_get_current_task_btf, bpf_loop, bpf_task_pt_regs},
    macros::tracepoint,
    programs::TracePointContext,
};

/// Never attached: userspace loads it to learn whether the kernel has
/// bpf_loop, bpf_task_pt_regs and bpf_get_current_task_btf (the verifier
/// rejects an unknown helper id), and loads the fallback programs if not
/// (capture/ebpf.rs `probe_helpers`).
#[tracepoint]
pub fn probe_helpers(_ctx: TracePointContext) -> u32 {
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) };
    let mut steps = 0u64;
    unsafe {
        bpf_loop(
            1,
            probe_step as *mut c_void,
            &mut steps as *mut u64 as *mut c_void,
            0,
        )
    };
    u32::from(regs == 0) + steps as u32
}

#[inline(never)]
extern "C" fn probe_step(_index: u64, ctx: *mut c_void) -> i64 {
    unsafe { *(ctx as *mut u64) += 1 };
    1
}
