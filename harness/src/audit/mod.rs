//! `lockstorm audit --target URL`: reads a deployment lockstorm did not
//! start (read-only commands only) and says what in it can break a lock.
//! `facts` is what is gathered, `rules` (pure) what it means, `gather` the
//! I/O, `table` how it prints.

pub mod facts;
pub mod rules;
