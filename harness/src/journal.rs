//! Writes `history.jsonl` as events arrive: each event gets the next `index`
//! and is flushed at once, so a crash leaves a readable prefix. It also
//! feeds the live tally and tells the nemesis when a holder is in its
//! critical section ([`nemesis::Holder`]).

use crate::progress::{Snapshot, Tally};
use checker::history::{f, Event, OpType, Process};
use nemesis::Holder;
use serde_json::Value;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use tokio::sync::watch;
use workloads::clock::RunClock;

pub struct HistoryWriter {
    inner: Mutex<Inner>,
    clock: RunClock,
    holders: watch::Sender<Holder>,
}

struct Inner {
    out: BufWriter<File>,
    next_index: u64,
    failed: Option<std::io::Error>,
    tally: Tally,
}

impl HistoryWriter {
    /// `late` is how late an event may arrive (the longest pause), for the
    /// live tally's reordering.
    pub fn create(
        path: &Path,
        clock: RunClock,
        late: std::time::Duration,
    ) -> std::io::Result<(Self, watch::Receiver<Holder>)> {
        let out = BufWriter::new(File::create(path)?);
        let (holders, rx) = watch::channel(Holder::default());
        let writer = HistoryWriter {
            inner: Mutex::new(Inner {
                out,
                next_index: 0,
                failed: None,
                tally: Tally::new(late),
            }),
            clock,
            holders,
        };
        Ok((writer, rx))
    }

    /// Appends an event from worker `worker` (or the harness) and tells the
    /// nemesis when a holder has read the counter: it is mid-critical-section.
    pub fn append(&self, mut event: Event, worker: Option<usize>) {
        let holding = event.kind == OpType::Ok && event.f == f::READ;
        {
            let mut inner = self.inner.lock().expect("history writer poisoned");
            event.index = inner.next_index;
            inner.next_index += 1;
            let mut line = serde_json::to_vec(&event).expect("events always serialise");
            line.push(b'\n');
            let written = inner.out.write_all(&line).and_then(|_| inner.out.flush());
            if let Err(e) = written {
                inner.failed.get_or_insert(e);
            }
            inner.tally.on_event(&event);
        }
        if let (true, Some(worker), Process::Client(process)) = (holding, worker, &event.process) {
            let process = *process;
            self.holders.send_modify(|a| {
                *a = Holder {
                    seq: a.seq + 1,
                    worker,
                    process,
                }
            });
        }
    }

    /// An event stamped now by the harness's own clock.
    pub fn now(&self, process: Process, kind: OpType, op: &str) -> Event {
        Event::new(self.clock.now(), process, kind, op)
    }

    /// Ops and anomalies so far, for the progress display.
    pub fn snapshot(&self) -> Snapshot {
        let inner = self.inner.lock().expect("history writer poisoned");
        inner.tally.snapshot()
    }

    /// The first write error, if any: the history on disk is then incomplete.
    pub fn finish(&self) -> std::io::Result<()> {
        let mut inner = self.inner.lock().expect("history writer poisoned");
        inner.out.flush()?;
        match inner.failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl nemesis::Journal for HistoryWriter {
    fn now_ns(&self) -> u64 {
        self.clock.now()
    }
    fn record_at(&self, time: u64, op: &str, value: Value, node: Option<&str>) {
        let mut event = Event::new(time, Process::nemesis(), OpType::Info, op).with_value(value);
        if let Some(node) = node {
            event = event.with_node(node);
        }
        tracing::info!(target: "nemesis", "{op} {}", event.value);
        self.append(event, None);
    }
}
