//! The seccomp program of a sandboxed command, written as BPF here rather than generated:
//! besides a deny list it must refuse the x32 system call numbers (which share the x86-64
//! architecture tag, so a filter keyed on numbers alone would let `socket` through as
//! `socket | 0x40000000`) and look inside `clone`'s flags and `socket`'s family.
//!
//! What it refuses, in every mode but full access: io_uring (its `IORING_OP_SOCKET` and
//! `IORING_OP_CONNECT` reach the network without `socket(2)`), tracing other processes,
//! mounting and new namespaces (a nested user namespace would give back every capability
//! dropped), loading kernel code or BPF, keyrings, and — without network — every socket
//! family but netlink (a pathname unix socket reaches host daemons through any file
//! sandbox; `socketpair` stays).

/// The system calls refused with `EPERM`, besides the special cases below.
const REFUSED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_acct,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_syslog,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_quotactl,
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
    libc::SYS_iopl,
    libc::SYS_ioperm,
];

/// Refused with `ENOSYS`, so programs take their fallback: io_uring users fall back to
/// ordinary system calls, glibc falls back from `clone3` (whose flags a filter cannot read)
/// to `clone`.
const ABSENT: &[libc::c_long] = &[
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_clone3,
];

/// `clone` flags that make a namespace.
const NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWTIME) as u32;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 62 | 0x8000_0000 | 0x4000_0000;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 183 | 0x8000_0000 | 0x4000_0000;

/// System call numbers at or above this are x32's.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// Offsets in `struct seccomp_data`: nr, arch, instruction pointer, then six arguments.
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0_LOW: u32 = 16;

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;

fn errno(code: libc::c_int) -> u32 {
    libc::SECCOMP_RET_ERRNO | (code as u32 & libc::SECCOMP_RET_DATA)
}

fn op(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The program for a command without (`network == false`) or with network.
pub(crate) fn program(network: bool) -> Vec<libc::sock_filter> {
    let mut program = vec![
        // Another architecture's calling convention (i386 through int 0x80) is refused
        // outright: its numbers mean other calls.
        op(LD_W_ABS, ARCH, 0, 0),
        op(JEQ, AUDIT_ARCH, 1, 0),
        op(RET, KILL, 0, 0),
        op(LD_W_ABS, NR, 0, 0),
    ];
    #[cfg(target_arch = "x86_64")]
    program.extend([
        op(JGE, X32_SYSCALL_BIT, 0, 1),
        op(RET, errno(libc::ENOSYS), 0, 0),
    ]);
    for (calls, refusal) in [(REFUSED, errno(libc::EPERM)), (ABSENT, errno(libc::ENOSYS))] {
        for &call in calls {
            program.extend([op(JEQ, call as u32, 0, 1), op(RET, refusal, 0, 0)]);
        }
    }
    // clone: refused when it asks for a namespace. A is still the call number after.
    program.extend([
        op(JEQ, libc::SYS_clone as u32, 0, 4),
        op(LD_W_ABS, ARG0_LOW, 0, 0),
        op(JSET, NAMESPACE_FLAGS, 0, 1),
        op(RET, errno(libc::EPERM), 0, 0),
        op(RET, ALLOW, 0, 0),
    ]);
    if !network {
        // socket: netlink only.
        program.extend([
            op(JEQ, libc::SYS_socket as u32, 0, 4),
            op(LD_W_ABS, ARG0_LOW, 0, 0),
            op(JEQ, libc::AF_NETLINK as u32, 0, 1),
            op(RET, ALLOW, 0, 0),
            op(RET, errno(libc::EACCES), 0, 0),
        ]);
    }
    program.push(op(RET, ALLOW, 0, 0));
    program
}

/// The program as the bytes bubblewrap's `--seccomp FD` reads: the instructions in their
/// in-memory layout.
pub(crate) fn program_bytes(network: bool) -> Vec<u8> {
    let mut bytes = Vec::new();
    for instruction in program(network) {
        bytes.extend_from_slice(&instruction.code.to_ne_bytes());
        bytes.push(instruction.jt);
        bytes.push(instruction.jf);
        bytes.extend_from_slice(&instruction.k.to_ne_bytes());
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program on one call, as the kernel would (only the instructions it uses).
    fn verdict(program: &[libc::sock_filter], nr: u32, arg0: u32) -> u32 {
        let mut a = 0u32;
        let mut pc = 0usize;
        while let Some(instruction) = program.get(pc) {
            pc += 1;
            match instruction.code {
                LD_W_ABS => {
                    a = match instruction.k {
                        NR => nr,
                        ARCH => AUDIT_ARCH,
                        ARG0_LOW => arg0,
                        other => unreachable!("load of offset {other}"),
                    }
                }
                JEQ | JGE | JSET => {
                    let taken = match instruction.code {
                        JEQ => a == instruction.k,
                        JGE => a >= instruction.k,
                        _ => a & instruction.k != 0,
                    };
                    pc += usize::from(if taken {
                        instruction.jt
                    } else {
                        instruction.jf
                    });
                }
                RET => return instruction.k,
                other => unreachable!("opcode {other}"),
            }
        }
        unreachable!("the program fell off its end")
    }

    #[test]
    fn the_program_refuses_what_it_lists_and_allows_the_rest() {
        let offline = program(false);
        let online = program(true);
        let call = |nr: libc::c_long| nr as u32;
        for program in [&offline, &online] {
            assert_eq!(verdict(program, call(libc::SYS_read), 0), ALLOW);
            assert_eq!(
                verdict(program, call(libc::SYS_io_uring_setup), 0),
                errno(libc::ENOSYS)
            );
            assert_eq!(
                verdict(program, call(libc::SYS_ptrace), 0),
                errno(libc::EPERM)
            );
            assert_eq!(
                verdict(program, call(libc::SYS_clone), libc::SIGCHLD as u32),
                ALLOW
            );
            let new_user = (libc::CLONE_NEWUSER | libc::SIGCHLD) as u32;
            assert_eq!(
                verdict(program, call(libc::SYS_clone), new_user),
                errno(libc::EPERM)
            );
            #[cfg(target_arch = "x86_64")]
            assert_eq!(
                verdict(program, call(libc::SYS_socket) | X32_SYSCALL_BIT, 2),
                errno(libc::ENOSYS)
            );
        }
        let inet = libc::AF_INET as u32;
        assert_eq!(
            verdict(&offline, call(libc::SYS_socket), inet),
            errno(libc::EACCES)
        );
        assert_eq!(
            verdict(&offline, call(libc::SYS_socket), libc::AF_UNIX as u32),
            errno(libc::EACCES)
        );
        assert_eq!(
            verdict(&offline, call(libc::SYS_socket), libc::AF_NETLINK as u32),
            ALLOW
        );
        assert_eq!(verdict(&online, call(libc::SYS_socket), inet), ALLOW);
        assert_eq!(
            verdict(&online, call(libc::SYS_socketpair), libc::AF_UNIX as u32),
            ALLOW
        );
        assert_eq!(program_bytes(false).len(), offline.len() * 8);
    }
}
