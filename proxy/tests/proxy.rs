//! The proxy alone, against real `redis-server` and `redis-sentinel`
//! processes on 127.0.0.1: what a trap holds arrives late and nothing else
//! does, a dropped reply's command still applied, pipelined requests keep
//! their order, Sentinel names the proxy, a cut drops and then resets, and
//! nothing listens after shutdown.

use proxy::{Act, Class, Fabric, Keys, Role, Spec, Trap, Upstream, WriteArg};
use redis::Commands;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use testkit::{Builder, Server};

const LOCK: &str = "lockstorm:lock";

/// A real redis-server on loopback, stopped when dropped.
fn redis() -> Server {
    Builder::redis().start()
}

/// A Sentinel watching `primary` as `mm`.
fn sentinel(primary: SocketAddr) -> Server {
    Builder::sentinel()
        .config(&format!(
            "sentinel monitor mm {} {} 1",
            primary.ip(),
            primary.port()
        ))
        .start()
}

fn spec(workers: usize, upstreams: Vec<Upstream>) -> Spec {
    Spec {
        workers: vec![Ipv4Addr::LOCALHOST; workers],
        onward_from_workers: true,
        upstreams,
        keys: Keys {
            lock: LOCK.into(),
            counter: "lockstorm:counter".into(),
            write_arg: WriteArg {
                index: 1,
                value: "w".into(),
            },
        },
        latency: None,
        seed: 7,
    }
}

fn node(name: &str, s: &Server, role: Role) -> Upstream {
    Upstream {
        name: name.into(),
        addr: s.addr(),
        role,
    }
}

fn conn(addr: SocketAddr) -> redis::Connection {
    let c = redis::Client::open(format!("redis://{addr}/")).unwrap();
    let c = c.get_connection().unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c
}

