//! Labeled gauges filled when the registry is scraped ([`crate::Metrics::pulled_vec`]).

use std::sync::{Arc, Mutex};

use prometheus::GaugeVec;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;

pub(crate) type Fill = Arc<dyn Fn(&GaugeVec) + Send + Sync>;

pub(crate) struct PulledVec {
    gauges: GaugeVec,
    fill: Fill,
    /// Two scrapes at once would interleave one's reset with the other's fill.
    scrape: Mutex<()>,
}

impl PulledVec {
    pub(crate) fn new(gauges: GaugeVec, fill: Fill) -> Self {
        Self { gauges, fill, scrape: Mutex::new(()) }
    }
}

impl Collector for PulledVec {
    fn desc(&self) -> Vec<&Desc> {
        self.gauges.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _one = self.scrape.lock().unwrap_or_else(|p| p.into_inner());
        self.gauges.reset();
        (self.fill)(&self.gauges);
        self.gauges.collect()
    }
}
