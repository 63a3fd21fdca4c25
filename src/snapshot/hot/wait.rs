//! Functions that put a thread to sleep until something happens: a condition variable's
//! or a futex's wait, a thread parker, `epoll_wait`, `poll`, `nanosleep`. On the hot path
//! their CPU is the kernel's cost of sleeping and waking the thread (the context switches
//! under the wait), paid at each hand-off of work between threads or each wake-up of an
//! event loop. That is real CPU, but "this function 2× faster" says nothing of it: fewer
//! hand-offs or wake-ups save it. The report words such an entry so, and the hot path's
//! finding starts with the first entry that is work.

/// The C library's and the kernel's waiting calls, by name without the C library's
/// internal prefixes (`__GI_`, `__libc_`, leading underscores).
const WAITS: &[&str] = &[
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "poll",
    "ppoll",
    "select",
    "pselect",
    "pselect6",
    "nanosleep",
    "clock_nanosleep",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "pthread_cond_clockwait",
    "sem_wait",
    "sem_timedwait",
    "futex_wait",
    "futex_abstimed_wait_common",
    "futex_abstimed_wait_common64",
    "do_futex_wait",
];

/// Whether `name` is a function whose cost is putting its thread to sleep and waking it.
pub fn is_wait(name: &str) -> bool {
    // A Rust or C++ path: the wait methods of condition variables and thread parkers.
    if let Some((path, method)) = name.rsplit_once("::") {
        let type_name = path.rsplit("::").next().unwrap_or(path);
        let waits = method.starts_with("wait") || method.starts_with("park");
        return waits
            && matches!(
                type_name,
                "Condvar" | "Parker" | "ThreadParker" | "condvar" | "parking_lot" | "thread"
            );
    }
    let mut base = name;
    for prefix in ["__GI_", "__libc_", "__"] {
        base = base.strip_prefix(prefix).unwrap_or(base);
    }
    base = base.trim_start_matches('_');
    WAITS.contains(&base)
}

/// What a kernel function that samples land on at a hand-off stands for, in words, or
/// `None`. A CPU-clock sample taken while the kernel runs with interrupts off (switching
/// threads, waking one, taking a lock the scheduler takes) is delivered when they come
/// back on, so the time of a context switch and a wake-up reads as the function that
/// turns them back on: `finish_task_switch` 21 % on the demo's server, which hands each
/// backend call to a blocking thread and back, read to a newcomer as a function to
/// make faster.
pub fn kernel_hand_off(name: &str) -> Option<&'static str> {
    // A compiler's clone of the function: `finish_task_switch.isra.0`.
    let base = name.split('.').next().unwrap_or(name);
    match base {
        "finish_task_switch" | "__schedule" | "schedule" | "context_switch" => {
            Some("kernel: switching threads")
        }
        // Mostly the wake-ups: try_to_wake_up holds its lock with interrupts off.
        "_raw_spin_unlock_irqrestore" | "_raw_spin_unlock_irq" => Some("kernel: waking threads"),
        // The interrupt handlers' time, counted where they return.
        "irqentry_exit_to_user_mode" | "irqentry_exit" => Some("kernel: interrupts"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{is_wait, kernel_hand_off};

    #[test]
    fn the_kernels_hand_off_functions_are_said_in_words() {
        assert_eq!(
            kernel_hand_off("finish_task_switch.isra.0"),
            Some("kernel: switching threads")
        );
        assert!(kernel_hand_off("_raw_spin_unlock_irqrestore").is_some());
        assert_eq!(kernel_hand_off("tcp_sendmsg"), None);
        assert_eq!(kernel_hand_off("json_reply"), None);
    }

    #[test]
    fn waits_are_told_from_work() {
        for wait in [
            "parking_lot::condvar::Condvar::wait_until_internal",
            "std::sys::sync::condvar::futex::Condvar::wait",
            "std::thread::park",
            "parking_lot_core::thread_parker::imp::ThreadParker::park",
            "epoll_wait",
            "__GI_epoll_wait",
            "__libc_poll",
            "___pthread_cond_wait",
            "__futex_abstimed_wait_common",
            "clock_nanosleep",
        ] {
            assert!(is_wait(wait), "{wait}");
        }
        for work in [
            "json_reply",
            "http_parser_execute",
            "tokio::runtime::blocking::pool::Inner::run",
            "mio::poll::Poll::poll",
            "uv__io_poll",
            "std::thread::spawn",
            "pollution",
            "__libc_write",
        ] {
            assert!(!is_wait(work), "{work}");
        }
    }
}