fn acquire(c: &mut redis::Connection, token: &str) -> redis::RedisResult<Option<String>> {
    redis::cmd("SET")
        .arg(LOCK)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(10_000)
        .query(c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_arrives_late_and_nothing_else_waits() {
    let redis = redis();
    let fabric = Fabric::start(spec(2, vec![node("n1", &redis, Role::Lock)]))
        .await
        .unwrap();
    let (a, b) = (fabric.addr(0, "n1").unwrap(), fabric.addr(1, "n1").unwrap());
    let hold = Duration::from_millis(600);
    let armed = fabric.arm(Trap {
        workers: Some(vec![0]),
        role: Role::Lock,
        class: Class::Acquire,
        act: Act::HoldRequest(hold),
    });
    let started = Instant::now();
    let held = tokio::task::spawn_blocking(move || {
        let mut c = conn(a);
        let _: String = redis::cmd("PING").query(&mut c).unwrap();
        let t = Instant::now();
        let r = acquire(&mut c, "held");
        (t.elapsed(), r)
    });
    let caught = tokio::time::timeout(Duration::from_secs(5), armed.caught)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (caught.worker, caught.node.as_str(), caught.class),
        (0, "n1", Class::Acquire)
    );
    assert!(
        caught.command.starts_with("SET lockstorm:lock held NX"),
        "{}",
        caught.command
    );
    // While it is held, the key is not set, and the other worker is not slowed.
    let node = redis.addr();
    let (direct, other) = tokio::task::spawn_blocking(move || {
        let mut direct = conn(node);
        let seen: Option<String> = direct.get(LOCK).unwrap();
        let mut c = conn(b);
        let t = Instant::now();
        let _: Option<String> = c.get("something-else").unwrap();
        (seen, t.elapsed())
    })
    .await
    .unwrap();
    assert_eq!(direct, None, "a held request has not reached the node");
    assert!(
        other < Duration::from_millis(300),
        "another worker waited {other:?}"
    );
    let (took, reply) = held.await.unwrap();
    assert_eq!(
        reply.unwrap().as_deref(),
        Some("OK"),
        "it arrives, late, and applies"
    );
    assert!(took >= hold, "held {took:?}, asked {hold:?}");
    let sprung = armed.done.await.unwrap();
    assert!(sprung.held_ms >= 600 && !sprung.cut_short, "{sprung:?}");
    assert_eq!(
        (sprung.reply.as_deref(), sprung.accepted),
        (Some("+OK"), Some(true)),
        "what the node made of it"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    fabric.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_reply_leaves_the_command_applied_and_the_client_reset() {
    let redis = redis();
    let fabric = Fabric::start(spec(1, vec![node("n1", &redis, Role::Lock)]))
        .await
        .unwrap();
    let a = fabric.addr(0, "n1").unwrap();
    let armed = fabric.arm(Trap {
        workers: None,
        role: Role::Lock,
        class: Class::Acquire,
        act: Act::DropReply,
    });
    // A refused acquire's reply passes: only a grant is worth losing.
    let direct = redis.addr();
    let refused = tokio::task::spawn_blocking(move || {
        let _: () = conn(direct).set(LOCK, "someone").unwrap();
        let refused = acquire(&mut conn(a), "refused");
        let _: () = conn(direct).del(LOCK).unwrap();
        refused
    })
    .await
    .unwrap();
    assert_eq!(refused.unwrap(), None, "a refusal reaches the client");
    let reply = tokio::task::spawn_blocking(move || acquire(&mut conn(a), "lost"))
        .await
        .unwrap();
    let e = reply.expect_err("the reply never came");
    assert!(e.is_io_error() || e.is_connection_dropped(), "{e}");
    let sprung = armed.done.await.unwrap();
    assert_eq!((sprung.reset, sprung.caught.class), (1, Class::Acquire));
    assert!(sprung.bytes > 0);
    let node = redis.addr();
    let seen: Option<String> = tokio::task::spawn_blocking(move || conn(node).get(LOCK).unwrap())
        .await
        .unwrap();
    assert_eq!(
        seen.as_deref(),
        Some("lost"),
        "the node applied what the client never heard of"
    );
    fabric.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_keep_their_order_under_latency() {
    let redis = redis();
    let mut s = spec(1, vec![node("n1", &redis, Role::Lock)]);
    s.latency = Some((Duration::ZERO, Duration::from_millis(2)));
    let fabric = Fabric::start(s).await.unwrap();
    let a = fabric.addr(0, "n1").unwrap();
    let replies: Vec<i64> = tokio::task::spawn_blocking(move || {
        let mut pipe = redis::pipe();
        for _ in 0..200 {
            pipe.cmd("INCR").arg("n");
        }
        pipe.query(&mut conn(a)).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(replies, (1..=200).collect::<Vec<i64>>());
    assert!(fabric.requests() >= 200);
    fabric.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_names_the_proxy_for_the_primary() {
    let redis = redis();
    let sentinel = sentinel(redis.addr());
    let fabric = Fabric::start(spec(
        2,
        vec![
            node("n1", &redis, Role::Lock),
            node("s1", &sentinel, Role::Sentinel),
        ],
    ))
    .await
    .unwrap();
    let (s1, n1) = (fabric.addr(1, "s1").unwrap(), fabric.addr(1, "n1").unwrap());
    let (named, masters): (
        (String, u16),
        Vec<std::collections::HashMap<String, String>>,
    ) = tokio::task::spawn_blocking(move || {
        let mut c = conn(s1);
        let named = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("mm")
            .query(&mut c)
            .unwrap();
        let masters = redis::cmd("SENTINEL").arg("masters").query(&mut c).unwrap();
        (named, masters)
    })
    .await
    .unwrap();
    assert_eq!(
        named,
        (n1.ip().to_string(), n1.port()),
        "worker 1's proxy for n1, not n1 itself ({})",
        redis.addr()
    );
    assert_eq!(masters[0]["port"], n1.port().to_string());
    fabric.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_drops_both_ways_then_resets_and_heals() {
    let redis = redis();
    let fabric = Fabric::start(spec(2, vec![node("n1", &redis, Role::Lock)]))
        .await
        .unwrap();
    let a = fabric.addr(0, "n1").unwrap();
    let mut before = tokio::task::spawn_blocking(move || conn(a)).await.unwrap();
    fabric.cut(&[(0, "n1".into())]).unwrap();
    let short = Duration::from_millis(300);
    assert!(
        !fabric.answers(0, "n1", short).await.unwrap(),
        "a cut link answers no PING"
    );
    assert!(
        fabric.answers(1, "n1", short).await.unwrap(),
        "an uncut worker still reaches the node"
    );
    let (before, timed_out) = tokio::task::spawn_blocking(move || {
        before
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let r: redis::RedisResult<String> = redis::cmd("PING").query(&mut before);
        (before, r.is_err_and(|e| e.is_timeout()))
    })
    .await
    .unwrap();
    assert!(timed_out, "an open connection across the cut hears nothing");
    let report = fabric.heal();
    assert!(report.dropped_bytes > 0, "{report:?}");
    assert!(
        fabric
            .answers(0, "n1", Duration::from_secs(2))
            .await
            .unwrap(),
        "healed"
    );
    drop(before);
    fabric.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_listens_after_shutdown() {
    let redis = redis();
    // Listeners on an address no other test binds: on 127.0.0.1 another
    // test's proxy or server took a port this one had just freed, and the
    // check below found it listening.
    let mut spec = spec(2, vec![node("n1", &redis, Role::Lock)]);
    spec.workers = vec![Ipv4Addr::new(127, 0, 99, 1), Ipv4Addr::new(127, 0, 99, 2)];
    spec.onward_from_workers = false;
    let fabric = Fabric::start(spec).await.unwrap();
    let addrs = [fabric.addr(0, "n1").unwrap(), fabric.addr(1, "n1").unwrap()];
    let open = tokio::task::spawn_blocking(move || conn(addrs[0]))
        .await
        .unwrap();
    fabric.shutdown().await;
    // A redis-server another test forks in this process holds a copy of
    // every open socket until it execs: the listener can outlive the
    // fabric by that long (CI saw it once), never by a second.
    for a in addrs {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while std::net::TcpStream::connect(a).is_ok() {
            assert!(std::time::Instant::now() < deadline, "{a} still listens");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let mut open = open;
    let r: redis::RedisResult<String> =
        tokio::task::spawn_blocking(move || redis::cmd("PING").query(&mut open))
            .await
            .unwrap();
    assert!(r.is_err(), "an open connection ended with the fabric");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_still_arrives_after_its_client_gave_up() {
    let redis = redis();
    let fabric = Fabric::start(spec(1, vec![node("n1", &redis, Role::Lock)]))
        .await
        .unwrap();
    let a = fabric.addr(0, "n1").unwrap();
    let armed = fabric.arm(Trap {
        workers: None,
        role: Role::Lock,
        class: Class::Acquire,
        act: Act::HoldRequest(Duration::from_millis(500)),
    });
    let gave_up = tokio::task::spawn_blocking(move || {
        let mut c = conn(a);
        c.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        acquire(&mut c, "late").is_err_and(|e| e.is_timeout())
    })
    .await
    .unwrap();
    assert!(gave_up, "the client timed out and closed its connection");
    let sprung = armed.done.await.unwrap();
    assert!(sprung.held_ms >= 500);
    assert_eq!(
        sprung.accepted,
        Some(true),
        "the node's reply is read though nobody waits for it"
    );
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let seen: Option<String> = tokio::task::spawn_blocking({
            let addr = redis.addr();
            move || conn(addr).get(LOCK).unwrap()
        })
        .await
        .unwrap();
        if seen.as_deref() == Some("late") {
            break;
        }
        assert!(Instant::now() < deadline, "the late request never landed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fabric.shutdown().await;
}
