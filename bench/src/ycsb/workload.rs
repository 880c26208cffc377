//! CoreWorkload's decisions, without I/O: which operation comes next, on which key, with which
//! fields and values, for the load phase (sequential inserts) and the run phase (the mix).
//!
//! The runner ([`super::runner`]) carries the decisions out and times them; keeping them here
//! makes the key naming, field sizes and mixes testable without a database.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

use super::generator::{
    AckWindowFull, AcknowledgedCounterGenerator, CounterGenerator, DiscreteGenerator, KeyChooser, NumberGenerator,
    ScrambledZipfianGenerator, SkewedLatestGenerator, UniformGenerator, ZipfianGenerator, build_key_name,
};
use super::props::{Distribution, LengthDistribution, Workload};

/// Bound on redraws when a chosen key lies beyond the inserted ones (YCSB redraws forever).
const MAX_KEY_REDRAWS: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
}

impl OpKind {
    /// YCSB's name for the operation in its reports.
    pub fn ycsb_name(self) -> &'static str {
        match self {
            OpKind::Read => "READ",
            OpKind::Update => "UPDATE",
            OpKind::Insert => "INSERT",
            OpKind::Scan => "SCAN",
            OpKind::ReadModifyWrite => "READ-MODIFY-WRITE",
        }
    }
}

/// One operation to carry out. `fields: None` means all fields.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `keynum` is acknowledged to the insert sequence once the insert returns (run phase).
    Insert {
        key: String,
        keynum: u64,
        values: Vec<(String, String)>,
    },
    Read {
        key: String,
        fields: Option<Vec<String>>,
    },
    Update {
        key: String,
        values: Vec<(String, String)>,
    },
    Scan {
        start: String,
        count: usize,
        fields: Option<Vec<String>>,
    },
    ReadModifyWrite {
        key: String,
        fields: Option<Vec<String>>,
        values: Vec<(String, String)>,
    },
}

/// State shared by every client thread of one phase.
pub struct Shared {
    pub workload: Workload,
    field_names: Vec<String>,
    /// Load phase: the next record to insert.
    load_keys: CounterGenerator,
    /// Run phase: records inserted so far (reads never pick a key past the acknowledged ones).
    txn_keys: Arc<AcknowledgedCounterGenerator>,
}

impl Shared {
    pub fn new(workload: Workload) -> Self {
        let field_names = workload.field_names();
        let load_keys = CounterGenerator::new(workload.insert_start);
        let txn_keys = Arc::new(AcknowledgedCounterGenerator::new(workload.record_count));
        Self { workload, field_names, load_keys, txn_keys }
    }

    /// Run phase: the insert `keynum` returned (whatever its outcome, as YCSB does). Fails only
    /// when a million inserts are outstanding behind one that never returned.
    pub fn acknowledge(&self, keynum: u64) -> Result<(), AckWindowFull> {
        self.txn_keys.acknowledge(keynum)
    }

    pub fn key_name(&self, keynum: u64) -> String {
        build_key_name(keynum, self.workload.zero_padding, self.workload.ordered_inserts)
    }
}

enum LengthChooser {
    Constant(usize),
    Uniform(UniformGenerator),
    Zipfian(ZipfianGenerator),
}

impl LengthChooser {
    fn next(&mut self, rng: &mut SmallRng) -> usize {
        match self {
            LengthChooser::Constant(n) => *n,
            LengthChooser::Uniform(g) => g.next(rng) as usize,
            LengthChooser::Zipfian(g) => g.next(rng) as usize,
        }
    }
}

/// One client thread's generators.
pub struct ClientWorkload {
    shared: Arc<Shared>,
    rng: SmallRng,
    keys: KeyChooser,
    field_chooser: UniformGenerator,
    field_length: LengthChooser,
    scan_length: LengthChooser,
    ops: DiscreteGenerator<OpKind>,
}

