//! Locking and threads shared between modules.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks, carrying on after a panic elsewhere: every value behind these locks is a set of
/// counts or a cache that stays meaningful even if an update was cut short.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A thread beside the data path that runs until told to stop. It is handed the
/// receiving end of a channel that disconnects when the `Background` is stopped or
/// dropped: its waits (`recv_timeout`) end at once then, and the thread is joined.
pub(crate) struct Background {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    /// Starts `body` on a thread named `name` (cut at the kernel's 15 bytes).
    pub(crate) fn spawn(
        name: &str,
        body: impl FnOnce(std::sync::mpsc::Receiver<()>) + Send + 'static,
    ) -> std::io::Result<Background> {
        let (stop, stopped) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(name.chars().take(15).collect())
            .spawn(move || body(stopped))?;
        Ok(Background {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Puts the calling thread at the lowest real-time priority (SCHED_FIFO 1), so that its
/// wake-ups preempt the tasks of the normal class instead of waiting for a CPU behind
/// them; whether it could (root or CAP_SYS_NICE, or an RLIMIT_RTPRIO of 1 or more). For
/// threads that keep time and do little when they wake (a sampler, a bench's clock): on
/// a machine whose run queue holds tens of busy threads, a normal one waited many
/// times its own work for each wake-up.
pub(crate) fn realtime() -> bool {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "no real-time priority for this thread"
        );
    }
    rc == 0
}
