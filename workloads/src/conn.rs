//! A Redis connection that classifies failures the way the history needs them:
//! a command that never reached the server is `fail`, one whose reply was lost
//! is `info`.

use crate::Outcome;
use redis::{Connection, RedisError, RedisResult};
use std::time::Duration;

pub struct Conn {
    client: redis::Client,
    timeout: Duration,
    con: Option<Connection>,
}

impl Conn {
    pub fn new(addr: &str, timeout: Duration) -> Self {
        let client = redis::Client::open(format!("redis://{addr}/"))
            .expect("a host:port address always forms a valid redis URL");
        Conn {
            client,
            timeout,
            con: None,
        }
    }

    fn connect(&mut self) -> RedisResult<&mut Connection> {
        if self.con.is_none() {
            let con = self.client.get_connection_with_timeout(self.timeout)?;
            con.set_read_timeout(Some(self.timeout))?;
            con.set_write_timeout(Some(self.timeout))?;
            self.con = Some(con);
        }
        Ok(self.con.as_mut().expect("just connected"))
    }

    /// Runs one request. A failure to connect means nothing was sent (`fail`);
    /// a timeout or broken connection after sending means the outcome is
    /// unknown (`info`), and the connection is dropped because a late reply
    /// would otherwise be read as the answer to the next request.
    pub fn run<T>(
        &mut self,
        request: impl FnOnce(&mut Connection) -> RedisResult<T>,
    ) -> Outcome<T> {
        let con = match self.connect() {
            Ok(con) => con,
            Err(e) => {
                self.con = None;
                return Outcome::Fail(format!("unreachable: {}", short(&e)));
            }
        };
        match request(con) {
            Ok(v) => Outcome::Ok(v),
            Err(e) if e.is_timeout() => {
                self.con = None;
                Outcome::Info("timeout".into())
            }
            Err(e)
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() =>
            {
                self.con = None;
                Outcome::Info(format!("connection-lost: {}", short(&e)))
            }
            // The server answered with an error: the command did not take effect.
            Err(e) => Outcome::Fail(short(&e)),
        }
    }
}

fn short(e: &RedisError) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}
