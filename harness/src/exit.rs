//! The exit codes, in one place. They follow Jepsen: 0 valid, 1 invalid,
//! 2 unknown, 254 bad arguments, configuration or input, 255 the harness
//! itself failed.

use checker::Validity;

/// The history satisfies the promise (and `matrix --expect`: every
/// expectation was met).
pub const VALID: u8 = 0;
/// The promise was broken (or an expectation was not met).
pub const INVALID: u8 = 1;
/// The checkers could not decide: an unverified fault, an interrupted run,
/// an unfinished search.
pub const UNKNOWN: u8 = 2;
/// Bad arguments, configuration or input; the message names the fix.
pub const BAD_INPUT: u8 = 254;
/// The harness itself failed: a node, the runtime, the disk.
pub const HARNESS_FAILED: u8 = 255;

/// The exit code of a verdict.
pub fn of(validity: Validity) -> u8 {
    match validity {
        Validity::True => VALID,
        Validity::False => INVALID,
        Validity::Unknown => UNKNOWN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_jepsen() {
        assert_eq!(of(Validity::True), 0);
        assert_eq!(of(Validity::False), 1);
        assert_eq!(of(Validity::Unknown), 2);
        assert_eq!((BAD_INPUT, HARNESS_FAILED), (254, 255));
    }
}
