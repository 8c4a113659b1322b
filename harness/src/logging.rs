//! Logging: everything to the current run's `harness.log`, warnings also to
//! stderr (coloured only for a terminal, and not under `NO_COLOR`). The log
//! file changes per run, so the writer is swappable.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{filter::LevelFilter, Layer};

static RUN_LOG: Mutex<Option<File>> = Mutex::new(None);

struct RunLog;

impl Write for RunLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match RUN_LOG.lock().expect("log lock poisoned").as_mut() {
            Some(f) => f.write(buf),
            None => Ok(buf.len()),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match RUN_LOG.lock().expect("log lock poisoned").as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl<'a> MakeWriter<'a> for RunLog {
    type Writer = RunLog;
    fn make_writer(&'a self) -> Self::Writer {
        RunLog
    }
}

pub fn init() {
    let file = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(RunLog)
        .with_filter(LevelFilter::INFO);
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let stderr = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .with_filter(LevelFilter::WARN);
    let _ = tracing_subscriber::registry()
        .with(file)
        .with(stderr)
        .try_init();
}

/// Sends the log to `file` until [`detach`].
pub fn attach(file: File) {
    *RUN_LOG.lock().expect("log lock poisoned") = Some(file);
}

pub fn detach() {
    RUN_LOG.lock().expect("log lock poisoned").take();
}