impl ClientWorkload {
    pub fn new(shared: Arc<Shared>, seed: u64) -> Self {
        let w = &shared.workload;
        let expected_new_keys = (w.operation_count as f64 * w.insert_proportion * 2.0) as u64;
        let keys = match w.request_distribution {
            Distribution::Uniform => {
                KeyChooser::Uniform(UniformGenerator::new(w.insert_start, w.insert_start + w.insert_count - 1))
            }
            Distribution::Zipfian => KeyChooser::Zipfian(ScrambledZipfianGenerator::new(
                w.insert_start,
                w.insert_start + w.insert_count + expected_new_keys,
            )),
            Distribution::Latest => KeyChooser::Latest(SkewedLatestGenerator::new(Arc::clone(&shared.txn_keys))),
        };
        let field_length = match w.field_length_distribution {
            LengthDistribution::Constant => LengthChooser::Constant(w.field_length),
            LengthDistribution::Uniform => {
                LengthChooser::Uniform(UniformGenerator::new(w.min_field_length as u64, w.field_length as u64))
            }
        };
        let (min, max) = (w.min_scan_length as u64, w.max_scan_length as u64);
        let scan_length = match w.scan_length_distribution {
            Distribution::Zipfian => LengthChooser::Zipfian(ZipfianGenerator::new(min, max)),
            _ => LengthChooser::Uniform(UniformGenerator::new(min, max)),
        };
        let mut ops = DiscreteGenerator::new();
        for (p, op) in [
            (w.read_proportion, OpKind::Read),
            (w.update_proportion, OpKind::Update),
            (w.insert_proportion, OpKind::Insert),
            (w.scan_proportion, OpKind::Scan),
            (w.rmw_proportion, OpKind::ReadModifyWrite),
        ] {
            if p > 0.0 {
                ops.add(p, op);
            }
        }
        let field_chooser = UniformGenerator::new(0, w.field_count as u64 - 1);
        Self { rng: SmallRng::seed_from_u64(seed), keys, field_chooser, field_length, scan_length, ops, shared }
    }

    /// Load phase: the next record to insert, or `None` once `insertcount` records are handed out.
    pub fn next_load(&mut self) -> Option<Action> {
        let w = &self.shared.workload;
        let keynum = self.shared.load_keys.next();
        if keynum >= w.insert_start + w.insert_count {
            return None;
        }
        let key = self.shared.key_name(keynum);
        Some(Action::Insert { key, keynum, values: self.all_values() })
    }

    /// Run phase: the next operation of the mix.
    pub fn next_run(&mut self) -> Action {
        // Validation guarantees a positive proportion in the run phase; reads are the fallback.
        match self.ops.next(&mut self.rng).unwrap_or(OpKind::Read) {
            OpKind::Read => Action::Read { key: self.existing_key(), fields: self.read_fields() },
            OpKind::Update => Action::Update { key: self.existing_key(), values: self.write_values() },
            OpKind::Insert => {
                let keynum = self.shared.txn_keys.next();
                Action::Insert { key: self.shared.key_name(keynum), keynum, values: self.all_values() }
            }
            OpKind::Scan => {
                let start = self.existing_key();
                let count = self.scan_length.next(&mut self.rng).max(1);
                Action::Scan { start, count, fields: self.read_fields() }
            }
            OpKind::ReadModifyWrite => {
                let key = self.existing_key();
                Action::ReadModifyWrite { key, fields: self.read_fields(), values: self.write_values() }
            }
        }
    }

    /// A key of a record already inserted: the chooser's pick, redrawn while it lies beyond the
    /// acknowledged inserts (zipfian over-provisions for the keys inserts will add).
    fn existing_key(&mut self) -> String {
        let limit = self.shared.txn_keys.last();
        let mut keynum = limit;
        for _ in 0..MAX_KEY_REDRAWS {
            let k = self.keys.next(&mut self.rng);
            if k <= limit {
                keynum = k;
                break;
            }
        }
        self.shared.key_name(keynum)
    }

    fn read_fields(&mut self) -> Option<Vec<String>> {
        if self.shared.workload.read_all_fields {
            return None;
        }
        Some(vec![self.random_field_name()])
    }

    fn random_field_name(&mut self) -> String {
        let i = self.field_chooser.next(&mut self.rng) as usize;
        self.shared.field_names[i].clone()
    }

    fn write_values(&mut self) -> Vec<(String, String)> {
        if self.shared.workload.write_all_fields {
            return self.all_values();
        }
        let name = self.random_field_name();
        vec![(name, self.value())]
    }

    fn all_values(&mut self) -> Vec<(String, String)> {
        let names = self.shared.field_names.clone();
        names.into_iter().map(|name| (name, self.value())).collect()
    }

