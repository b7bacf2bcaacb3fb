//! Refusals the kernel makes for real: a seccomp filter, installed in a test's child before it
//! execs lockrun, that fails `clone` with EAGAIN as a system out of processes would.

/// Which `clone` calls the filter refuses.
#[derive(Clone, Copy)]
pub enum Clones {
    /// Those whose flags lack `CLONE_VM`: forks (the watchdog's). The command's own start
    /// (`CLONE_VM`) and threads (`clone3`) go through.
    Forks,
    /// Every `clone`: neither the watchdog nor the command can start. Threads (`clone3`) still
    /// go through.
    All,
}

/// Installs, in the calling process, a seccomp filter that fails with EAGAIN the `clone` system
/// calls `refused` names, and allows everything else.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn refuse_clones(refused: Clones) -> std::io::Result<()> {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    // seccomp_data: nr at 0, arch at 4, args[0] at 16 (its low half first: little-endian).
    const NR: u32 = 0;
    const AUDIT_ARCH: u32 = 4;
    const FLAGS_LOW: u32 = 16;
    let load = |offset: u32| libc::sock_filter {
        code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k: offset,
    };
    let jump = |op: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | op | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let ret = |k: u32| libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    // The flags that let a clone through: none, when every clone is refused.
    let allowed_flags = match refused {
        Clones::Forks => libc::CLONE_VM as u32,
        Clones::All => 0,
    };
    // Jumps count instructions from the next one; 6 refuses, 7 allows.
    let mut program = [
        load(AUDIT_ARCH),
        jump(libc::BPF_JEQ, ARCH, 0, 5),
        load(NR),
        jump(libc::BPF_JEQ, libc::SYS_clone as u32, 0, 3),
        load(FLAGS_LOW),
        jump(libc::BPF_JSET, allowed_flags, 1, 0),
        ret(libc::SECCOMP_RET_ERRNO | libc::EAGAIN as u32),
        ret(libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: plain system calls on a program that outlives them.
    let installed = unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ) == 0
    };
    match installed {
        true => Ok(()),
        false => Err(std::io::Error::last_os_error()),
    }
}
