//! What this shard knows about sharding: its id in the catalog, a client of the config servers,
//! and the migration critical sections that hold writes back ([`critical_section`]).
//!
//! Must not: decide placement (the catalog and routers do), or call the storage engine directly.

pub mod critical_section;

use shoal_configsvr::client::{ClientSettings, ConfigClient};

pub use critical_section::{CriticalSection, Gates, WritePermit};

pub struct ShardingState {
    shard_id: String,
    catalog: Option<ConfigClient>,
    pub gates: Gates,
}

impl ShardingState {
    /// `config_servers` empty: a shard outside any cluster (tests, benchmarks); requests without a
    /// shard version work as before, versioned ones are refused.
    pub fn new(shard_id: impl Into<String>, config_servers: &[String]) -> Self {
        let catalog =
            (!config_servers.is_empty()).then(|| ConfigClient::new(config_servers.to_vec(), ClientSettings::default()));
        Self { shard_id: shard_id.into(), catalog, gates: Gates::default() }
    }

    /// This shard's id in the catalog (`config.shards._id`).
    pub fn shard_id(&self) -> &str {
        &self.shard_id
    }

    pub fn catalog(&self) -> Option<&ConfigClient> {
        self.catalog.as_ref()
    }
}