    /// A random printable-ASCII string of the field length (YCSB fills fields with random bytes
    /// mapped to printable characters).
    fn value(&mut self) -> String {
        let len = self.field_length.next(&mut self.rng);
        let mut bytes = vec![0u8; len];
        self.rng.fill_bytes(&mut bytes);
        for b in &mut bytes {
            *b = b' ' + (*b % 95);
        }
        // Every byte is in 0x20..=0x7e, so this never fails; the fallback keeps the length anyway.
        String::from_utf8(bytes).unwrap_or_else(|_| " ".repeat(len))
    }

    /// A uniformly random number in `0..n`, for the runner's retry jitter.
    pub fn jitter(&mut self, n: u64) -> u64 {
        self.rng.random_range(0..n.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ycsb::props::Properties;

    fn shared(props: &str) -> Arc<Shared> {
        let mut p = Properties::default();
        p.load_str("test", props).expect("props");
        Arc::new(Shared::new(Workload::from_properties(&p, true).expect("workload")))
    }

    #[test]
    fn load_hands_out_each_record_once_with_full_fields() {
        let s = shared("recordcount=50\nfieldcount=4\nfieldlength=32\ninsertorder=ordered\nzeropadding=3");
        let (mut a, mut b) = (ClientWorkload::new(Arc::clone(&s), 1), ClientWorkload::new(Arc::clone(&s), 2));
        let mut keys = Vec::new();
        loop {
            let next = if keys.len() % 2 == 0 { a.next_load() } else { b.next_load() };
            let Some(Action::Insert { key, values, .. }) = next else { break };
            assert_eq!(values.len(), 4);
            assert!(values.iter().all(|(_, v)| v.len() == 32 && v.bytes().all(|c| (0x20..0x7f).contains(&c))));
            assert_eq!(values[3].0, "field3");
            keys.push(key);
        }
        assert_eq!(keys.len(), 50);
        assert_eq!(keys[0], "user000");
        assert_eq!(keys[49], "user049");
        assert!(a.next_load().is_none());
    }

    #[test]
    fn hashed_keys_are_user_and_the_fnv_of_the_number() {
        let s = shared("recordcount=3");
        let mut c = ClientWorkload::new(s, 7);
        let Some(Action::Insert { key, keynum, .. }) = c.next_load() else { panic!("no insert") };
        assert_eq!(keynum, 0);
        assert_eq!(key, build_key_name(0, 1, false));
        assert!(key.starts_with("user") && key[4..].parse::<u64>().is_ok() && key != "user0");
    }

    #[test]
    fn run_mix_follows_the_proportions_and_reads_only_loaded_keys() {
        let s = shared(
            "recordcount=100\noperationcount=20000\nreadproportion=0.8\nupdateproportion=0.2\nrequestdistribution=zipfian\ninsertorder=ordered\nreadallfields=false",
        );
        let mut c = ClientWorkload::new(s, 3);
        let (mut reads, mut updates) = (0, 0);
        for _ in 0..20_000 {
            match c.next_run() {
                Action::Read { key, fields } => {
                    reads += 1;
                    assert!(key[4..].parse::<u64>().is_ok_and(|k| k < 100), "{key}");
                    assert_eq!(fields.map(|f| f.len()), Some(1));
                }
                Action::Update { values, .. } => {
                    updates += 1;
                    assert_eq!(values.len(), 1);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        let share = reads as f64 / 20_000.0;
        assert!((share - 0.8).abs() < 0.02, "read share {share}");
        assert_eq!(reads + updates, 20_000);
    }

    #[test]
    fn inserts_in_the_run_phase_extend_the_key_space() {
        let s = shared("recordcount=10\nreadproportion=0\nupdateproportion=0\ninsertproportion=1\ninsertorder=ordered");
        let mut c = ClientWorkload::new(Arc::clone(&s), 5);
        let Action::Insert { key, keynum, .. } = c.next_run() else { panic!("not an insert") };
        assert_eq!((key.as_str(), keynum), ("user10", 10));
        assert!(s.acknowledge(keynum).is_ok());
    }

    #[test]
    fn scans_stay_within_the_length_bounds() {
        let s = shared(
            "recordcount=100\nreadproportion=0\nupdateproportion=0\nscanproportion=1\nminscanlength=2\nmaxscanlength=5",
        );
        let mut c = ClientWorkload::new(s, 9);
        for _ in 0..1000 {
            let Action::Scan { count, .. } = c.next_run() else { panic!("not a scan") };
            assert!((2..=5).contains(&count));
        }
    }
}
