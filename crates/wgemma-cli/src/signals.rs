//! Process signals at the CLI's edge: SIGPIPE back to its default (a closed stdout ends the
//! program quietly), SIGINT removing the file a command is in the middle of writing, and
//! Ctrl-C stopping a chat's reply instead of the program.

use anyhow::{Context as _, Result};
use std::ffi::{c_char, CString};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Arc;

/// Restores the default SIGPIPE action. Rust ignores SIGPIPE at start-up, which turns a
/// closed pipe into `EPIPE` errors and `print!` panics; a command-line filter should just
/// stop, as `cat` and `grep` do.
pub fn default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The NUL-terminated path the SIGINT handler unlinks (null: none). Leaked on purpose: the
/// handler may read it at any moment, so it is never freed while registered.
static PARTIAL: AtomicPtr<c_char> = AtomicPtr::new(std::ptr::null_mut());

#[cfg(unix)]
extern "C" fn remove_partial_and_exit(signal: libc::c_int) {
    let path = PARTIAL.load(Ordering::SeqCst);
    // SAFETY: unlink and _exit are async-signal-safe; `path` is null or a leaked CString.
    unsafe {
        if !path.is_null() {
            libc::unlink(path);
        }
        libc::_exit(128 + signal);
    }
}

/// While alive, Ctrl-C (SIGINT) or SIGTERM removes `path` (a temporary file being written)
/// before the process exits, so an interrupted command leaves nothing behind.
pub struct RemoveOnInterrupt {
    _private: (),
}

impl RemoveOnInterrupt {
    pub fn new(path: &Path) -> RemoveOnInterrupt {
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            if let Ok(c) = CString::new(path.as_os_str().as_bytes()) {
                let old = PARTIAL.swap(c.into_raw(), Ordering::SeqCst);
                free(old);
            }
            let handler = remove_partial_and_exit as extern "C" fn(libc::c_int);
            // SAFETY: the handler only calls async-signal-safe functions.
            unsafe {
                libc::signal(libc::SIGINT, handler as libc::sighandler_t);
                libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
            }
        }
        #[cfg(not(unix))]
        let _ = path;
        RemoveOnInterrupt { _private: () }
    }
}

fn free(ptr: *mut c_char) {
    if !ptr.is_null() {
        // SAFETY: every non-null pointer stored in PARTIAL came from CString::into_raw.
        drop(unsafe { CString::from_raw(ptr) });
    }
}

impl Drop for RemoveOnInterrupt {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: restoring the default dispositions installs no handler code; once they
        // are restored no handler can read the path, so it is freed.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
        }
        free(PARTIAL.swap(std::ptr::null_mut(), Ordering::SeqCst));
    }
}

/// Ctrl-C in a conversation (`wgemma chat`), as llama.cpp's interactive mode has it: during
/// a reply it stops the reply (the conversation goes on); at the prompt it ends the program
/// with exit status 130, the shell's code for an interrupt. The handler is the `ctrlc`
/// crate's (a thread woken by the signal, so it may print and exit).
pub struct StopReplyOnInterrupt {
    replying: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl StopReplyOnInterrupt {
    /// Installs the handler for the rest of the process.
    pub fn install() -> Result<StopReplyOnInterrupt> {
        let replying = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (replying.clone(), stop.clone());
        ctrlc::set_handler(move || {
            if r.load(Ordering::SeqCst) {
                s.store(true, Ordering::SeqCst);
            } else {
                eprintln!();
                std::process::exit(130);
            }
        })
        .context("installing the Ctrl-C handler")?;
        Ok(StopReplyOnInterrupt { replying, stop })
    }

    /// A reply starts: Ctrl-C stops it from now on.
    pub fn start_reply(&self) {
        self.stop.store(false, Ordering::SeqCst);
        self.replying.store(true, Ordering::SeqCst);
    }

    /// Whether Ctrl-C asked the reply to stop.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The reply is over: Ctrl-C ends the program again.
    pub fn end_reply(&self) {
        self.replying.store(false, Ordering::SeqCst);
    }
}
