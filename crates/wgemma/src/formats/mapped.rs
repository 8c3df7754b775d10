//! Read-only file maps that report a file shrinking underneath them as an error.
//!
//! A load reads checkpoints, GGUF files and artifacts through `mmap`: no second copy of
//! gigabytes of weights. If another process truncates the file meanwhile, reading a page
//! past the new end raises SIGBUS, which ends the process without a word. Here a SIGBUS
//! handler looks the faulting address up among the live maps; when it is one of them, it
//! maps zero pages over the rest of that map (the read goes on, over zeros) and marks the
//! map. [`MappedFile::check_intact`], which the caller runs once the load is over, then
//! turns the mark, or a file now shorter than its map, into an error naming the file.
//! A SIGBUS outside every map goes to the handler installed before, else ends the process
//! as it would have.

use crate::error::{Error, Result};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;

const OP: &str = "mapped file";

/// Maps guarded at once (checkpoints with more shards than this are not written).
const SLOTS: usize = 512;

const FREE: u8 = 0;
const CLAIMED: u8 = 1;
const LIVE: u8 = 2;

/// One live map, as the signal handler reads it (atomics only: async-signal-safe).
struct Slot {
    state: AtomicU8,
    start: AtomicUsize,
    end: AtomicUsize,
    /// A read faulted past the file's end: the rest of the map reads as zeros.
    truncated: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: Slot = Slot {
    state: AtomicU8::new(FREE),
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    truncated: AtomicBool::new(false),
};

static MAPS: [Slot; SLOTS] = [EMPTY_SLOT; SLOTS];
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// The SIGBUS disposition before ours (what a fault outside every map gets).
static PREVIOUS: OnceLock<SigAction> = OnceLock::new();

/// `libc::sigaction`, which holds raw pointers, as a value a static may hold.
struct SigAction(libc::sigaction);
// SAFETY: written once before the handler is installed, then only read.
unsafe impl Sync for SigAction {}
unsafe impl Send for SigAction {}

/// A file mapped read-only, guarded against shrinking while it is read.
pub struct MappedFile {
    map: memmap2::Mmap,
    file: std::fs::File,
    path: PathBuf,
    slot: usize,
}

impl MappedFile {
    /// Maps `file` (opened from `path`, which names it in errors).
    pub fn new(file: std::fs::File, path: &Path) -> Result<MappedFile> {
        install_handler()?;
        // SAFETY: a read-only map; a file that shrinks while mapped faults into the
        // handler above instead of ending the process, and `check_intact` reports it.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| Error::invalid(OP, describe(path), "a file to map", e.to_string()))?;
        let slot = claim_slot(&map).ok_or_else(|| {
            Error::invalid(
                OP,
                describe(path),
                format!("at most {SLOTS} files mapped at once"),
                "more",
            )
        })?;
        Ok(MappedFile {
            map,
            file,
            path: path.to_path_buf(),
            slot,
        })
    }

    /// Opens and maps `path`.
    pub fn open(path: &Path) -> Result<MappedFile> {
        let file = std::fs::File::open(path)
            .map_err(|e| Error::invalid(OP, describe(path), "a file to open", e.to_string()))?;
        MappedFile::new(file, path)
    }

