//! Cluster-wide settings (`config.settings`): balancer mode and window, chunk size, autosplit,
//! automerge. The config service changes them only by whole, validated updates, so a stored
//! value is always valid.

use serde::{Deserialize, Serialize};

/// MongoDB's default chunk size since 6.0.
pub const CHUNK_SIZE_MIB_DEFAULT: u32 = 128;
/// MongoDB accepts chunk sizes 1..=1024 MiB.
pub const CHUNK_SIZE_MIB_MIN: u32 = 1;
pub const CHUNK_SIZE_MIB_MAX: u32 = 1024;

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BalancerMode {
    Full,
    Off,
}

/// When the balancer may run: local wall-clock times `"HH:MM"`; `stop` before `start` spans
/// midnight.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ActiveWindow {
    pub start: String,
    pub stop: String,
}

impl ActiveWindow {
    /// Whether `minute_of_day` (0..1440) falls inside the window; `start == stop` means all day.
    pub fn contains(&self, minute_of_day: u32) -> bool {
        let (Some(start), Some(stop)) = (parse_hh_mm(&self.start), parse_hh_mm(&self.stop)) else {
            return false;
        };
        if start <= stop {
            start == stop || (start..stop).contains(&minute_of_day)
        } else {
            minute_of_day >= start || minute_of_day < stop
        }
    }
}

/// Minutes since midnight of `"H:MM"`/`"HH:MM"`; `None` if it is not such a time.
pub fn parse_hh_mm(s: &str) -> Option<u32> {
    let (h, m) = s.split_once(':')?;
    let digits = |p: &str, max_len| !p.is_empty() && p.len() <= max_len && p.bytes().all(|b| b.is_ascii_digit());
    if !digits(h, 2) || !digits(m, 2) || m.len() != 2 {
        return None;
    }
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub balancer_mode: BalancerMode,
    pub active_window: Option<ActiveWindow>,
    pub chunk_size_mib: u32,
    pub autosplit: bool,
    pub automerge: bool,
}

impl Default for Settings {
    /// MongoDB's defaults when `config.settings` has no documents.
    fn default() -> Self {
        Self {
            balancer_mode: BalancerMode::Full,
            active_window: None,
            chunk_size_mib: CHUNK_SIZE_MIB_DEFAULT,
            autosplit: true,
            automerge: true,
        }
    }
}

impl Settings {
    pub fn balancer_enabled(&self) -> bool {
        self.balancer_mode == BalancerMode::Full
    }

    pub fn chunk_size_bytes(&self) -> u64 {
        u64::from(self.chunk_size_mib) * 1024 * 1024
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows() {
        assert_eq!(parse_hh_mm("23:59"), Some(1439));
        assert_eq!(parse_hh_mm("1:05"), Some(65));
        for bad in ["24:00", "12:60", "12:5", "x:00", "12", ":30", "123:00", ""] {
            assert_eq!(parse_hh_mm(bad), None, "{bad}");
        }
        let night = ActiveWindow { start: "23:00".into(), stop: "02:00".into() };
        assert!(night.contains(23 * 60) && night.contains(60) && !night.contains(2 * 60) && !night.contains(600));
        let day = ActiveWindow { start: "08:00".into(), stop: "17:00".into() };
        assert!(day.contains(8 * 60) && !day.contains(17 * 60));
    }
}
