//! The slots that keep end-to-end runs from crowding a small machine.
//!
//! In a test binary of its own: a test that spawns a process while this one
//! drops a slot would hand the child a copy of the slot's descriptor, and
//! with it the lock, until the child execs, so "the freed slot" could still
//! look taken.

mod common;

#[test]
fn end_to_end_runs_take_turns_through_a_counting_semaphore_of_lock_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let slots = move || common::Slots::open(&dir, 2);
    let first = slots().try_take().expect("a free slot");
    let second = slots().try_take().expect("a second free slot");
    assert!(slots().try_take().is_none(), "a third run got in");
    drop(first);
    let third = slots().try_take().expect("the freed slot");
    // A run that has to wait gets in once a slot is given back.
    let waiter = std::thread::spawn(move || slots().take());
    drop(second);
    let fourth = waiter.join().expect("the waiter gets a slot");
    drop((third, fourth));
}
