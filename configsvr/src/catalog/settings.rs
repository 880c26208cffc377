//! Validated changes of the cluster-wide settings (`config.settings`); the settings themselves
//! are `shoal_proto`'s values.

use super::{
    CHUNK_SIZE_MIB_MAX, CHUNK_SIZE_MIB_MIN, CatalogError, Settings, SettingsUpdate, WindowChange, parse_hh_mm,
};

/// The settings after `update`, or why the update is invalid.
pub(crate) fn updated(settings: &Settings, update: &SettingsUpdate) -> Result<Settings, CatalogError> {
    let mut next = settings.clone();
    if let Some(mode) = update.balancer_mode {
        next.balancer_mode = mode;
    }
    match &update.active_window {
        None => {}
        Some(WindowChange::Clear) => next.active_window = None,
        Some(WindowChange::Set(w)) => {
            for t in [&w.start, &w.stop] {
                if parse_hh_mm(t).is_none() {
                    return Err(CatalogError::bad_value("activeWindow", format!("'{t}' is not HH:MM")));
                }
            }
            next.active_window = Some(w.clone());
        }
    }
    if let Some(mib) = update.chunk_size_mib {
        check_chunk_size_mib(mib)?;
        next.chunk_size_mib = mib;
    }
    if let Some(on) = update.autosplit {
        next.autosplit = on;
    }
    if let Some(on) = update.automerge {
        next.automerge = on;
    }
    Ok(next)
}

pub(crate) fn check_chunk_size_mib(mib: u32) -> Result<(), CatalogError> {
    if (CHUNK_SIZE_MIB_MIN..=CHUNK_SIZE_MIB_MAX).contains(&mib) {
        Ok(())
    } else {
        Err(CatalogError::bad_value(
            "chunk size",
            format!("{mib} MiB is outside {CHUNK_SIZE_MIB_MIN}..={CHUNK_SIZE_MIB_MAX}"),
        ))
    }
}