    /// The mapped bytes (zeros past the end of a file that shrank: see `check_intact`).
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fails when the file shrank since it was mapped (a read faulted past its end, or
    /// it is shorter now): what was read from it may be zeros instead of its bytes.
    pub fn check_intact(&self) -> Result<()> {
        let mapped = self.map.len() as u64;
        let now = self.file.metadata().map(|m| m.len()).unwrap_or(0);
        if MAPS[self.slot].truncated.load(Ordering::SeqCst) || now < mapped {
            return Err(Error::invalid(
                OP,
                describe(&self.path),
                format!("a file that keeps its {mapped} bytes while it is read"),
                format!("one cut to {now} bytes during the read (another program changed it)"),
            ));
        }
        Ok(())
    }

    /// Drops the pages of `range` from this process's memory (they stay in the page cache
    /// and fault back in if read again).
    pub fn release(&self, range: Range<usize>) {
        let range = range.start.min(self.map.len())..range.end.min(self.map.len());
        if range.is_empty() {
            return;
        }
        // SAFETY: MADV_DONTNEED on a read-only map only discards this process's page-table
        // entries: a later read faults the same bytes back in.
        let _ = unsafe {
            self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                range.start,
                range.len(),
            )
        };
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // Before the unmap (the fields drop after this): the handler no longer claims
        // these addresses.
        MAPS[self.slot].state.store(FREE, Ordering::SeqCst);
    }
}

fn describe(path: &Path) -> String {
    path.display().to_string()
}

fn claim_slot(map: &memmap2::Mmap) -> Option<usize> {
    let start = map.as_ptr() as usize;
    (0..SLOTS).find(|&i| {
        let slot = &MAPS[i];
        if slot
            .state
            .compare_exchange(FREE, CLAIMED, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return false;
        }
        slot.start.store(start, Ordering::SeqCst);
        slot.end.store(start + map.len(), Ordering::SeqCst);
        slot.truncated.store(false, Ordering::SeqCst);
        slot.state.store(LIVE, Ordering::SeqCst);
        true
    })
}

/// Installs the SIGBUS handler once per process.
fn install_handler() -> Result<()> {
    static INSTALLED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            // SAFETY: sysconf and sigaction with a handler that only touches atomics and
            // calls mmap / sigaction.
            unsafe {
                let page = libc::sysconf(libc::_SC_PAGESIZE);
                if page > 0 {
                    PAGE.store(page as usize, Ordering::SeqCst);
                }
                let mut previous: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) != 0 {
                    return Err(std::io::Error::last_os_error().to_string());
                }
                let _ = PREVIOUS.set(SigAction(previous));
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_sigbus as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::last_os_error().to_string());
                }
            }
            Ok(())
        })
        .clone()
        .map_err(|e| Error::invalid(OP, "SIGBUS handler", "one installed", e))
}

extern "C" fn on_sigbus(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::SeqCst);
    for slot in &MAPS {
        if slot.state.load(Ordering::SeqCst) != LIVE {
            continue;
        }
        let (start, end) = (
            slot.start.load(Ordering::SeqCst),
            slot.end.load(Ordering::SeqCst),
        );
        if addr < start || addr >= end {
            continue;
        }
        let from = addr & !(page - 1);
        // SAFETY: replaces pages of our own live map (from the faulting one to its end)
        // with zero pages; the map's owner unmaps the whole range as before.
        let zeros = unsafe {
            libc::mmap(
                from as *mut libc::c_void,
                end - from,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if zeros != libc::MAP_FAILED {
            slot.truncated.store(true, Ordering::SeqCst);
            return;
        }
    }
    forward(signal, info, context);
}

/// A SIGBUS that is not ours: the previous handler's, else the default (the return re-runs
/// the faulting access, which the default disposition then ends).
fn forward(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let previous = PREVIOUS.get().map(|p| p.0);
    // SAFETY: calls the handler that was installed for this signal, as it was installed.
    unsafe {
        match previous {
            Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
                if p.sa_flags & libc::SA_SIGINFO != 0 {
                    let handler: extern "C" fn(
                        libc::c_int,
                        *mut libc::siginfo_t,
                        *mut libc::c_void,
                    ) = std::mem::transmute(p.sa_sigaction);
                    handler(signal, info, context);
                } else {
                    let handler: extern "C" fn(libc::c_int) = std::mem::transmute(p.sa_sigaction);
                    handler(signal);
                }
            }
            _ => {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &default, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_cut_while_mapped_is_an_error_not_a_signal() {
        let dir = std::env::temp_dir().join(format!("wgemma-mapped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("shard.bin");
        let page = PAGE.load(Ordering::SeqCst).max(4096);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&vec![7u8; page * 4])
            .unwrap();
        let map = MappedFile::open(&path).unwrap();
        map.check_intact().unwrap();
        assert_eq!(map.bytes()[page * 3], 7);
        map.release(0..page * 4);
        // Another program cuts the file to one page while the load reads it.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(page as u64)
            .unwrap();
        // The pages past the new end read as zeros (they would raise SIGBUS)...
        let tail: u64 = map.bytes()[page..].iter().map(|&b| b as u64).sum();
        assert_eq!(tail, 0);
        assert_eq!(map.bytes()[0], 7);
        // ...and the load's check names the file.
        let err = map.check_intact().unwrap_err().to_string();
        assert!(err.contains("shard.bin") && err.contains("cut to"), "{err}");
        drop(map);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
