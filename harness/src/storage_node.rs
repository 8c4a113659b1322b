//! The run's storage node, whichever server holds the counter: a Redis node
//! (`--storage redis`) or a PostgreSQL server (`--storage postgres`, and the
//! configs that lock with PostgreSQL, whose lock lives there too).

use backend::node::RedisNode;
use backend::postgres::PostgresNode;

pub enum StorageNode {
    Redis(RedisNode),
    Postgres(PostgresNode),
}

impl StorageNode {
    pub fn name(&self) -> &str {
        match self {
            StorageNode::Redis(n) => n.name(),
            StorageNode::Postgres(n) => n.name(),
        }
    }

    pub fn addr(&self) -> String {
        match self {
            StorageNode::Redis(n) => n.addr(),
            StorageNode::Postgres(n) => n.addr(),
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            StorageNode::Redis(n) => n.pid(),
            StorageNode::Postgres(n) => n.pid(),
        }
    }

    pub async fn died(&mut self) -> Option<String> {
        match self {
            StorageNode::Redis(n) => n.died().await,
            StorageNode::Postgres(n) => n.died().await,
        }
    }

    pub fn node_ref(&self) -> nemesis::NodeRef {
        match self {
            StorageNode::Redis(n) => n.node_ref(),
            StorageNode::Postgres(n) => n.node_ref(),
        }
    }

    pub async fn kill(&mut self) -> Option<u32> {
        match self {
            StorageNode::Redis(n) => n.kill().await,
            StorageNode::Postgres(n) => n.kill().await,
        }
    }

    pub async fn restart(&mut self) -> backend::Result<()> {
        match self {
            StorageNode::Redis(n) => n.restart().await,
            StorageNode::Postgres(n) => n.restart().await,
        }
    }

    pub async fn remove(&mut self) {
        match self {
            StorageNode::Redis(n) => n.remove().await,
            StorageNode::Postgres(n) => n.remove().await,
        }
    }
}
