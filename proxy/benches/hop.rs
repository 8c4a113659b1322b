//! The proxy's hop: one request's round trip to a real `redis-server` on
//! loopback, directly and through the proxy (with nothing armed, and with
//! a trap armed for another command, which every request is checked
//! against). `cargo bench -p proxy --bench hop`; the figures are in
//! docs/benchmarks.md.

use criterion::{criterion_group, criterion_main, Criterion};
use proxy::{Act, Class, Fabric, Keys, Role, Spec, Trap, Upstream, WriteArg};
use std::net::{Ipv4Addr, SocketAddr};

fn connect(addr: SocketAddr) -> redis::RedisResult<redis::Connection> {
    let mut c = redis::Client::open(format!("redis://{addr}/"))?.get_connection()?;
    redis::cmd("PING").query::<String>(&mut c)?;
    Ok(c)
}

fn hop(c: &mut Criterion) {
    let server = testkit::Builder::redis().start();
    let addr = server.addr();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let fabric = runtime
        .block_on(Fabric::start(Spec {
            workers: vec![Ipv4Addr::LOCALHOST],
            onward_from_workers: true,
            upstreams: vec![Upstream {
                name: "n1".into(),
                addr,
                role: Role::Lock,
            }],
            keys: Keys {
                lock: "lockstorm:lock".into(),
                counter: "lockstorm:counter".into(),
                write_arg: WriteArg {
                    index: 1,
                    value: "w".into(),
                },
            },
            latency: None,
            seed: 1,
        }))
        .unwrap();
    let proxied = fabric.addr(0, "n1").unwrap();
    let mut group = c.benchmark_group("proxy-hop");
    for (name, target) in [("direct", addr), ("proxied", proxied)] {
        let mut conn = connect(target).unwrap();
        group.bench_function(format!("SET NX round trip, {name}"), |b| {
            b.iter(|| {
                let _: Option<String> = redis::cmd("SET")
                    .arg("lockstorm:lock")
                    .arg("t")
                    .arg("NX")
                    .arg("PX")
                    .arg(50)
                    .query(&mut conn)
                    .unwrap();
            })
        });
    }
    // Every request is checked against the armed traps: one that never
    // matches (a release) is the cost of a fault waiting for its command.
    let _armed = fabric.arm(Trap {
        workers: None,
        role: Role::Lock,
        class: Class::Release,
        act: Act::DropReply,
    });
    let mut conn = connect(proxied).unwrap();
    group.bench_function("SET NX round trip, proxied, a trap armed", |b| {
        b.iter(|| {
            let _: Option<String> = redis::cmd("SET")
                .arg("lockstorm:lock")
                .arg("t")
                .arg("NX")
                .arg("PX")
                .arg(50)
                .query(&mut conn)
                .unwrap();
        })
    });
    group.finish();
    runtime.block_on(fabric.shutdown());
}

criterion_group!(benches, hop);
criterion_main!(benches);
